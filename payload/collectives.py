"""The collectives phase: a bus-bandwidth sweep like nccl-tests, on NCCL (GPU) or gloo (CPU).

For each op and size: a correctness check counting wrong elements (one untimed run after filling
the inputs), then warm-up and timed iterations of the collective alone (the inputs are not filled
again inside the timing, as nccl-tests), out-of-place and (where torch has it) in-place, the
slowest rank's time, algbw and busbw (``payload.collective_math``). Rank 0 emits one ``sample``
event per (op, size, placement) and writes ``artifacts/collectives.txt``, a table in nccl-tests'
layout.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .collective_math import bandwidths, sweep
from .events import EventLog
from .job import Job

if TYPE_CHECKING:
    from .distributed import Ranks

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


def _cases(op: str, n: int, rank: int, world: int, device: Any) -> list[Case]:
    """The placements of ``op`` with ``n`` elements in the whole array, buffers on ``device``."""
    import torch
    import torch.distributed as dist

    chunk = n // world
    fill = float(rank + 1)
    total = world * (world + 1) / 2
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "all_reduce":
        buf = torch.empty(n, device=device)
        return [Case(True, lambda: buf.fill_(fill), lambda: dist.all_reduce(buf), lambda: (buf != total).sum())]
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
        return [Case(True, lambda: buf.fill_(fill), lambda: dist.broadcast(buf, 0), lambda: (buf != 1.0).sum())]
    if op == "alltoall":
        # element j of chunk c on rank r is r·world + c; after the exchange chunk c holds c·world + r
        src = (rank * world + torch.arange(world, device=device, dtype=torch.float32)).repeat_interleave(chunk)
        out = torch.empty(n, device=device)
        expected = (torch.arange(world, device=device, dtype=torch.float32) * world + rank).repeat_interleave(chunk)
        return [Case(False, lambda: out.zero_(), lambda: dist.all_to_all_single(out, src),
                     lambda: (out != expected).sum())]
    raise ValueError(f"unknown collective {op!r}")


def collectives_rank(job: Job, rank: int, world_size: int, events: EventLog | None) -> None:
    """Per (op, size, placement), as nccl-tests: fill the inputs and check one untimed run, then
    warm up and time ``iters`` runs of the collective alone (no fill inside the timing)."""
    import torch
    import torch.distributed as dist

    from .distributed import barrier, group_device, synchronize

    cfg = job.collectives
    if cfg is None:
        raise ValueError("job.json has no collectives section")
    device = group_device()
    rows = []
    for op in cfg.ops:
        for size in sweep(cfg.min_bytes, cfg.max_bytes, cfg.factor, ELEMENT * world_size):
            for case in _cases(op, size // ELEMENT, rank, world_size, device):
                case.prepare()
                case.run()
                errors = torch.tensor([int(case.wrong())], dtype=torch.int64, device=device)
                for _ in range(cfg.warmup_iters):
                    case.run()
                synchronize([device])
                barrier()
                start = time.perf_counter()
                for _ in range(cfg.iters):
                    case.run()
                synchronize([device])
                elapsed = torch.tensor([(time.perf_counter() - start) / cfg.iters], dtype=torch.float64,
                                       device=device)
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                dist.all_reduce(errors)
                seconds = float(elapsed.item())
                algbw, busbw = bandwidths(op, size, seconds, world_size)
                row = {"op": op, "bytes": size, "count": size // ELEMENT, "dtype": "float", "in_place": case.in_place,
                       "time_us": seconds * 1e6, "algbw_gbps": algbw, "busbw_gbps": busbw,
                       "wrong": int(errors.item()), "ranks": world_size}
                rows.append(row)
                if events is not None:
                    events.emit("sample", phase="collectives", **row)
    if events is not None:
        table = events.path.parent / "artifacts" / "collectives.txt"
        table.write_text(nccl_tests_table(rows))
        events.emit("artifact", phase="collectives", name="collectives.txt", path="artifacts/collectives.txt",
                    bytes=table.stat().st_size)


def nccl_tests_table(rows: list[dict[str, Any]]) -> str:
    """Rows in nccl-tests' layout: size count type | out-of-place time algbw busbw #wrong | in-place …"""
    lines = []
    for op in dict.fromkeys(r["op"] for r in rows):
        lines += [f"# {op} ({rows[0]['ranks']} ranks)",
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
    summarise the largest size of each op."""
    from .distributed import launch
    from .events import read_samples

    if ranks is None:
        launch(job_path, "collectives", job.count)
    else:
        ranks.run("collectives")
    samples = list(read_samples(log.path, "collectives"))
    summary: dict[str, Any] = {"wrong": sum(s["wrong"] for s in samples)}
    for op in dict.fromkeys(s["op"] for s in samples):
        largest = max((s for s in samples if s["op"] == op), key=lambda s: (s["bytes"], not s["in_place"]))
        summary[f"{op}_busbw_gbps_at_{largest['bytes']}"] = largest["busbw_gbps"]
    if summary["wrong"]:
        raise RuntimeError(f"collectives returned {summary['wrong']} wrong elements: the node's interconnect or "
                           "its NCCL setup is broken")
    return summary
