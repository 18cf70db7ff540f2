"""The step-time model (pure): compute + the optimizer's update work + its exposed communication.

compute = FLOPs per rank per step ÷ (bf16 peak × MFU), the linear layers' FLOPs ÷ the fp8 speed-up
when the step runs fp8 and no fp8 measurement gave the MFU. Communication: each collective takes
``latency + bytes × busbw factor ÷ busbw`` (nccl-tests' definitions, ``payload.comm.collective_math``).
Overlap is the optimizer's own (``payload.workloads.optim``): phase 1 issues every reduction at once after the
backward (nothing left to hide them behind); phase 2 takes the groups in order, each waiting for
its reduction, updating its shard and issuing its all-gather, which queues behind every reduction on
the one NCCL stream; phase 3 waits for the last gather. The timeline of those two streams gives
the optimizer's time; what of it is not update work is the exposed communication. A data-parallel
workload (``Workload.data_parallel``) all-reduces during the backward, as DDP does: only what
outlasts the backward (and the last bucket) is exposed. The range takes every input at its fast
end (low) and at its slow end (high).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchctl.payload.comm.collective_math import bus_factor
from benchctl.payload.workloads.param_groups import Collective
from benchctl.predict.workload import Workload

BACKWARD_SHARE = 2 / 3
"""Of a training step's FLOPs, the backward's (2 of 6 per parameter and token in the forward, 4 in the backward)."""


@dataclass(frozen=True)
class Figure:
    """One input: its value, its range, where it came from (``kind``: measured | imported | published |
    assumed) and the source in words."""

    value: float
    low: float
    high: float
    kind: str
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "low": self.low, "high": self.high, "kind": self.kind, "source": self.source}


@dataclass(frozen=True)
class Inputs:
    """Everything the model reads besides the workload, each with its source. ``busbw_gbps`` (GB/s)
    and ``latency_us`` are the fabric's for the collectives (None: one GPU, no communication);
    ``fp8_linear_speedup`` is 1 unless the MFU came from bf16 measurements and the step runs fp8."""

    peak_flops: Figure
    mfu: Figure
    optimizer_mfu: Figure
    hbm_tbps: Figure
    adamw_bytes_per_element: Figure
    fp8_linear_speedup: Figure
    busbw_gbps: Figure | None
    latency_us: Figure | None
    notes: tuple[str, ...] = field(default=())

    def sources(self) -> dict[str, Any]:
        named = {"peak_flops": self.peak_flops, "mfu": self.mfu, "optimizer_mfu": self.optimizer_mfu,
                 "hbm_tbps": self.hbm_tbps, "adamw_bytes_per_element": self.adamw_bytes_per_element,
                 "fp8_linear_speedup": self.fp8_linear_speedup, "busbw_gbps": self.busbw_gbps,
                 "latency_us": self.latency_us}
        return {name: figure.as_dict() for name, figure in named.items() if figure is not None}


@dataclass(frozen=True)
class Breakdown:
    compute_ms: float
    """Forward and backward."""
    update_ms: float
    """The optimizer's own work on each rank's shard."""
    comm_ms: float
    """Communication the step waits for (not hidden behind the backward or the updates)."""
    comm_total_ms: float
    """Every collective's time, hidden or not."""

    @property
    def step_ms(self) -> float:
        return self.compute_ms + self.update_ms + self.comm_ms


@dataclass(frozen=True)
class Prediction:
    workload: Workload
    mid: Breakdown
    fast: Breakdown
    slow: Breakdown
    inputs: Inputs

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.workload.name, "world_size": self.workload.world_size,
                "tokens_per_step": self.workload.tokens_per_step, "flops_per_token": self.workload.flops_per_token,
                "step_time_ms": self.mid.step_ms, "step_time_ms_low": self.fast.step_ms,
                "step_time_ms_high": self.slow.step_ms, "compute_ms": self.mid.compute_ms,
                "optimizer_update_ms": self.mid.update_ms, "comm_ms": self.mid.comm_ms,
                "comm_total_ms": self.mid.comm_total_ms, "sources": self.inputs.sources(),
                "notes": list(self.inputs.notes)}


