"""Live preflight measurements on the node (torch): CUDA init on every GPU, bf16 GEMM TFLOP/s and
device-to-device copy GB/s per GPU, and an NCCL all_reduce across all GPUs with its
``NCCL_DEBUG=INFO`` logs. Results land in the facts snapshot (``probes.json``, one
``nccl-debug.<host>.<pid>.log`` per rank) so the checks judge them like any other fact. The
per-GPU probes run in a child process that exits (``measure``, ``payload.child``), so their CUDA
contexts and cached memory are gone before the next phase. Across nodes the all_reduce is
``cluster_rank``: each node's, each rail's and the whole cluster's (``payload.node.cluster_checks``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..comm.collective_math import bandwidths
from ..comm.group import Layout, cuda_timed, gather_by_slot, group_device, subgroups, synchronize
from ..events import EventLog
from ..job import Job

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


def gemm_tflops(count: int) -> list[float]:
    import torch

    result = []
    for index in range(count):
        a = torch.randn(GEMM_N, GEMM_N, device=f"cuda:{index}", dtype=torch.bfloat16)
        b = torch.randn_like(a)
        with torch.cuda.device(index):
            seconds = cuda_timed(lambda a=a, b=b: a @ b, 10, [index])
        result.append(2 * GEMM_N**3 / seconds / 1e12)
    return result


def hbm_gbps(count: int) -> list[float]:
    import torch

    result = []
    for index in range(count):
        src = torch.empty(HBM_BYTES, dtype=torch.uint8, device=f"cuda:{index}")
        dst = torch.empty_like(src)
        with torch.cuda.device(index):
            seconds = cuda_timed(lambda s=src, d=dst: d.copy_(s), 10, [index])
        result.append(2 * HBM_BYTES / seconds / 1e9)  # bytes read + written
    return result


def measure(report: Callable[[Any], None], names: Sequence[str], count: int, injected: dict[str, Any]) -> None:
    """Child-process side of the preflight probes (``payload.child``): run the named probes in
    order, ``report((name, value))`` after each; an exception is the probe's ``{"error": ...}``;
    nothing runs after a ``cuda_init`` error."""
    probes: dict[str, Callable[[], Any]] = {"cuda_init": lambda: cuda_init(count, injected),
                                            "gemm_tflops": lambda: gemm_tflops(count),
                                            "hbm_gbps": lambda: hbm_gbps(count)}
    for name in names:
        try:
            value = probes[name]()
        except Exception as exc:  # the message is the finding
            value = {"error": f"{type(exc).__name__}: {exc}"}
        report((name, value))
        if name == "cuda_init" and value.get("error"):
            break


def allreduce_rank(job: Job, rank: int, world_size: int, events: EventLog | None) -> None:
    """Rank function of the ``preflight_allreduce`` distributed phase: fill and check one untimed
    all_reduce, then time ``iters`` of the all_reduce alone (no fill inside the timing)."""
    import torch
    import torch.distributed as dist

    device = group_device()
    buf = torch.empty(ALLREDUCE_BYTES // 4, device=device)
    buf.fill_(float(rank + 1))
    dist.all_reduce(buf)
    wrong = torch.tensor([int((buf != world_size * (world_size + 1) / 2).sum())], device=device)
    for _ in range(2):
        dist.all_reduce(buf)
    synchronize([device])
    iters = 10
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    synchronize([device])
    seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    dist.all_reduce(wrong)
    if events is not None:  # rank 0
        algbw, busbw = bandwidths("all_reduce", ALLREDUCE_BYTES, float(seconds.item()), world_size)
        (events.path.parent / "artifacts" / "facts" / "allreduce.json").write_text(json.dumps(
            {"bytes": ALLREDUCE_BYTES, "busbw_gbps": busbw, "algbw_gbps": algbw, "wrong": int(wrong.item())}))


CLUSTER_BYTES_GPU = 8 * 1024**3
"""The cross-node probe's all_reduce on GPUs: 8 GiB, the size of the published acceptance figures."""
CLUSTER_BYTES_CPU = 1024**2
"""On CPU (gloo) the figures judge nothing by default: 1 MiB proves the plumbing, quickly."""


def cluster_rank(job: Job, rank: int, world_size: int, events: EventLog | None) -> dict[str, Any]:
    """Rank function of the ``preflight_cluster`` distributed phase (nodes > 1): the all_reduce
    busbw of each node's ranks (``intra_node``, every node at once), of each rail (``inter_node``:
    the ranks of one local rank on every node, one rank per node, every rail at once) and of the
    whole cluster. Each figure is filled and checked once untimed, then timed alone; a group's time
    is its slowest rank's. Every rank returns the same dict: ``{bytes, nodes, count, intra_node:
    [{node_rank, busbw_gbps, algbw_gbps, wrong, ranks}], inter_node: [{rail, ...}], cluster: {...}}``
    (``intra_node`` is empty with one rank per node)."""
    import torch

    layout = Layout.of(job)
    on_gpu = job.gpu.lower() != "cpu"
    size = CLUSTER_BYTES_GPU if on_gpu else CLUSTER_BYTES_CPU
    warmup, iters = (2, 10) if on_gpu else (1, 3)
    device = group_device()
    buf = torch.empty(size // 4, device=device)
    node_group, rail_group = subgroups(job)
    local_rank = rank % layout.count
    result: dict[str, Any] = {"bytes": size, "nodes": layout.nodes, "count": layout.count}
    intra = _timed_allreduce(buf, node_group, warmup, iters) if layout.count > 1 else None
    rail = _timed_allreduce(buf, rail_group, warmup, iters)
    whole = _timed_allreduce(buf, None, warmup, iters)
    result["intra_node"] = [] if intra is None else [
        {"node_rank": node, **_figures(size, timing, layout.count)}
        for node, timing in enumerate(gather_by_slot(intra, layout.node_rank, local_rank == 0, layout.nodes))]
    result["inter_node"] = [
        {"rail": r, **_figures(size, timing, layout.nodes)}
        for r, timing in enumerate(gather_by_slot(rail, local_rank, layout.node_rank == 0, layout.count))]
    result["cluster"] = _figures(size, whole, world_size)
    return result


def _timed_allreduce(buf: Any, group: Any, warmup: int, iters: int) -> tuple[float, int]:
    """(seconds per all_reduce of ``buf`` in ``group``, the slowest rank's; wrong elements over the
    group) after one checked untimed run and ``warmup`` more."""
    import torch
    import torch.distributed as dist

    size = dist.get_world_size(group)
    buf.fill_(float(dist.get_rank(group) + 1))
    dist.all_reduce(buf, group=group)
    wrong = torch.tensor([int((buf != size * (size + 1) / 2).sum())], device=buf.device)
    for _ in range(warmup):
        dist.all_reduce(buf, group=group)
    synchronize([buf.device])
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf, group=group)
    synchronize([buf.device])
    seconds = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=buf.device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(wrong, group=group)
    return float(seconds.item()), int(wrong.item())


def _figures(size: int, timing: Sequence[float], ranks: int) -> dict[str, Any]:
    """busbw and algbw of an all_reduce of ``size`` bytes over ``ranks`` from (seconds, wrong)."""

    seconds, wrong = timing
    algbw, busbw = bandwidths("all_reduce", size, seconds, ranks)
    return {"busbw_gbps": busbw, "algbw_gbps": algbw, "wrong": int(wrong), "ranks": ranks}
