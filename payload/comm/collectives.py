"""The collectives phase: a bus-bandwidth sweep like nccl-tests, on NCCL (GPU) or gloo (CPU).

For each op and size: a correctness check counting wrong elements (one untimed run after filling
the inputs), then warm-up and timed iterations of the collective alone (the inputs are not filled
again inside the timing, as nccl-tests), out-of-place and (where torch has it) in-place, the
time per run averaged over the ranks (``time_us``, what nccl-tests reports by default: its
``-a/--average 1``, ``Allreduce(args, &deltaSec, average)`` summing every rank's time and dividing
by the ranks, NVIDIA/nccl-tests ``src/common.cu`` at a0b82b2) and the slowest rank's
(``time_slowest_us``), with algbw and busbw of the average (``algbw_gbps``, ``busbw_gbps``, as
nccl-tests prints them) and the busbw of the slowest rank (``busbw_slowest_gbps``)
(``payload.comm.collective_math``). Rank 0 emits one ``sample`` event per (op, size, placement) and
writes ``artifacts/collectives.txt``, a table in nccl-tests' layout (the average's columns).

Across nodes (``job.nodes`` > 1) the sweep runs three times, each sample carrying its ``scope``:
``cluster`` (every rank of every node), ``intra_node`` (each node's ranks, every node at once; the
sample names its ``node_rank``; left out with one rank per node) and ``inter_node`` (one rank per
node per rail, as nccl-tests' runs with one GPU per node: the ranks of local rank ``rail`` on
every node, every rail at once). A group's times are over its own ranks and busbw uses the group's rank
count. Global rank 0 (node 0) emits every sample and writes the tables; one node's output
is unchanged (no ``scope``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..events import EventLog
from ..job import Job
from .collective_math import bandwidths, sweep
from .group import Layout, barrier, gather_by_slot, group_device, subgroups, synchronize

if TYPE_CHECKING:
    from .ranks import Ranks

ELEMENT = 4  # float32, nccl-tests' default "float"


@dataclass(frozen=True)
class Case:
    """One placement of an op: ``prepare`` fills the inputs, ``run`` is the collective alone (what
    is timed), ``wrong`` counts the elements that differ from the expected result after
    ``prepare`` + ``run``."""

    in_place: bool
    prepare: Callable[[], object]
    run: Callable[[], object]
    wrong: Callable[[], Any]


def _cases(op: str, n: int, rank: int, world: int, device: Any, group: Any = None) -> list[Case]:
    """The placements of ``op`` with ``n`` elements in the whole array, buffers on ``device``, run
    in ``group`` (the whole world by default) where this process is ``rank`` of ``world``."""
    from functools import partial

    import torch
    import torch.distributed as dist

    chunk = n // world
    fill = float(rank + 1)
    total = world * (world + 1) / 2
    gather = partial(getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor, group=group)
    scatter = partial(getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor, group=group)
    root = 0 if group is None else dist.get_global_rank(group, 0)
    if op == "all_reduce":
        buf = torch.empty(n, device=device)
        return [Case(True, lambda: buf.fill_(fill), lambda: dist.all_reduce(buf, group=group),
                     lambda: (buf != total).sum())]
    if op == "all_gather":
        out = torch.empty(n, device=device)
        src = torch.full((chunk,), fill, device=device)
        expected = torch.arange(1, world + 1, device=device, dtype=torch.float32).repeat_interleave(chunk)
        mine = out[rank * chunk:(rank + 1) * chunk]
        return [Case(False, lambda: out.zero_(), lambda: gather(out, src), lambda: (out != expected).sum()),
                Case(True, lambda: mine.fill_(fill), lambda: gather(out, mine), lambda: (out != expected).sum())]
    if op == "reduce_scatter":
        full = torch.empty(n, device=device)
        out = torch.empty(chunk, device=device)
        mine = full[rank * chunk:(rank + 1) * chunk]
        return [Case(False, lambda: full.fill_(fill), lambda: scatter(out, full), lambda: (out != total).sum()),
                Case(True, lambda: full.fill_(fill), lambda: scatter(mine, full), lambda: (mine != total).sum())]
    if op == "broadcast":
        buf = torch.empty(n, device=device)
        return [Case(True, lambda: buf.fill_(fill), lambda: dist.broadcast(buf, root, group=group),
                     lambda: (buf != 1.0).sum())]
    if op == "alltoall":
        # element j of chunk c on rank r is r·world + c; after the exchange chunk c holds c·world + r
        src = (rank * world + torch.arange(world, device=device, dtype=torch.float32)).repeat_interleave(chunk)
        out = torch.empty(n, device=device)
        expected = (torch.arange(world, device=device, dtype=torch.float32) * world + rank).repeat_interleave(chunk)
        return [Case(False, lambda: out.zero_(), lambda: dist.all_to_all_single(out, src, group=group),
                     lambda: (out != expected).sum())]
    raise ValueError(f"unknown collective {op!r}")


@dataclass(frozen=True)
class Scope:
    """One sweep of the collectives: in ``group`` (None: the world) of ``ranks`` ranks; this rank's
    group is ``slot`` of ``slots``, whose ``leader`` (group rank 0) reports it; ``key`` names the
    slot in the samples (``node_rank``, ``rail``; None for one group)."""

    name: str | None
    group: Any
    ranks: int
    slot: int = 0
    slots: int = 1
    leader: bool = True
    key: str | None = None


def scopes(job: Job, rank: int, world_size: int) -> list[Scope]:
    """The sweeps of this rank: the world alone on one node; across nodes the cluster, each node
    (with more than one rank per node) and each rail (``payload.comm.group.subgroups``)."""

    layout = Layout.of(job)
    if layout.nodes == 1:
        return [Scope(None, None, world_size, leader=rank == 0)]
    node_group, rail_group = subgroups(job)
    local_rank = rank % layout.count
    found = [Scope("cluster", None, world_size, leader=rank == 0)]
    if layout.count > 1:
        found.append(Scope("intra_node", node_group, layout.count, layout.node_rank, layout.nodes, local_rank == 0,
                           "node_rank"))
    found.append(Scope("inter_node", rail_group, layout.nodes, local_rank, layout.count, layout.node_rank == 0,
                       "rail"))
    return found


def collectives_rank(job: Job, rank: int, world_size: int, events: EventLog | None) -> None:
    """Per scope (``scopes``), op, size and placement, as nccl-tests: fill the inputs and check one
    untimed run, then warm up and time ``iters`` runs of the collective alone (no fill inside the
    timing); rank 0 (``events``) emits the samples of every group and writes the tables."""
    import torch.distributed as dist

    cfg = job.collectives
    if cfg is None:
        raise ValueError("job.json has no collectives section")
    device = group_device()
    tables = []
    for scope in scopes(job, rank, world_size):
        rows: dict[int, list[dict[str, Any]]] = {}
        me, size_of_group = dist.get_rank(scope.group), dist.get_world_size(scope.group)
        for op in cfg.ops:
            for size in sweep(cfg.min_bytes, cfg.max_bytes, cfg.factor, ELEMENT * scope.ranks):
                for case in _cases(op, size // ELEMENT, me, size_of_group, device, scope.group):
                    measured = _measure(case, cfg.warmup_iters, cfg.iters, device, scope.group)
                    every = [measured] if scope.slots == 1 else gather_by_slot(
                        measured, scope.slot, scope.leader, scope.slots)
                    for slot, (mean_s, slowest_s, slot_wrong) in enumerate(every):
                        algbw, busbw = bandwidths(op, size, mean_s, scope.ranks)
                        row = {"op": op, "bytes": size, "count": size // ELEMENT, "dtype": "float",
                               "in_place": case.in_place, "time_us": mean_s * 1e6, "algbw_gbps": algbw,
                               "busbw_gbps": busbw, "time_slowest_us": slowest_s * 1e6,
                               "busbw_slowest_gbps": bandwidths(op, size, slowest_s, scope.ranks)[1],
                               "wrong": int(slot_wrong), "ranks": scope.ranks,
                               **({"scope": scope.name} if scope.name else {}),
                               **({scope.key: slot} if scope.key else {})}
                        rows.setdefault(slot, []).append(row)
                        if events is not None:
                            events.emit("sample", phase="collectives", **row)
        tables += [nccl_tests_table(found, _title(scope, slot)) for slot, found in rows.items()]
    if events is not None:
        table = events.path.parent / "artifacts" / "collectives.txt"
        table.write_text("\n".join(tables))
        events.emit("artifact", phase="collectives", name="collectives.txt", path="artifacts/collectives.txt",
                    bytes=table.stat().st_size)


def _title(scope: Scope, slot: int) -> str:
    if scope.name is None:
        return ""
    return {"cluster": " across the cluster", "intra_node": f" intra-node, node {slot}",
            "inter_node": f" inter-node, rail {slot}"}.get(scope.name, f" {scope.name}")


def _measure(case: Case, warmup_iters: int, iters: int, device: Any, group: Any) -> tuple[float, float, int]:
    """(seconds per run averaged over the ranks of ``group``, as nccl-tests' default; the slowest
    rank's; wrong elements over the group) of one case."""
    import torch
    import torch.distributed as dist

    case.prepare()
    case.run()
    errors = torch.tensor([int(case.wrong())], dtype=torch.int64, device=device)
    for _ in range(warmup_iters):
        case.run()
    synchronize([device])
    barrier(group)
    start = time.perf_counter()
    for _ in range(iters):
        case.run()
    synchronize([device])
    mine = (time.perf_counter() - start) / iters
    total = torch.tensor([mine], dtype=torch.float64, device=device)
    slowest = torch.tensor([mine], dtype=torch.float64, device=device)
    dist.all_reduce(total, group=group)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(errors, group=group)
    return float(total.item()) / dist.get_world_size(group), float(slowest.item()), int(errors.item())


def nccl_tests_table(rows: list[dict[str, Any]], title: str = "") -> str:
    """Rows in nccl-tests' layout: size count type | out-of-place time algbw busbw #wrong | in-place …
    (``title`` follows the op in each section's header). Times and bandwidths are the average over the
    ranks, as nccl-tests prints them by default (``-a 1``)."""
    lines = []
    for op in dict.fromkeys(r["op"] for r in rows):
        lines += [f"# {op}{title} ({rows[0]['ranks']} ranks; time: average over the ranks, as nccl-tests -a 1)",
                  "#       size      count   type    time   algbw   busbw  #wrong    time   algbw   busbw  #wrong",
                  "#        (B) (elements)           (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
        by_size: dict[int, dict[bool, dict[str, Any]]] = {}
        for r in rows:
            if r["op"] == op:
                by_size.setdefault(r["bytes"], {})[r["in_place"]] = r
        for size, placed in by_size.items():
            cells = []
            for in_place in (False, True):
                found = placed.get(in_place)
                cells.append(f"{found['time_us']:7.1f} {found['algbw_gbps']:7.2f} {found['busbw_gbps']:7.2f} "
                             f"{found['wrong']:7d}" if found else f"{'N/A':>7} {'N/A':>7} {'N/A':>7} {'N/A':>7}")
            count = size // ELEMENT
            lines.append(f"{size:12d} {count:10d}  float  " + " ".join(cells))
        wrong = sum(r["wrong"] for r in rows if r["op"] == op)
        lines.append(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
        busbw = [r["busbw_gbps"] for r in rows if r["op"] == op]
        lines.append(f"# Avg bus bandwidth    : {sum(busbw) / len(busbw):.4f}")
        lines.append("")
    return "\n".join(lines)


def run_collectives(job: Job, job_path: Path, log: EventLog, ranks: Ranks | None = None) -> dict[str, Any]:
    """Runner side: run the sweep on the attempt's ``ranks`` (on ranks of its own without), then
    summarise the largest size of each op: ``{op}_busbw_gbps_at_{bytes}`` of the world (of the
    cluster across nodes), and across nodes ``intra_node: {"node<k>": {...}}`` and ``inter_node:
    {"rail<r>": {...}}`` alike (only node 0, whose events hold the samples, has figures)."""
    from ..events import read_samples
    from .ranks import launch

    if ranks is None:
        launch(job_path, "collectives", job.count)
    else:
        ranks.run("collectives")
    samples = list(read_samples(log.path, "collectives"))
    summary: dict[str, Any] = {"wrong": sum(s["wrong"] for s in samples)}
    summary.update(_largest([s for s in samples if s.get("scope") in (None, "cluster")]))
    for scope, key in (("intra_node", "node_rank"), ("inter_node", "rail")):
        scoped = [s for s in samples if s.get("scope") == scope]
        if scoped:
            label = "node" if key == "node_rank" else "rail"
            summary[scope] = {f"{label}{slot}": _largest([s for s in scoped if s[key] == slot])
                              for slot in dict.fromkeys(s[key] for s in scoped)}
    if summary["wrong"]:
        raise RuntimeError(f"collectives returned {summary['wrong']} wrong elements: the node's interconnect or "
                           "its NCCL setup is broken")
    return summary


def _largest(samples: list[dict[str, Any]]) -> dict[str, float]:
    """``{op}_busbw_gbps_at_{bytes}`` of each op's largest size (out-of-place first)."""
    found = {}
    for op in dict.fromkeys(s["op"] for s in samples):
        largest = max((s for s in samples if s["op"] == op), key=lambda s: (s["bytes"], not s["in_place"]))
        found[f"{op}_busbw_gbps_at_{largest['bytes']}"] = largest["busbw_gbps"]
    return found
