"""ZeRO-2 Muon + AdamW, in three timed phases (the plan is ``payload.workloads.param_groups``), as upstream nanochat.

Phase 1 launches every gradient collective asynchronously, each in its parameter's own dtype
(all-reduce AVG for small AdamW params, reduce-scatter AVG for the rest; Muon groups are stacked
into one zero-padded buffer first). Phase 2 waits for each, updates the shard this rank owns in
place (AdamW: moments in the parameter's dtype, arithmetic in f32; Muon: Nesterov momentum +
Newton–Schulz in bf16, each rank on the matrices it owns only) and launches the all-gather of the updated shard (AdamW:
in place into the parameter; Muon: into the stacked buffer, reused). Phase 3 waits for the gathers
and copies the Muon stacks back. No f32 master copies: a bf16 parameter is updated in bf16, as
upstream. Works at any world size, 1 included. With ``compile=True`` (GPU) the two update functions
run ``torch.compile``d (``dynamic=False, fullgraph=True``), as upstream; they compile on the first
step, which the profile runs untimed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .param_groups import ParamGroup, module_params, param_groups


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
    """Approximate orthogonalisation of a batch of matrices (…, R, C) (quintic iteration), in bf16 as
    upstream: the iterate is bf16 from the start, so every matmul runs on bf16 tensor cores. Returns bf16."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.bfloat16()
    transposed = x.size(-2) > x.size(-1)
    if transposed:
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.mT if transposed else x


def adamw_step(p: torch.Tensor, grad: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step_t: torch.Tensor,
               lr_t: torch.Tensor, beta1: float, beta2: float, eps: float) -> None:
    """AdamW on ``p`` in place; moments in its dtype, arithmetic in f32. The step count and learning rate
    are 0-D CPU tensors, as upstream, so a compiled version is not recompiled when they change."""
    p32, m32, v32, g32 = p.float(), m.float(), v.float(), grad.float()
    m32.lerp_(g32, 1 - beta1)
    v32.lerp_(g32.square(), 1 - beta2)
    denom = (v32 / (1 - beta2 ** step_t)).sqrt() + eps
    p32.add_(m32 / denom * (-lr_t / (1 - beta1 ** step_t)))
    p.copy_(p32)  # no-ops where the tensors are already f32
    m.copy_(m32)
    v.copy_(v32)


def muon_step(grads: torch.Tensor, params: torch.Tensor, momentum: torch.Tensor, beta: float,
              lr_t: torch.Tensor) -> None:
    """Muon on a stack of matrices in place: Nesterov momentum (``grads`` is overwritten), Newton–Schulz
    in bf16, ``params -= lr · update``."""
    momentum.lerp_(grads, 1 - beta)
    update = newton_schulz(grads.lerp_(momentum, beta))
    params.sub_(lr_t * update.to(params.dtype))


@dataclass
class _Pending:
    group: ParamGroup
    index: int  # parameter index in the group (AdamW), -1 for a Muon group
    work: Any
    buffer: torch.Tensor  # the reduced gradient (shard): reduce-scatter output, or the all-reduced gradient
    stacked: torch.Tensor | None = None  # Muon: the padded stack, reduce-scatter input then all-gather output
    gather_work: Any = None


@dataclass
class _State:
    m: torch.Tensor
    v: torch.Tensor | None = None
    steps: int = 0


