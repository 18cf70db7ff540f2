"""Live preflight measurements on the node (torch): CUDA init on every GPU, bf16 GEMM TFLOP/s and
device-to-device copy GB/s per GPU, and an NCCL all_reduce across all GPUs with its
``NCCL_DEBUG=INFO`` log. Results land in the facts snapshot (``probes.json``, ``nccl-debug.log``)
so the checks judge them like any other fact.
"""

from __future__ import annotations

import json
import time
from typing import Any

from payload.events import EventLog
from payload.job import Job

GEMM_N = 8192
HBM_BYTES = 1024**3
ALLREDUCE_BYTES = 1024**3


def cuda_init(count: int, injected: dict[str, Any]) -> dict[str, Any]:
    if injected.get("cuda_init") == "error":
        return {"error": "RuntimeError: CUDA unknown error (injected by the local provider)", "ok_devices": 0}
    if injected.get("cuda_init") == "hang":  # a driver that never answers
        time.sleep(24 * 3600)
    import torch

    ok = 0
    try:
        torch.cuda.init()
        for index in range(min(count, torch.cuda.device_count())):
            value = (torch.ones(4, device=f"cuda:{index}") * 2).sum().item()
            ok += value == 8.0
    except Exception as exc:  # the message is the finding
        return {"error": f"{type(exc).__name__}: {exc}", "ok_devices": ok}
    return {"ok_devices": ok}


def cuda_timed(fn: Any, iters: int) -> float:
    """Seconds per call of ``fn`` on the GPU: one warm-up call, then ``iters`` between synchronizes."""
    import torch

    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / iters


def gemm_tflops(count: int) -> list[float]:
    import torch

    result = []
    for index in range(count):
        a = torch.randn(GEMM_N, GEMM_N, device=f"cuda:{index}", dtype=torch.bfloat16)
        b = torch.randn_like(a)
        with torch.cuda.device(index):
            seconds = cuda_timed(lambda a=a, b=b: a @ b, 10)
        result.append(2 * GEMM_N**3 / seconds / 1e12)
    return result


def hbm_gbps(count: int) -> list[float]:
    import torch

    result = []
    for index in range(count):
        src = torch.empty(HBM_BYTES, dtype=torch.uint8, device=f"cuda:{index}")
        dst = torch.empty_like(src)
        with torch.cuda.device(index):
            seconds = cuda_timed(lambda s=src, d=dst: d.copy_(s), 10)
        result.append(2 * HBM_BYTES / seconds / 1e9)  # bytes read + written
    return result


def allreduce_rank(job: Job, rank: int, world_size: int, events: EventLog | None) -> None:
    """Rank function of the ``preflight_allreduce`` distributed phase: time a large all_reduce."""
    import torch
    import torch.distributed as dist

    from payload.collective_math import bandwidths

    elements = ALLREDUCE_BYTES // 4
    buf = torch.empty(elements, device=f"cuda:{rank}")
    for _ in range(3):
        buf.fill_(float(rank + 1))
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    iters = 10
    start = time.perf_counter()
    for _ in range(iters):
        buf.fill_(float(rank + 1))
        dist.all_reduce(buf)
    torch.cuda.synchronize()
    seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=f"cuda:{rank}")
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    wrong = torch.tensor([int((buf != world_size * (world_size + 1) / 2).sum())], device=f"cuda:{rank}")
    dist.all_reduce(wrong)
    if events is not None:  # rank 0
        algbw, busbw = bandwidths("all_reduce", ALLREDUCE_BYTES, float(seconds.item()), world_size)
        (events.path.parent / "artifacts" / "facts" / "allreduce.json").write_text(json.dumps(
            {"bytes": ALLREDUCE_BYTES, "busbw_gbps": busbw, "algbw_gbps": algbw, "wrong": int(wrong.item())}))
