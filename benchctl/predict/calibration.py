"""The model's inputs for one machine: published defaults (``defaults.json``, each with its source)
refined by measurements (pure; ``store_points`` reads the store).

MFU (forward and backward, against the bf16 dense peak) is fitted per GPU model and precision over
its measured points: a line in log(FLOPs per token) with two or more (bigger models keep the tensor
cores busier), the point's own with one. A GPU model without points borrows its class's
(``gpu_classes``: another Hopper board's MFU, its own peak); fp8 without fp8 points takes bf16's
MFU and speeds the linear layers up by the published fp8 factor. The optimizer's MFU (Newton–Schulz)
is the mean over one-GPU points that timed the optimizer. busbw: the store's measured all_reduce
busbw at large sizes for that GPU and interconnect class, else the published curve's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from benchctl.payload.node.gpu_models import BF16_PEAK_FLOPS
from benchctl.payload.stats import median
from benchctl.predict.model import Figure, Inputs, breakdown
from benchctl.predict.workload import Workload, nanochat

DEFAULTS = Path(__file__).with_name("defaults.json")
MIN_BUSBW_BYTES = 64 * 2**20
"""A measured busbw counts as the fabric's asymptote from this size up."""


@cache
def defaults() -> dict[str, Any]:
    return dict(json.loads(DEFAULTS.read_text()))


@dataclass(frozen=True)
class ComputePoint:
    """One measured step: its workload (as the node ran it), GPU model and precision, and its times."""

    gpu: str
    precision: str
    workload: Workload
    step_ms: float
    fwd_bwd_ms: float | None
    optimizer_ms: float | None
    kind: str  # measured | imported | published
    source: str
    interconnect: str | None = None
    origin: str | None = None
    """``campaign/cell key`` of a store point (what ``held_out`` leaves out), None for a published one."""


@dataclass(frozen=True)
class BusbwPoint:
    gpu: str
    interconnect: str
    nodes: int
    busbw_gbps: float
    kind: str
    source: str
    origin: str | None = None


def default_points() -> list[ComputePoint]:
    """The compute points committed in ``defaults.json``."""
    points = []
    for p in defaults()["compute_points"]:
        work = nanochat(p["model"], p["world_size"], p["tokens_per_step"], attention=p["attention"])
        points.append(ComputePoint(p["gpu"], p["precision"], work, p["step_ms"], p.get("fwd_bwd_ms"),
                                   p.get("optimizer_ms"), "published", p["source"]))
    return points


def _figure(entry: dict[str, Any], kind: str = "published") -> Figure:
    return Figure(float(entry["value"]), float(entry.get("low", entry["value"])),
                  float(entry.get("high", entry["value"])), kind, str(entry["source"]))


def interconnect_of(gpu: str, count: int) -> str:
    """The interconnect class a GPU model's board has (``interconnect_of_gpu``); one GPU: ``single_gpu``."""
    if count == 1:
        return "single_gpu"
    return str(defaults()["interconnect_of_gpu"].get(gpu, "pcie_only"))