class ZeroMuonAdamW:
    def __init__(self, model: nn.Module, rank: int, world_size: int, lrs: LearningRates | None = None,
                 compile: bool = False) -> None:
        self.rank, self.world = rank, world_size
        self.lrs = lrs or LearningRates()
        self.params = dict(model.named_parameters())
        self.groups = param_groups(module_params(model))
        self.state: dict[str, _State] = {}
        self._pending: list[_Pending] = []
        dim = getattr(getattr(model, "dims", None), "dim", 768)
        self._adam_scale = (dim / 768) ** -0.5
        self._adamw_step = torch.compile(adamw_step, dynamic=False, fullgraph=True) if compile else adamw_step
        self._muon_step = torch.compile(muon_step, dynamic=False, fullgraph=True) if compile else muon_step
        self._step_t, self._lr_t = torch.zeros(()), torch.zeros(())  # 0-D CPU tensors, refilled per call

    # -- phases ----------------------------------------------------------------------------------
    @torch.no_grad()
    def launch_reductions(self) -> None:
        """Phase 1: start every gradient collective, in the parameters' dtypes."""
        self._pending = []
        for group in self.groups:
            if group.kind == "muon":
                grads = [self._grad(n) for n in group.names]
                stacked = grads[0].new_empty((group.padded_count(self.world), *group.shape))
                torch.stack(grads, out=stacked[: len(grads)])
                stacked[len(grads):].zero_()
                owned = stacked.new_empty((stacked.size(0) // self.world, *group.shape))
                self._pending.append(_Pending(group, -1, _reduce_scatter(owned, stacked), owned, stacked))
                continue
            for i, name in enumerate(group.names):
                grad = self._grad(name)
                if group.adamw_sharded(self.world):
                    shard = grad.new_empty((grad.size(0) // self.world, *grad.shape[1:]))
                    self._pending.append(_Pending(group, i, _reduce_scatter(shard, grad), shard))
                else:
                    work = dist.all_reduce(grad, op=dist.ReduceOp.AVG, async_op=True)
                    self._pending.append(_Pending(group, i, work, grad))

    @torch.no_grad()
    def update_and_gather(self) -> None:
        """Phase 2: wait for each reduction, update the owned shard, start its all-gather."""
        for item in self._pending:
            item.work.wait()
            group = item.group
            if group.kind == "muon":
                assert item.stacked is not None
                item.gather_work = _all_gather(item.stacked, self._muon_update(group, item.buffer))
                continue
            param = self.params[group.names[item.index]].data
            if group.adamw_sharded(self.world):
                rows = param.size(0) // self.world
                owned = param[self.rank * rows:(self.rank + 1) * rows]
                self._adam_update(group, item.index, owned, item.buffer)
                item.gather_work = _all_gather(param, owned)  # in place: the shard is a view of the output
            else:
                self._adam_update(group, item.index, param, item.buffer)

    @torch.no_grad()
    def finish(self) -> None:
        """Phase 3: wait for the gathers, copy the Muon stacks into the parameters, clear gradients."""
        for item in self._pending:
            if item.gather_work is None:
                continue
            item.gather_work.wait()
            if item.group.kind == "muon":
                assert item.stacked is not None
                names = item.group.names
                torch._foreach_copy_([self.params[n].data for n in names], list(item.stacked[: len(names)].unbind(0)))
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

    def _adam_update(self, group: ParamGroup, index: int, owned: torch.Tensor, grad: torch.Tensor) -> None:
        """AdamW on ``owned`` (a view of the parameter) in place."""
        name = group.names[index]
        if name not in self.state:
            self.state[name] = _State(m=torch.zeros_like(owned), v=torch.zeros_like(owned))
        state = self.state[name]
        assert state.v is not None
        state.steps += 1
        self._step_t.fill_(state.steps)
        self._lr_t.fill_(self._adam_lr(group))
        self._adamw_step(owned, grad, state.m, state.v, self._step_t, self._lr_t, *self.lrs.betas, self.lrs.eps)

    def _muon_update(self, group: ParamGroup, grads: torch.Tensor) -> torch.Tensor:
        """The updated matrices this rank owns, as a (chunk, R, C) buffer for the all-gather (padding zero).
        Only the owned matrices are orthogonalised; ``grads`` (this rank's reduce-scatter output) is consumed."""
        chunk = grads.size(0)
        start = self.rank * chunk
        owned = min(chunk, max(0, len(group.names) - start))
        if group.name not in self.state:
            self.state[group.name] = _State(m=torch.zeros_like(grads))
        updated = torch.empty_like(grads)
        if owned:
            rows, cols = group.shape
            self._lr_t.fill_(self.lrs.matrix * math.sqrt(max(1.0, rows / cols)))
            stacked = torch.stack([self.params[n].data for n in group.names[start:start + owned]])
            self._muon_step(grads[:owned], stacked, self.state[group.name].m[:owned], self.lrs.muon_momentum,
                            self._lr_t)
            updated[:owned].copy_(stacked)
        updated[owned:].zero_()
        return updated


def _reduce_scatter(output: torch.Tensor, full: torch.Tensor) -> Any:
    """Averaging reduce-scatter; the newer name where this torch has it (nodes may run older torch)."""
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return scatter(output, full, op=dist.ReduceOp.AVG, async_op=True)


def _all_gather(output: torch.Tensor, local: torch.Tensor) -> Any:
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, local, async_op=True)
