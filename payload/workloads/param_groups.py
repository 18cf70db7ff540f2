"""How the optimizer groups the model's parameters, and which collectives each group needs (pure: no torch).

One definition serves the optimizer (``payload.workloads.optim``), the communication-volume model
(``payload.workloads.commvolume``) and the memory estimate (``payload.workloads.memory_estimate``), so the prediction is
the plan the optimizer executes. Every collective moves a parameter in **its own dtype**
(``ModelDims.parameters()``: wte and the value embeddings bf16, everything else f32), as upstream.

AdamW: ``wte``, ``value_embeds``, ``lm_head``, ``resid_lambdas``, ``x0_lambdas``. A parameter with
fewer than 1,024 elements has its gradient all-reduced; a larger one whose first dimension divides
by the world size has its gradient reduce-scattered and its updated shard all-gathered (otherwise
it is all-reduced). Muon: every 2-D matrix in the blocks, grouped by shape ``muon(R, C)``; a group
of K matrices is stacked, zero-padded to ceil(K/W)·W, reduce-scattered so that each rank owns whole
matrices, and all-gathered after the update.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .presets import ParamSpec

if TYPE_CHECKING:
    from torch import nn

SMALL_PARAM = 1024
ADAMW_NAMES = ("wte", "value_embeds", "lm_head", "resid_lambdas", "x0_lambdas")
BYTES = {"bf16": 2, "f32": 4}
_DTYPES = {"torch.bfloat16": "bf16", "torch.float32": "f32"}


@dataclass(frozen=True)
class Collective:
    op: str  # all_reduce | reduce_scatter | all_gather
    dtype: str  # bf16 | f32
    elements: int  # the whole array (nccl-tests' "size"): input of a reduce-scatter, output of an all-gather

    @property
    def bytes(self) -> int:
        return self.elements * BYTES[self.dtype]


@dataclass(frozen=True)
class ParamGroup:
    name: str
    kind: str  # adamw | muon
    names: tuple[str, ...]  # parameter names, in model order
    shape: tuple[int, ...]  # of one parameter (every parameter of a group has the same shape)
    dtype: str  # bf16 | f32: the parameters', their gradients' and their collectives' dtype

    @property
    def elements_per_param(self) -> int:
        return math.prod(self.shape)

    def padded_count(self, world_size: int) -> int:
        if self.kind == "muon":
            return math.ceil(len(self.names) / world_size) * world_size
        return len(self.names)

    def adamw_sharded(self, world_size: int) -> bool:
        return self.elements_per_param >= SMALL_PARAM and self.shape[0] % world_size == 0

    def collectives(self, world_size: int) -> list[Collective]:
        """Collectives of one optimizer step for this group, in issue order."""
        if self.kind == "muon":
            elements = self.padded_count(world_size) * self.elements_per_param
            return [Collective("reduce_scatter", self.dtype, elements), Collective("all_gather", self.dtype, elements)]
        ops: list[Collective] = []
        for _ in self.names:
            if self.adamw_sharded(world_size):
                ops += [Collective("reduce_scatter", self.dtype, self.elements_per_param),
                        Collective("all_gather", self.dtype, self.elements_per_param)]
            else:
                ops.append(Collective("all_reduce", self.dtype, self.elements_per_param))
        return ops


def module_params(model: nn.Module) -> list[ParamSpec]:
    """A module's parameters as ``ParamSpec`` (works on the meta device)."""
    return [ParamSpec(name, tuple(p.shape), _DTYPES.get(str(p.dtype), str(p.dtype)))
            for name, p in model.named_parameters()]


def param_groups(params: Iterable[ParamSpec]) -> list[ParamGroup]:
    """The optimizer's groups: AdamW by root name, Muon by shape (block matrices), in model order."""
    adamw: dict[str, list[ParamSpec]] = {name: [] for name in ADAMW_NAMES}
    muon: dict[tuple[int, ...], list[ParamSpec]] = {}
    for param in params:
        root = param.name.split(".")[0]
        if param.dtype not in BYTES:
            raise ValueError(f"parameter {param.name} has dtype {param.dtype}; the optimizer handles bf16 and f32")
        if root in adamw:
            adamw[root].append(param)
        elif root == "blocks" and len(param.shape) == 2:
            muon.setdefault(param.shape, []).append(param)
        else:
            raise ValueError(f"parameter {param.name} belongs to no optimizer group")
    groups = [_group(root, "adamw", entries) for root, entries in adamw.items() if entries]
    groups += [_group(f"muon({shape[0]}, {shape[1]})", "muon", entries) for shape, entries in muon.items()]
    return groups


def _group(name: str, kind: str, entries: list[ParamSpec]) -> ParamGroup:
    if len({(e.shape, e.dtype) for e in entries}) != 1:
        raise ValueError(f"group {name} mixes shapes or dtypes; the optimizer stacks one shape and dtype per group")
    return ParamGroup(name, kind, tuple(e.name for e in entries), entries[0].shape, entries[0].dtype)