class Calibration:
    """Defaults plus measured points; ``inputs`` answers for one machine."""

    def __init__(self, points: list[ComputePoint] | None = None, busbw: list[BusbwPoint] | None = None) -> None:
        self.points = default_points() if points is None else points
        self.busbw = busbw or []

    def with_points(self, points: list[ComputePoint], busbw: list[BusbwPoint] | None = None) -> Calibration:
        return Calibration([*self.points, *points], [*self.busbw, *(busbw or [])])

    # -- compute ---------------------------------------------------------------------------------
    def point_mfu(self, point: ComputePoint) -> float:
        """The point's forward-and-backward MFU; without a measured split, the step less the model's
        optimizer and exposed communication for it."""
        peak = BF16_PEAK_FLOPS[point.gpu]
        work = point.workload
        fwd_bwd = point.fwd_bwd_ms
        if fwd_bwd is None:
            rest = breakdown(work, self._inputs(point.gpu, work.world_size, 1, "bf16", point.interconnect, work,
                                                skip_mfu=True))
            fwd_bwd = point.step_ms - rest.update_ms - rest.comm_ms
        flops = work.flops_per_token * work.tokens_per_step / work.world_size
        return flops / (fwd_bwd / 1000 * peak)

    def mfu(self, gpu: str, precision: str, work: Workload) -> tuple[Figure, bool]:
        """(MFU figure, whether it already holds ``precision``'s speed: fp8 points for an fp8 step)."""
        spread = float(defaults()["mfu_spread"]["value"])
        for model, borrowed in ((gpu, False), (defaults()["gpu_classes"].get(gpu), True)):
            for prec in dict.fromkeys((precision, "bf16")):
                chosen = [p for p in self.points if p.gpu == model and p.precision == prec]
                if not chosen:
                    continue
                value = self._fit(chosen, work.flops_per_token)
                kinds = sorted({p.kind for p in chosen})
                kind = "measured" if "measured" in kinds else kinds[0]
                label = f"fitted over {len(chosen)} {prec} point(s) of {model}"
                if borrowed:
                    label += f" (no {gpu} point: its class's MFU, {gpu}'s own peak)"
                source = f"{label}: " + "; ".join(sorted({p.source for p in chosen}))
                return Figure(value, value * (1 - spread), value * (1 + spread), kind, source), prec == precision
        return _figure(defaults()["mfu_fallback"], "assumed"), False

    def _fit(self, points: list[ComputePoint], flops_per_token: float) -> float:
        xs = [math.log(p.workload.flops_per_token) for p in points]
        ys = [self.point_mfu(p) for p in points]
        x = math.log(flops_per_token)
        if len(set(xs)) < 2:
            return sum(ys) / len(ys)
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((a - mean_x) * (b - mean_y) for a, b in zip(xs, ys, strict=True)) / sum(
            (a - mean_x) ** 2 for a in xs)
        return min(0.9, max(0.05, mean_y + slope * (x - mean_x)))

    def optimizer_mfu(self, gpu: str) -> Figure:
        for model in (gpu, defaults()["gpu_classes"].get(gpu)):
            values = [v for p in self.points if p.gpu == model and p.optimizer_ms and p.workload.world_size == 1
                      for v in (self._opt_mfu(p),) if v is not None and v > 0]
            if values:
                mean = sum(values) / len(values)
                return Figure(mean, min(values), max(values), "measured" if model == gpu else "published",
                              f"mean Newton-Schulz MFU of {len(values)} one-GPU point(s) of {model} "
                              "(optimizer time less the AdamW traffic)")
        return Figure(0.35, 0.25, 0.45, "assumed", "no optimizer timing for this GPU class: 0.35 of peak")

    def _opt_mfu(self, point: ComputePoint) -> float | None:
        work, gpu = point.workload, point.gpu
        ns = sum(g.ns_flops_per_matrix * g.matrices_per_rank for g in work.groups)
        adamw = sum(g.adamw_elements_per_rank for g in work.groups)
        hbm = float(defaults()["hbm_tbps"].get(gpu, 2.0)) * 1e12
        adamw_ms = adamw * float(defaults()["adamw_bytes_per_element"]["value"]) / hbm * 1000
        left = (point.optimizer_ms or 0) - adamw_ms
        return ns / (left / 1000 * BF16_PEAK_FLOPS[gpu]) if left > 0 and ns else None

    # -- communication ---------------------------------------------------------------------------
    def fabric(self, gpu: str, count: int, nodes: int, interconnect: str) -> tuple[Figure | None, Figure | None]:
        """(busbw, latency) of the collectives on this machine; (None, None) for one GPU."""
        if count * nodes == 1:
            return None, None
        measured = [b for b in self.busbw if b.gpu == gpu and b.interconnect == interconnect and b.nodes == nodes]
        table = defaults()["interconnects"].get(interconnect) or defaults()["interconnects"]["pcie_only"]
        if nodes > 1:
            fabric = defaults()["inter_node"]
            size = str(min((int(k) for k in fabric if k.isdigit()), key=lambda k: abs(k - nodes)))
            entry = {**fabric[size], "source": fabric["source"]}
            latency_entry = fabric
        else:
            entry = table.get("over_4_gpus", table) if count > 4 else table
            entry = {**entry, "source": table["source"]}
            latency_entry = table
        latency = Figure(float(latency_entry["latency_us"]), float(latency_entry["latency_low_us"]),
                         float(latency_entry["latency_high_us"]), "published", str(latency_entry["source"]))
        if measured:
            values = [b.busbw_gbps for b in measured]
            kinds = sorted({b.kind for b in measured})
            return Figure(median(values), min(values), max(values), kinds[0],
                          f"median all_reduce busbw of {len(values)} measured cell(s) ({gpu}, {interconnect}, "
                          f"{nodes} node(s)): " + "; ".join(sorted({b.source for b in measured}))), latency
        return Figure(float(entry["busbw_gbps"]), float(entry["low"]), float(entry["high"]), "published",
                      str(entry["source"])), latency

    # -- together --------------------------------------------------------------------------------
    def inputs(self, gpu: str, count: int, nodes: int, precision: str, interconnect: str | None,
               work: Workload) -> Inputs:
        return self._inputs(gpu, count, nodes, precision, interconnect, work)

    def _inputs(self, gpu: str, count: int, nodes: int, precision: str, interconnect: str | None, work: Workload,
                skip_mfu: bool = False) -> Inputs:
        d = defaults()
        peak = Figure(BF16_PEAK_FLOPS[gpu], BF16_PEAK_FLOPS[gpu], BF16_PEAK_FLOPS[gpu], "published", d["peak_source"])
        if skip_mfu:  # the point's own MFU is what is being measured: any value will do
            mfu, has_precision = Figure(1.0, 1.0, 1.0, "assumed", "unused"), True
        else:
            mfu, has_precision = self.mfu(gpu, precision, work)
        speedup = (_figure(d["fp8_linear_speedup"]) if precision == "fp8" and not has_precision
                   else Figure(1.0, 1.0, 1.0, "published", f"{precision} MFU measured as such"))
        hbm_value = float(d["hbm_tbps"].get(gpu, 2.0))
        hbm = Figure(hbm_value, hbm_value, hbm_value, "published", d["hbm_tbps"]["_source"])
        wire = interconnect or interconnect_of(gpu, count)
        busbw, latency = self.fabric(gpu, count, nodes, wire)
        notes = (f"interconnect {wire}" + ("" if interconnect else " (the GPU model's usual board)"),)
        return Inputs(peak, mfu, self.optimizer_mfu(gpu) if not skip_mfu else Figure(0.35, 0.35, 0.35, "assumed", ""),
                      hbm, _figure(d["adamw_bytes_per_element"]), speedup, busbw, latency, notes)
