"""Run the distributed phases as ``world_size`` ranks under torch.distributed on this node.

The runner starts one ``python -m payload worker`` process per rank for the whole attempt
(``Ranks``): they meet once through a FileStore in the attempt directory (no port to pick, no
race), join one process group, and run each distributed phase the runner names, in order, in the
same process (one ``import torch``, one CUDA context, one NCCL init per rank and attempt). Each
rank's output goes to ``artifacts/logs/attempt-rank<r>.log``. ``launch`` runs one phase on ranks
started for it alone (the profile under nsys). Backend: NCCL when the cell asked for GPUs, gloo on CPU.

Device discipline: NCCL maps only CUDA tensors (a CPU tensor fails with "No backend type
associated with device type cpu"), so every tensor handed to a collective is created on
``group_device()`` (this rank's GPU on NCCL, the CPU on gloo), and ``barrier()`` names the GPU.
The group is bound to its GPU (``device_id``) and its collectives time out with the phase's budget
(``group_options``).
"""

from __future__ import annotations

import contextlib
import gc
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

from .events import EventLog
from .job import Job

if TYPE_CHECKING:
    import torch

DEFAULT_TIMEOUT_S = 600.0
"""Collective timeout of a phase launched without a budget (torch's own NCCL default, made explicit)."""


class RanksFailed(RuntimeError):
    """A rank exited non-zero; the message holds the tail of its log."""


def uses_gpu(job: Job) -> bool:
    return job.gpu.lower() != "cpu"


