"""What one optimizer step asks of the machine, before any hardware is named (pure: no torch).

A ``Workload`` is FLOPs per token (split into the linear layers' part, which fp8 can speed up, and
attention's), tokens per step, and the optimizer's plan: per group, in the order the optimizer
issues them, its collectives (``payload.workloads.param_groups``: the plan ``payload.workloads.optim`` executes) and
the update work each rank does on what it owns (Newton–Schulz FLOPs for a Muon stack, elements for
AdamW). A nanochat preset gives all of it; a model given only by its parameter count and FLOPs per
token is taken as trained with data parallelism: one bf16 all-reduce of every gradient per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from benchctl.payload.workloads.param_groups import Collective, param_groups
from benchctl.payload.workloads.presets import ModelDims, model_dims, window_sizes

NS_STEPS = 5
"""Newton–Schulz iterations per Muon update (``payload.workloads.optim.newton_schulz``)."""


@dataclass(frozen=True)
class OptimizerGroup:
    """One optimizer group: its collectives in issue order, and the update each rank runs on its
    share (``ns_flops_per_matrix`` × ``matrices_per_rank`` for Muon; ``adamw_elements_per_rank``)."""

    name: str
    collectives: tuple[Collective, ...]
    ns_flops_per_matrix: float = 0.0
    matrices_per_rank: int = 0
    adamw_elements_per_rank: float = 0.0


@dataclass(frozen=True)
class Workload:
    name: str
    linear_flops_per_token: float
    """6 × the matmul parameters (fp8 speeds these up)."""
    attention_flops_per_token: float
    """12 · heads · head dim · Σ tokens attended per layer, as the attention kernel computes them."""
    tokens_per_step: int
    groups: tuple[OptimizerGroup, ...]
    world_size: int
    data_parallel: bool = False
    """True for a model given by parameter count: gradients all-reduced during the backward (DDP)."""

    @property
    def flops_per_token(self) -> float:
        return self.linear_flops_per_token + self.attention_flops_per_token


def newton_schulz_flops(rows: int, cols: int, steps: int = NS_STEPS) -> float:
    """FLOPs of ``steps`` quintic iterations on one (rows, cols) matrix (transposed so r <= c):
    per iteration X·Xᵀ (2r²c), gram·gram (2r³) and (…)·X (2r²c)."""
    r, c = min(rows, cols), max(rows, cols)
    return steps * (4.0 * r * r * c + 2.0 * r**3)


def attended_tokens(dims: ModelDims, seq_len: int, attention: str) -> int:
    """Σ over layers of the tokens one token attends to: a window-aware kernel (Flash-Attention)
    computes each layer's window, SDPA with a band mask computes the whole context on every layer."""
    if attention == "sdpa":
        return dims.depth * seq_len
    return sum(min(window, seq_len) for window in window_sizes(dims.depth, seq_len))


def nanochat(model: str, world_size: int, tokens_per_step: int, seq_len: int = 2048, attention: str = "fa3",
             vocab_size: int | None = None) -> Workload:
    """The nanochat preset ``model`` (``payload.workloads.presets``) at ``world_size`` ranks."""
    dims = model_dims(model, vocab_size)
    params = dims.parameters()
    embedding = sum(math.prod(p.shape) for p in params
                    if p.name.split(".")[0] in ("wte", "value_embeds") or len(p.shape) == 1)
    matmul = sum(math.prod(p.shape) for p in params) - embedding
    attention_flops = 12.0 * dims.n_head * dims.head_dim * attended_tokens(dims, seq_len, attention)
    groups = []
    for group in param_groups(params):
        ops = tuple(group.collectives(world_size))
        if group.kind == "muon":
            groups.append(OptimizerGroup(group.name, ops, newton_schulz_flops(*group.shape),
                                         group.padded_count(world_size) // world_size))
        else:
            sharded = group.adamw_sharded(world_size)
            share = group.elements_per_param / (world_size if sharded else 1)
            groups.append(OptimizerGroup(group.name, ops, adamw_elements_per_rank=share * len(group.names)))
    return Workload(model, 6.0 * matmul, attention_flops, tokens_per_step, tuple(groups), world_size)


DDP_BUCKET_BYTES = 25 * 2**20
"""torch DistributedDataParallel's default ``bucket_cap_mb`` (25 MiB): gradients are all-reduced in
buckets of this size as the backward produces them."""


def custom(params: int, flops_per_token: float, world_size: int, tokens_per_step: int,
           grad_bytes: int = 2) -> Workload:
    """A model given by its parameter count and training FLOPs per token: every gradient
    all-reduced once per step (``grad_bytes`` per element: bf16), in DDP's buckets; AdamW on all."""
    elements = params // grad_bytes * grad_bytes  # whole elements
    bucket = DDP_BUCKET_BYTES // grad_bytes
    dtype = "bf16" if grad_bytes == 2 else "f32"
    ops = tuple(Collective("all_reduce", dtype, min(bucket, elements - start))
                for start in range(0, elements, bucket)) if world_size > 1 else ()
    group = OptimizerGroup("all", ops, adamw_elements_per_rank=float(params))
    return Workload(f"{params:,} params", flops_per_token, 0.0, tokens_per_step, (group,), world_size,
                    data_parallel=True)
