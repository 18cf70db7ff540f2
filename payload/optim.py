"""ZeRO-2 Muon + AdamW, in three timed phases (the plan is ``payload.param_groups``).

Phase 1 launches every gradient collective asynchronously (all-reduce AVG for small AdamW params,
reduce-scatter AVG for the rest). Phase 2 waits for each, updates the shard this rank owns (fp32
master copies; AdamW, or Muon: Nesterov momentum + Newton–Schulz orthogonalisation) and launches
the all-gather of the updated shard. Phase 3 waits for the gathers and copies them into the
parameters. Works at any world size, 1 included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from payload.param_groups import ParamGroup, param_groups


@dataclass
class LearningRates:
    embedding: float = 0.2
    unembedding: float = 0.004
    scalar: float = 0.5
    matrix: float = 0.02
    betas: tuple[float, float] = (0.8, 0.95)
    eps: float = 1e-10
    muon_momentum: float = 0.95


def newton_schulz(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Approximate orthogonalisation of a batch of matrices (…, R, C) (quintic iteration)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g
    transposed = x.size(-2) > x.size(-1)
    if transposed:
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.mT if transposed else x


@dataclass
class _Pending:
    group: ParamGroup
    index: int  # parameter index in the group (AdamW), -1 for a Muon group
    work: Any
    buffer: torch.Tensor
    gathered: torch.Tensor | None = None
    gather_work: Any = None


@dataclass
class _State:
    master: torch.Tensor
    m: torch.Tensor
    v: torch.Tensor | None = None
    steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class ZeroMuonAdamW:
    def __init__(self, model: nn.Module, rank: int, world_size: int, lrs: LearningRates | None = None) -> None:
        self.rank, self.world = rank, world_size
        self.lrs = lrs or LearningRates()
        self.params = dict(model.named_parameters())
        self.groups = param_groups(model)
        self.state: dict[tuple[str, int], _State] = {}
        self._pending: list[_Pending] = []
        dim = getattr(getattr(model, "dims", None), "dim", 768)
        self._adam_scale = (dim / 768) ** -0.5

    # -- phases ----------------------------------------------------------------------------------
    def launch_reductions(self) -> None:
        """Phase 1: start every gradient collective."""
        self._pending = []
        for group in self.groups:
            if group.kind == "muon":
                grads = [self._grad(n) for n in group.names]
                stacked = torch.zeros((group.padded_count(self.world), *group.shape), dtype=torch.float32,
                                      device=grads[0].device)
                stacked[: len(grads)] = torch.stack(grads).float()
                owned = stacked.new_empty((stacked.size(0) // self.world, *group.shape))
                work = _reduce_scatter(owned, stacked)
                self._pending.append(_Pending(group, -1, work, owned))
                continue
            for i, name in enumerate(group.names):
                grad = self._grad(name)
                if group.adamw_sharded(self.world):
                    flat = grad.to(torch.bfloat16).reshape(-1)
                    shard = flat.new_empty(flat.numel() // self.world)
                    work = _reduce_scatter(shard, flat)
                    self._pending.append(_Pending(group, i, work, shard))
                else:
                    full = grad.float().clone()
                    work = dist.all_reduce(full, op=dist.ReduceOp.AVG, async_op=True)
                    self._pending.append(_Pending(group, i, work, full))

    def update_and_gather(self) -> None:
        """Phase 2: wait for each reduction, update the owned shard, start its all-gather."""
        for item in self._pending:
            item.work.wait()
            if item.group.kind == "muon":
                master = self._muon_update(item.group, item.buffer)
            elif item.group.adamw_sharded(self.world):
                master = self._adam_update(item.group, item.index, item.buffer.float(), sharded=True)
            else:
                self._adam_update(item.group, item.index, item.buffer, sharded=False)
                continue
            local = master.to(torch.bfloat16).reshape(-1)
            item.gathered = local.new_empty(local.numel() * self.world)
            item.gather_work = _all_gather(item.gathered, local)

    def finish(self) -> None:
        """Phase 3: wait for the gathers, copy into the parameters, clear gradients."""
        for item in self._pending:
            if item.gathered is None:
                continue
            item.gather_work.wait()
            group = item.group
            if group.kind == "muon":
                full = item.gathered.view(group.padded_count(self.world), *group.shape)
                for j, name in enumerate(group.names):
                    self.params[name].data.copy_(full[j])
            else:
                name = group.names[item.index]
                self.params[name].data.copy_(item.gathered.view(self.params[name].shape))
        self._pending = []
        for param in self.params.values():
            param.grad = None

    def step(self) -> None:
        self.launch_reductions()
        self.update_and_gather()
        self.finish()

    # -- updates ---------------------------------------------------------------------------------
    def _grad(self, name: str) -> torch.Tensor:
        param = self.params[name]
        return param.grad if param.grad is not None else torch.zeros_like(param)

    def _adam_lr(self, group: ParamGroup) -> float:
        lr = {"wte": self.lrs.embedding, "value_embeds": self.lrs.embedding, "lm_head": self.lrs.unembedding}
        return lr.get(group.name, self.lrs.scalar) * (self._adam_scale if group.name in lr else 1.0)

    def _adam_update(self, group: ParamGroup, index: int, grad: torch.Tensor, sharded: bool) -> torch.Tensor:
        name = group.names[index]
        param = self.params[name]
        key = (name, 0)
        if key not in self.state:
            rows = param.shape[0] // self.world
            source = param.data[self.rank * rows:(self.rank + 1) * rows] if sharded else param.data
            master = source.detach().float().clone().reshape(-1)
            self.state[key] = _State(master=master, m=torch.zeros_like(master), v=torch.zeros_like(master))
        state = self.state[key]
        assert state.v is not None
        b1, b2 = self.lrs.betas
        state.steps += 1
        grad = grad.reshape(-1)
        state.m.lerp_(grad, 1 - b1)
        state.v.lerp_(grad.square(), 1 - b2)
        m_hat = state.m / (1 - b1 ** state.steps)
        v_hat = state.v / (1 - b2 ** state.steps)
        state.master.add_(m_hat / (v_hat.sqrt() + self.lrs.eps), alpha=-self._adam_lr(group))
        if not sharded:
            param.data.copy_(state.master.view(param.shape))
        return state.master

    def _muon_update(self, group: ParamGroup, grads: torch.Tensor) -> torch.Tensor:
        key = (group.name, -1)
        per_rank = grads.size(0)
        if key not in self.state:
            master = torch.zeros_like(grads)
            for j in range(per_rank):
                index = self.rank * per_rank + j
                if index < len(group.names):
                    master[j] = self.params[group.names[index]].data.float()
            self.state[key] = _State(master=master, m=torch.zeros_like(master))
        state = self.state[key]
        beta = self.lrs.muon_momentum
        state.m.lerp_(grads, 1 - beta)
        update = newton_schulz(grads.lerp(state.m, beta))
        rows, cols = group.shape
        state.master.add_(update, alpha=-self.lrs.matrix * math.sqrt(max(1.0, rows / cols)))
        return state.master


def _reduce_scatter(output: torch.Tensor, full: torch.Tensor) -> Any:
    """Averaging reduce-scatter; the newer name where this torch has it (nodes may run older torch)."""
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return scatter(output, full, op=dist.ReduceOp.AVG, async_op=True)


def _all_gather(output: torch.Tensor, local: torch.Tensor) -> Any:
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, local, async_op=True)