def omp_threads(job: Job, world_size: int, cpus: int) -> str:
    """``OMP_NUM_THREADS`` for each rank unless the job's env sets it: 1 on GPU, as torchrun and
    upstream nanochat run (host threads only feed the GPU; more just contend), and the node's CPUs
    shared out on a CPU-only node, where the ranks' own math is the work."""
    return "1" if uses_gpu(job) else str(max(1, cpus // world_size))


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


CLOSE_GRACE_S = 30.0
"""How long ``Ranks.close`` waits for the ranks to leave the group before killing them."""

Procs = list[tuple[int, subprocess.Popen[bytes], Path]]
"""(rank, process, log) of each rank."""


class Ranks:
    """The attempt's rank processes: started at the first ``run``, kept until ``close``.

    ``run(phase)`` has every rank run ``phase`` and returns when all have finished it; it raises
    RanksFailed (and kills every rank) when a rank exits or ``timeout_s`` passes ("timed out"). The
    ranks see the environment of their start (``os.environ`` then the job's ``env``). A ``run``
    after a failure or ``close`` starts fresh ranks."""

    def __init__(self, job_path: Path, world_size: int) -> None:
        self.job_path, self.world_size = job_path, world_size
        self._rendezvous = Path()
        self._procs: Procs = []
        self._phases = 0

    def run(self, phase: str, timeout_s: float | None = None) -> None:
        if not self._procs:
            self._rendezvous, self._procs = _start(self.job_path, self.world_size, "attempt", [], None, None,
                                                   stdin=subprocess.PIPE)
            self._phases = 0
        self._phases += 1
        for _, proc, _ in self._procs:
            assert proc.stdin is not None
            with contextlib.suppress(OSError):  # a rank that is gone is reported by _wait
                proc.stdin.write(f"{phase}\n".encode())
                proc.stdin.flush()
        try:
            _wait(phase, self._procs, timeout_s, self._finished, exit_ok=False)
        except BaseException:
            _stop(self._procs, self._rendezvous, grace_s=0)
            self._procs = []
            raise

    def _finished(self) -> bool:
        return all(_read(done_file(self._rendezvous, rank)).count("\n") >= self._phases
                   for rank, _, _ in self._procs)

    def close(self) -> None:
        """Tell the ranks there is no more (end of their stdin), give them ``CLOSE_GRACE_S`` to
        leave the group, kill any still there. Nothing to do when none were started."""
        if self._procs:
            _stop(self._procs, self._rendezvous, grace_s=CLOSE_GRACE_S)
            self._procs = []


def done_file(rendezvous: Path | str, rank: int) -> Path:
    """Where a rank appends the name of each phase it finished (how the runner knows)."""
    return Path(f"{rendezvous}.rank{rank}.done")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def launch(job_path: Path, phase: str, world_size: int,
           wrapper: Callable[[int], list[str]] | None = None, timeout_s: float | None = None) -> None:
    """Run one phase on ranks started for it alone (logs ``artifacts/logs/<phase>-rank<r>.log``):
    start every rank, wait for all; raise RanksFailed when one fails (the others are killed) or
    when ``timeout_s`` passes ("timed out"). ``wrapper(rank)`` is a command prefix a rank runs
    under (e.g. a profiler)."""
    rendezvous, procs = _start(job_path, world_size, phase, ["--phase", phase], wrapper, timeout_s)
    try:
        _wait(phase, procs, timeout_s, lambda: all(p.poll() == 0 for _, p, _ in procs), exit_ok=True)
    finally:
        _stop(procs, rendezvous, grace_s=0)


def _start(job_path: Path, world_size: int, label: str, worker_args: list[str],
           wrapper: Callable[[int], list[str]] | None, timeout_s: float | None,
           stdin: int | None = None) -> tuple[Path, Procs]:
    """Start one ``python -m payload worker`` per rank, output to ``artifacts/logs/<label>-rank<r>.log``."""
    workdir = job_path.parent
    logs = workdir / "artifacts" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rendezvous = workdir / f".rendezvous-{label}-{uuid.uuid4().hex}"
    job = Job.load(job_path)
    env = {**os.environ, **job.env}
    package_root = str(Path(__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = omp_threads(job, world_size, os.cpu_count() or 1)
    procs: Procs = []
    for rank in range(world_size):
        log_path = logs / f"{label}-rank{rank}.log"
        with log_path.open("wb") as out:
            cmd = [*(wrapper(rank) if wrapper else []), sys.executable, "-m", "payload", "worker", str(job_path),
                   *worker_args, "--rank", str(rank), "--world-size", str(world_size),
                   "--rendezvous", str(rendezvous), "--timeout-s", str(timeout_s or DEFAULT_TIMEOUT_S)]
            procs.append((rank, subprocess.Popen(cmd, stdin=stdin, stdout=out, stderr=subprocess.STDOUT, env=env),
                          log_path))
    return rendezvous, procs


def _wait(phase: str, procs: Procs, timeout_s: float | None, finished: Callable[[], bool], exit_ok: bool) -> None:
    """Poll until ``finished()``; raise RanksFailed when a rank exits (with 0 too unless ``exit_ok``)
    first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s if timeout_s is not None else None
    while not finished():
        if deadline is not None and time.monotonic() > deadline:
            raise RanksFailed(f"{phase} timed out after {timeout_s:.0f} s")
        failed = [(r, p, log) for r, p, log in procs if p.poll() is not None and (p.returncode != 0 or not exit_ok)]
        if failed:
            raise RanksFailed(_failure_message(phase, *failed[0]))
        time.sleep(0.05)


def _stop(procs: Procs, rendezvous: Path, grace_s: float) -> None:
    """Close the ranks' stdin, wait up to ``grace_s`` for them to exit, kill the rest, remove the
    rendezvous files."""
    for _, proc, _ in procs:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
    deadline = time.monotonic() + grace_s
    for _, proc, _ in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for path in rendezvous.parent.glob(f"{rendezvous.name}*"):
        path.unlink(missing_ok=True)


def _failure_message(phase: str, rank: int, proc: subprocess.Popen[bytes], log: Path) -> str:
    tail = log.read_text(errors="replace").strip().splitlines()[-8:]
    return f"{phase} rank {rank} exited with code {proc.returncode}: " + " | ".join(tail)


def _rank_functions() -> dict[str, Callable[[Job, int, int, EventLog | None], None]]:
    from .collectives import collectives_rank
    from .probes import allreduce_rank
    from .profile import profile_rank

    return {"profile": profile_rank, "collectives": collectives_rank, "preflight_allreduce": allreduce_rank}


def run_worker(job_path: str, phase: str | None, rank: int, world_size: int, rendezvous: str,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
    """Entry point of one rank: join the group (collectives time out after ``timeout_s``), run
    ``phase`` or, without one, each phase named on a line of stdin until its end, appending each
    finished phase's name to ``done_file``; leave the group. An exception ends the process (the
    runner reads its log's tail)."""
    import torch
    import torch.distributed as dist

    rank_functions = _rank_functions()
    job = Job.load(job_path)
    logs = Path(job_path).parent / "artifacts" / "logs"
    backend = backend_for(job)
    local_rank = rank  # one node: the local rank is the rank
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, init_method=f"file://{rendezvous}", rank=rank, world_size=world_size,
                            **group_options(backend, local_rank, timeout_s))
    print(f"rank {rank} pid {os.getpid()}: joined the {backend} group of {world_size}", flush=True)
    events = EventLog(Path(job_path).parent / "events.jsonl") if rank == 0 else None
    try:
        names: Iterable[str] = [phase] if phase else (line.strip() for line in sys.stdin)
        for name in names:
            if not name:
                continue
            print(f"rank {rank} pid {os.getpid()}: phase {name}", flush=True)
            seen = {key: os.environ.get(key) for key in job.env}
            (logs / f"{name}-rank{rank}.env.json").write_text(json.dumps(seen))
            rank_functions[name](job, rank, world_size, events)
            gc.collect()  # the phase's tensors, before the next phase allocates its own
            if backend == "nccl":
                torch.cuda.empty_cache()
            with done_file(rendezvous, rank).open("a") as done:
                done.write(f"{name}\n")
    finally:
        if events is not None:
            events.close()
        dist.destroy_process_group()
    return 0
