"""Communication volume of one optimizer step, predicted from the model's parameters (pure: no torch).

The parameters (``ModelDims.parameters()``, checked against the real model by
``tests/payload/test_model_build.py``) are grouped by ``payload.workloads.param_groups``, the plan the
optimizer executes. Bytes per call are the whole array a collective works on (nccl-tests' size:
the input of a reduce-scatter, the output of an all-gather, the buffer of an all-reduce), in the
parameter's own dtype: wte and the value embeddings bf16; lm_head, the Muon stacks and the
scalars f32.
"""

from __future__ import annotations

from typing import Any

from .param_groups import Collective, param_groups
from .presets import model_dims


def comm_volume(model: str, world_size: int, vocab_size: int | None = None) -> dict[str, Any]:
    if world_size < 1:
        raise ValueError("world size must be >= 1")
    dims = model_dims(model, vocab_size)
    groups, calls = [], []
    for group in param_groups(dims.parameters()):
        ops = group.collectives(world_size)
        calls += ops
        by_op = {op: sum(c.bytes for c in ops if c.op == op) for op in ("reduce_scatter", "all_gather", "all_reduce")}
        padded = group.padded_count(world_size)
        groups.append({"name": group.name, "kind": group.kind, "dtype": group.dtype, "num_params": len(group.names),
                       "padded_count": padded,
                       "elements_per_param": group.elements_per_param,
                       "total_elements": padded * group.elements_per_param,
                       "reduce_scatter_bytes": by_op["reduce_scatter"], "all_gather_bytes": by_op["all_gather"],
                       "all_reduce_bytes": by_op["all_reduce"]})
    return {"model": model, "world_size": world_size, "vocab_size": dims.vocab_size,
            "scaling_params": dims.scaling_params(), "groups": groups, "ops": summarize_calls(calls),
            "total_bytes": sum(c.bytes for c in calls),
            "total_bytes_at_2_bytes_per_element": sum(2 * c.elements for c in calls)}


def summarize_calls(calls: list[Collective]) -> list[dict[str, Any]]:
    """Per (op, dtype): calls, total bytes, and average / min / max bytes per call."""
    keys = sorted({(c.op, c.dtype) for c in calls})
    rows = []
    for op, dtype in keys:
        sizes = [c.bytes for c in calls if (c.op, c.dtype) == (op, dtype)]
        rows.append({"op": op, "dtype": dtype, "calls": len(sizes), "total_bytes": sum(sizes),
                     "avg_bytes": sum(sizes) / len(sizes), "min_bytes": min(sizes), "max_bytes": max(sizes)})
    return rows
