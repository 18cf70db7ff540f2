"""Run one phase as ``world_size`` ranks under torch.distributed on this node.

The runner starts one ``python -m payload worker`` process per rank; they meet through a
FileStore in the attempt directory (no port to pick, no race). Backend: NCCL when the cell asked
for GPUs, gloo on CPU. Each rank's output goes to ``artifacts/logs/<phase>-rank<r>.log``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import payload
from payload.events import EventLog
from payload.job import Job


class RanksFailed(RuntimeError):
    """A rank exited non-zero; the message holds the tail of its log."""


def uses_gpu(job: Job) -> bool:
    return job.gpu.lower() != "cpu"


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
                   "--rendezvous", str(rendezvous)]
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


def run_worker(job_path: str, phase: str, rank: int, world_size: int, rendezvous: str) -> int:
    """Entry point of one rank: join the group, run the phase's per-rank function, leave."""
    import torch
    import torch.distributed as dist

    from payload.collectives import collectives_rank
    from payload.probes import allreduce_rank
    from payload.profile import profile_rank

    rank_functions = {"profile": profile_rank, "collectives": collectives_rank, "preflight_allreduce": allreduce_rank}
    job = Job.load(job_path)
    seen = {name: os.environ.get(name) for name in job.env}
    (Path(job_path).parent / "artifacts" / "logs" / f"{phase}-rank{rank}.env.json").write_text(json.dumps(seen))
    gpu = uses_gpu(job)
    if gpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if gpu else "gloo", init_method=f"file://{rendezvous}",
                            rank=rank, world_size=world_size)
    try:
        events = EventLog(Path(job_path).parent / "events.jsonl") if rank == 0 else None
        rank_functions[phase](job, rank, world_size, events)
    finally:
        dist.destroy_process_group()
    return 0
