"""The p2p phase: GPU-to-GPU copy bandwidth and latency for every ordered pair (like CUDA's
p2pBandwidthLatencyTest). Two modes per pair: ``peer`` (a direct device-to-device copy, which uses
peer access where the driver allows it; ``peer_access`` records whether it does) and ``host``
(staged through pinned host memory: what a pair without peer access gets). Skipped, with the
reason, on a CPU cell or a node with fewer than two GPUs. One ``sample`` per (src, dst, mode);
``artifacts/p2p.txt`` holds the bandwidth matrices. The pairs are measured in a child process
that exits, so no CUDA context or cached buffer outlives the phase.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..events import EventLog
from ..job import Job
from .group import cuda_timed

COPY_BYTES = 256 * 1024**2
LATENCY_BYTES = 4
ITERS = 10


def skip_reason(job: Job, visible_gpus: int | None) -> str | None:
    """Why there is nothing to measure: known from the job alone (``visible_gpus`` None), or once
    the node's visible GPUs are counted."""
    if job.gpu.lower() == "cpu":
        return "a CPU cell has no GPU pairs"
    if job.count < 2:
        return "a 1-GPU cell has no GPU pairs"
    if visible_gpus is not None and visible_gpus < 2:
        return f"{visible_gpus} GPU visible; a pair needs two"
    return None


def run_p2p(job: Job, job_path: Path, log: EventLog) -> dict[str, Any]:
    """Runner side: measure every pair in a child process that exits (``payload.child``: the
    buffers and the CUDA contexts on every GPU go with it), then emit the samples and the table. A
    CPU or 1-GPU cell starts no child (on an H200, the child's torch and CUDA start took 5.4 s)."""
    from ..child import run_in_child

    gpus, rows = 0, []
    skip = skip_reason(job, None)
    if not skip:
        reported, reason = run_in_child(measure_pairs)
        if reason:
            raise RuntimeError(f"the p2p measurement failed: {reason}")
        gpus, rows = reported[0]
        skip = skip_reason(job, gpus)
    if skip:
        log.emit("sample", phase="p2p", name="p2p", status="skip", reason=skip)
        return {"skipped": skip}
    for row in rows:
        log.emit("sample", phase="p2p", **row)
    table = job_path.parent / "artifacts" / "p2p.txt"
    table.write_text(_matrices(rows, gpus))
    log.emit("artifact", phase="p2p", name="p2p.txt", path="artifacts/p2p.txt", bytes=table.stat().st_size)
    peer_rows = [r for r in rows if r["mode"] == "peer"]
    return {"pairs": len(peer_rows), "peer_access_pairs": sum(r["peer_access"] for r in peer_rows),
            "min_peer_bandwidth_gbps": min(r["bandwidth_gbps"] for r in peer_rows)}


def measure_pairs(report: Callable[[Any], None]) -> None:
    """Child side: ``report((visible GPUs, rows))``, one row per ordered pair and mode (none with
    fewer than two GPUs). Each copy is timed to completion on both ends (``cuda_timed`` with the
    source and the destination)."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    rows: list[dict[str, Any]] = []
    for src in range(gpus if gpus >= 2 else 0):
        for dst in range(gpus):
            if src == dst:
                continue
            peer = torch.cuda.can_device_access_peer(dst, src)
            big_src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=f"cuda:{src}")
            big_dst = torch.empty_like(big_src, device=f"cuda:{dst}")
            small_src, small_dst = big_src[:LATENCY_BYTES], big_dst[:LATENCY_BYTES]
            host = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=True)

            def staged(a: torch.Tensor = big_src, b: torch.Tensor = big_dst, h: torch.Tensor = host) -> None:
                h[: a.numel()].copy_(a)
                b.copy_(h[: a.numel()])

            for mode, bulk, tiny in (
                ("peer", lambda a=big_src, b=big_dst: b.copy_(a), lambda a=small_src, b=small_dst: b.copy_(a)),
                ("host", staged, lambda a=small_src, b=small_dst, h=host: staged(a, b, h)),
            ):
                seconds = cuda_timed(bulk, ITERS, [src, dst])
                latency = cuda_timed(tiny, ITERS * 10, [src, dst])
                rows.append({"src": src, "dst": dst, "mode": mode, "peer_access": peer, "bytes": COPY_BYTES,
                             "bandwidth_gbps": COPY_BYTES / seconds / 1e9, "latency_us": latency * 1e6})
    report((gpus, rows))


def _matrices(rows: list[dict[str, Any]], gpus: int) -> str:
    lines = []
    for mode in ("peer", "host"):
        cell = {(r["src"], r["dst"]): r["bandwidth_gbps"] for r in rows if r["mode"] == mode}
        lines.append(f"# {mode} copy bandwidth (GB/s), row = source, column = destination")
        lines.append("   D\\D" + "".join(f"{d:>9}" for d in range(gpus)))
        for s in range(gpus):
            lines.append(f"{s:>6} " + "".join(f"{cell[(s, d)]:9.2f}" if (s, d) in cell else f"{'-':>9}"
                                              for d in range(gpus)))
        lines.append("")
    return "\n".join(lines)
