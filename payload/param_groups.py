"""How the optimizer groups the model's parameters, and which collectives each group needs.

One definition serves the optimizer (``payload.optim``) and the communication-volume model
(``payload.commvolume``), so the prediction is the plan the optimizer executes.

AdamW: ``wte``, ``value_embeds``, ``lm_head``, ``resid_lambdas``, ``x0_lambdas``. A parameter with
fewer than 1,024 elements is all-reduced (f32); a larger one whose first dimension divides by the
world size is reduce-scattered (bf16) and its updated shard all-gathered (bf16); otherwise it is
all-reduced (f32). Muon: every 2-D matrix in the blocks, grouped by shape ``muon(R, C)``; a group
of K matrices is stacked, zero-padded to ceil(K/W)·W, reduce-scattered (f32) so that each rank owns
whole matrices, and all-gathered (bf16) after the update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

SMALL_PARAM = 1024
ADAMW_NAMES = ("wte", "value_embeds", "lm_head", "resid_lambdas", "x0_lambdas")
BYTES = {"bf16": 2, "f32": 4}


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
    shape: tuple[int, ...]  # of one parameter (AdamW groups may mix shapes only for value_embeds: they do not)

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
            return [Collective("reduce_scatter", "f32", elements), Collective("all_gather", "bf16", elements)]
        ops: list[Collective] = []
        for _ in self.names:
            if self.adamw_sharded(world_size):
                ops += [Collective("reduce_scatter", "bf16", self.elements_per_param),
                        Collective("all_gather", "bf16", self.elements_per_param)]
            else:
                ops.append(Collective("all_reduce", "f32", self.elements_per_param))
        return ops


def param_groups(model: nn.Module) -> list[ParamGroup]:
    """The optimizer's groups for a ``payload.model.GPT`` (works on the meta device)."""
    adamw: dict[str, list[tuple[str, tuple[int, ...]]]] = {name: [] for name in ADAMW_NAMES}
    muon: dict[tuple[int, ...], list[str]] = {}
    for name, param in model.named_parameters():
        root = name.split(".")[0]
        if root in adamw:
            adamw[root].append((name, tuple(param.shape)))
        elif root == "blocks" and param.ndim == 2:
            muon.setdefault(tuple(param.shape), []).append(name)
        else:
            raise ValueError(f"parameter {name} belongs to no optimizer group")
    groups = [ParamGroup(root, "adamw", tuple(n for n, _ in entries), entries[0][1])
              for root, entries in adamw.items() if entries]
    groups += [ParamGroup(f"muon({shape[0]}, {shape[1]})", "muon", tuple(names), shape)
               for shape, names in muon.items()]
    return groups