def collective_ms(op: Collective, world_size: int, busbw_gbps: float, latency_us: float) -> float:
    """nccl-tests' time for one call: size × busbw factor ÷ busbw, plus the call's latency."""
    return latency_us / 1000 + op.bytes * bus_factor(op.op, world_size) / (busbw_gbps * 1e9) * 1000


def _end(inputs: Inputs, end: str) -> dict[str, float]:
    """Each input at the ``end`` of its range that makes the step fast (``low``), slow (``high``) or
    at its value (``mid``)."""
    def pick(figure: Figure | None, faster_when_larger: bool) -> float:
        if figure is None:
            return 0.0
        if end == "mid":
            return figure.value
        return figure.high if (end == "low") == faster_when_larger else figure.low

    return {"peak": pick(inputs.peak_flops, True), "mfu": pick(inputs.mfu, True),
            "opt_mfu": pick(inputs.optimizer_mfu, True), "hbm": pick(inputs.hbm_tbps, True),
            "adamw_bytes": pick(inputs.adamw_bytes_per_element, False),
            "speedup": pick(inputs.fp8_linear_speedup, True), "busbw": pick(inputs.busbw_gbps, True),
            "latency": pick(inputs.latency_us, False)}


def breakdown(workload: Workload, inputs: Inputs, end: str = "mid") -> Breakdown:
    """The step's parts with every input at ``end`` (``low`` | ``mid`` | ``high``)."""
    x = _end(inputs, end)
    flops = (workload.linear_flops_per_token / x["speedup"] + workload.attention_flops_per_token) \
        * workload.tokens_per_step / workload.world_size
    compute = flops / (x["peak"] * x["mfu"]) * 1000
    updates = [group.ns_flops_per_matrix * group.matrices_per_rank / (x["peak"] * x["opt_mfu"]) * 1000
               + group.adamw_elements_per_rank * x["adamw_bytes"] / (x["hbm"] * 1e12) * 1000
               for group in workload.groups]
    if workload.world_size == 1 or inputs.busbw_gbps is None:
        return Breakdown(compute, sum(updates), 0.0, 0.0)

    def took(op: Collective) -> float:
        return collective_ms(op, workload.world_size, x["busbw"], x["latency"])

    if workload.data_parallel:
        times = [took(op) for group in workload.groups for op in group.collectives]
        total = sum(times)
        exposed = max(total - compute * BACKWARD_SHARE, times[-1] if times else 0.0)
        return Breakdown(compute, sum(updates), exposed, total)
    return _optimizer_timeline(workload, updates, took, compute)


def _optimizer_timeline(workload: Workload, updates: list[float], took: Any, compute: float) -> Breakdown:
    """``payload.workloads.optim``'s phases on two streams: the compute stream runs the updates, the one NCCL
    stream runs the collectives in the order they were issued."""
    items = []  # (reduction, update ms, gather or None), in the optimizer's order
    for group, update in zip(workload.groups, updates, strict=True):
        reductions = [op for op in group.collectives if op.op != "all_gather"]
        gathers = [op for op in group.collectives if op.op == "all_gather"]
        for i, reduction in enumerate(reductions):
            items.append((reduction, update / len(reductions), gathers[i] if i < len(gathers) else None))
    comm_free, reduced = 0.0, []
    for reduction, _, _ in items:  # phase 1: every reduction issued at once, run in order
        comm_free += took(reduction)
        reduced.append(comm_free)
    busy = 0.0
    for (_, update, gather), ready in zip(items, reduced, strict=True):  # phase 2
        busy = max(busy, ready) + update
        if gather is not None:
            comm_free = max(comm_free, busy) + took(gather)
    end = max(busy, comm_free)  # phase 3: the last gather
    total = sum(took(op) for group in workload.groups for op in group.collectives)
    update_ms = sum(updates)
    return Breakdown(compute, update_ms, end - update_ms, total)


def predict(workload: Workload, inputs: Inputs) -> Prediction:
    return Prediction(workload, breakdown(workload, inputs, "mid"), breakdown(workload, inputs, "low"),
                      breakdown(workload, inputs, "high"), inputs)
