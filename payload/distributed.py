"""Run one phase as ``world_size`` ranks under torch.distributed on this node.

The runner starts one ``python -m payload worker`` process per rank; they meet through a
FileStore in the attempt directory (no port to pick, no race). Backend: NCCL when the cell asked
for GPUs, gloo on CPU. Each rank's output goes to ``artifacts/logs/<phase>-rank<r>.log``.

Device discipline: NCCL maps only CUDA tensors (a CPU tensor fails with "No backend type
associated with device type cpu"), so every tensor handed to a collective is created on
``group_device()`` (this rank's GPU on NCCL, the CPU on gloo), and ``barrier()`` names the GPU.
The group is bound to its GPU (``device_id``) and its collectives time out with the phase's budget
(``group_options``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import payload
from payload.events import EventLog
from payload.job import Job

if TYPE_CHECKING:
    import torch

DEFAULT_TIMEOUT_S = 600.0
"""Collective timeout of a phase launched without a budget (torch's own NCCL default, made explicit)."""


class RanksFailed(RuntimeError):
    """A rank exited non-zero; the message holds the tail of its log."""


def uses_gpu(job: Job) -> bool:
    return job.gpu.lower() != "cpu"


def backend_for(job: Job) -> str:
    return "nccl" if uses_gpu(job) else "gloo"


def comm_device(backend: str, local_rank: int) -> torch.device:
    """The device a collective's tensors must live on: ``cuda:<local_rank>`` for NCCL, the CPU for gloo."""
    import torch

    return torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")


def group_device() -> torch.device:
    """``comm_device`` of the initialised default group, for this rank."""
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend())
    return comm_device(backend, torch.cuda.current_device() if backend == "nccl" else 0)


def group_options(backend: str, local_rank: int, timeout_s: float) -> dict[str, Any]:
    """Keyword arguments of ``init_process_group`` besides backend, rank and rendezvous: the
    collective timeout and, on NCCL, the rank's GPU (eager communicator init, barriers on the
    right device)."""
    import torch

    options: dict[str, Any] = {"timeout": timedelta(seconds=max(1.0, timeout_s))}
    if backend == "nccl":
        options["device_id"] = torch.device("cuda", local_rank)
    return options


def synchronize(devices: Iterable[torch.device | int]) -> None:
    """Wait until the work queued on every CUDA device in ``devices`` is done (CPU: nothing to wait for)."""
    import torch

    for device in devices:
        if isinstance(device, int) or device.type == "cuda":
            torch.cuda.synchronize(device)


def barrier() -> None:
    """``dist.barrier`` on the group's device (NCCL: this rank's GPU, named explicitly)."""
    import torch.distributed as dist

    device = group_device()
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()


def launch(job_path: Path, phase: str, world_size: int,
           wrapper: Callable[[int], list[str]] | None = None, timeout_s: float | None = None) -> None:
    """Start every rank, wait for all; raise RanksFailed when one fails (the others are killed) or
    when ``timeout_s`` passes ("timed out"). ``wrapper(rank)`` is a command prefix a rank runs
    under (e.g. a profiler)."""
    workdir = job_path.parent
    logs = workdir / "artifacts" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rendezvous = workdir / f".rendezvous-{phase}-{uuid.uuid4().hex}"
    env = {**os.environ, **Job.load(job_path).env}
    package_root = str(Path(payload.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // world_size))
    procs: list[tuple[int, subprocess.Popen[bytes], Path]] = []
    for rank in range(world_size):
        log_path = logs / f"{phase}-rank{rank}.log"
        with log_path.open("wb") as out:
            cmd = [*(wrapper(rank) if wrapper else []), sys.executable, "-m", "payload", "worker", str(job_path),
                   "--phase", phase, "--rank", str(rank), "--world-size", str(world_size),
                   "--rendezvous", str(rendezvous), "--timeout-s", str(timeout_s or DEFAULT_TIMEOUT_S)]
            procs.append((rank, subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env), log_path))
    deadline = time.monotonic() + timeout_s if timeout_s is not None else None
    try:
        while any(p.poll() is None for _, p, _ in procs):
            if deadline is not None and time.monotonic() > deadline:
                raise RanksFailed(f"{phase} timed out after {timeout_s:.0f} s")
            failed = [(r, p, log) for r, p, log in procs if p.returncode not in (None, 0)]
            if failed:
                raise RanksFailed(_failure_message(phase, *failed[0]))
            time.sleep(0.05)
        failed = [(r, p, log) for r, p, log in procs if p.returncode != 0]
        if failed:
            raise RanksFailed(_failure_message(phase, *failed[0]))
    finally:
        for _, p, _ in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        rendezvous.unlink(missing_ok=True)


def _failure_message(phase: str, rank: int, proc: subprocess.Popen[bytes], log: Path) -> str:
    tail = log.read_text(errors="replace").strip().splitlines()[-8:]
    return f"{phase} rank {rank} exited with code {proc.returncode}: " + " | ".join(tail)


def run_worker(job_path: str, phase: str, rank: int, world_size: int, rendezvous: str,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """Entry point of one rank: join the group (collectives time out after ``timeout_s``), run the
    phase's per-rank function, leave."""
    import torch
    import torch.distributed as dist

    from payload.collectives import collectives_rank
    from payload.probes import allreduce_rank
    from payload.profile import profile_rank

    rank_functions = {"profile": profile_rank, "collectives": collectives_rank, "preflight_allreduce": allreduce_rank}
    job = Job.load(job_path)
    seen = {name: os.environ.get(name) for name in job.env}
    (Path(job_path).parent / "artifacts" / "logs" / f"{phase}-rank{rank}.env.json").write_text(json.dumps(seen))
    backend = backend_for(job)
    local_rank = rank  # one node: the local rank is the rank
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world_size,
                            **group_options(backend, local_rank, timeout_s))
    try:
        events = EventLog(Path(job_path).parent / "events.jsonl") if rank == 0 else None
        rank_functions[phase](job, rank, world_size, events)
    finally:
        dist.destroy_process_group()
    return 0
