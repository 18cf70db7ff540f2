"""Run the distributed phases under torch.distributed: ``count`` ranks on this node, of a world
of ``nodes × count`` ranks.

The runner starts one ``python -m payload worker`` process per local rank for the whole attempt
(``Ranks``): they join one process group and run each distributed phase the runner names, in
order, in the same process (one ``import torch``, one CUDA context, one NCCL init per rank and
attempt). Each rank's output goes to ``artifacts/logs/attempt-rank<r>.log`` (``r`` the global
rank). ``launch`` runs one phase on ranks started for it alone (the profile under nsys). Backend:
NCCL when the cell asked for GPUs, gloo on CPU.

Rendezvous (``init_method``): one node (``job.nodes == 1``) meets through a FileStore in the
attempt directory (no port to pick, no race). Across nodes every node's runner starts its local
ranks as global ranks ``node_rank × count + local_rank`` (``Layout``) and they meet through
torch.distributed's TCP rendezvous, ``tcp://master_addr:master_port``, hosted by global rank 0 on
node 0; each later set of ranks the runner starts in the same attempt (the profile under nsys)
meets at ``master_port + 1``, ``+ 2`` … so it never reaches a store of the set before it. The
local rank is the GPU index (``torch.cuda.set_device(local_rank)``), never the global rank. A node
whose peer is gone fails, never hangs: its ranks' collectives time out (``--timeout-s``) and the
runner stops a phase at its budget. ``subgroups`` gives each rank its node's group and its rail
(the ranks of the same local rank on every node). Before any of that, each worker node probes node
0's rendezvous port over TCP (``probe_rendezvous``: "rendezvous unreachable from node k" within
``RENDEZVOUS_PROBE_S``), node 0's runner answering on it (``hold_rendezvous``) and holding every
prober until all worker nodes have reached it; then it frees the port and only then do any ranks
start, so no rank's store client ever reaches the holder instead of the store.

What a rank does once started is ``payload.worker``'s; what it uses of its group, ``group``'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..job import Job
from .group import DEFAULT_TIMEOUT_S, Layout, uses_gpu


class RanksFailed(RuntimeError):
    """A rank exited non-zero; the message holds the tail of its log."""


def init_method(job: Job, rendezvous: Path | str, incarnation: int = 0) -> str:
    """Where the ranks meet: a FileStore at ``rendezvous`` on one node, node 0's TCP store across nodes
    (``master_port + incarnation``: the attempt's ``incarnation``-th set of ranks)."""
    if job.nodes == 1:
        return f"file://{rendezvous}"
    if not job.master_addr or not job.master_port:
        raise ValueError(f"job.json: {job.nodes} nodes need master_addr and master_port (node 0's rendezvous)")
    host = f"[{job.master_addr}]" if ":" in job.master_addr else job.master_addr
    return f"tcp://{host}:{job.master_port + incarnation}"


def omp_threads(job: Job, world_size: int, cpus: int) -> str:
    """``OMP_NUM_THREADS`` for each rank unless the job's env sets it: 1 on GPU, as torchrun and
    upstream nanochat run (host threads only feed the GPU; more just contend), and the node's CPUs
    shared out on a CPU-only node, where the ranks' own math is the work."""
    return "1" if uses_gpu(job) else str(max(1, cpus // world_size))


ALLOCATOR_CONF = "expandable_segments:True"
"""``PYTORCH_ALLOC_CONF`` of every rank on GPU unless the node's or the job's env sets it (or the older
``PYTORCH_CUDA_ALLOC_CONF``), as upstream nanochat's ``scripts/base_train.py`` sets it before it
imports torch: the caching allocator grows segments in place instead of holding fragments, which is
what lets d26 at device batch 16 fit an 80 GB card."""


def allocator_env(job: Job, env: dict[str, str]) -> dict[str, str]:
    """What ``_start`` adds to a rank's environment ``env`` for the CUDA caching allocator."""
    if not uses_gpu(job) or "PYTORCH_ALLOC_CONF" in env or "PYTORCH_CUDA_ALLOC_CONF" in env:
        return {}
    return {"PYTORCH_ALLOC_CONF": ALLOCATOR_CONF}


RENDEZVOUS_PROBE_S = 10.0
"""How long a worker node tries to reach node 0's rendezvous port before it gives up."""
RENDEZVOUS_HOLD_S = 300.0
"""How long node 0 keeps its port for the probes (every worker node's, or this long) before its own
ranks' store takes it; how long a worker that reached node 0 waits for that moment."""
_PROBE_HELLO = b"benchctl-rendezvous-probe "
_WAIT, _GO = b"w", b"g"


class RendezvousUnreachable(RuntimeError):
    """A worker node could not open a TCP connection to node 0's rendezvous port: a firewall or
    security group that blocks it, or an address this node cannot route to (the wrong interface)."""


_held: dict[str, Any] = {}
"""The listener that keeps node 0's rendezvous port answering until its ranks' store takes it."""


def hold_rendezvous(job: Job) -> None:
    """On node 0 of a cluster: answer the worker nodes' probes on ``master_port`` and keep each
    prober waiting (``_WAIT``) until every worker node has reached it; then close the port first and
    send each one ``_GO``, so no worker starts ranks while this listener, not the ranks' store, holds
    the port (a store client that reached it would fail). ``release_rendezvous`` waits for that
    moment before node 0's own ranks start. A port this node cannot bind is left alone (the store
    reports it)."""
    import socket

    if job.nodes < 2 or job.node_rank != 0 or not job.master_port or _held:
        return
    try:
        listener = socket.create_server(("", job.master_port), family=socket.AF_INET6, dualstack_ipv6=True) \
            if socket.has_dualstack_ipv6() else socket.create_server(("", job.master_port))
    except OSError:
        return
    listener.settimeout(0.2)
    stop, everyone = threading.Event(), threading.Event()
    waiting: dict[int, socket.socket] = {}
    workers = set(range(1, job.nodes))

    def greet(conn: socket.socket) -> None:
        """Read a prober's node rank and keep its connection; anything else is closed."""
        conn.settimeout(5.0)
        try:
            conn.sendall(_WAIT)
            line = conn.recv(len(_PROBE_HELLO) + 16)
            rank = int(line[len(_PROBE_HELLO):].strip()) if line.startswith(_PROBE_HELLO) else -1
        except (OSError, ValueError):
            rank = -1
        if rank in workers:
            with contextlib.suppress(KeyError, OSError):
                waiting.pop(rank).close()  # a prober that retried: its newer connection counts
            waiting[rank] = conn
        else:
            conn.close()

    def answer() -> None:
        while not stop.is_set() and set(waiting) != workers:
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            greet(conn)
        listener.close()  # the port is free before any worker is told to go on
        for conn in waiting.values():
            with contextlib.suppress(OSError), conn:
                conn.sendall(_GO)
        everyone.set()

    thread = threading.Thread(target=answer, name="rendezvous-hold", daemon=True)
    thread.start()
    _held.update(stop=stop, thread=thread, everyone=everyone)


def release_rendezvous(wait_s: float = RENDEZVOUS_HOLD_S) -> None:
    """Node 0, before its ranks' store binds the port: wait up to ``wait_s`` for every worker node's
    probe, then close ``hold_rendezvous``'s listener; nothing held: nothing."""
    if _held:
        _held.pop("everyone").wait(timeout=wait_s)
        _held.pop("stop").set()
        _held.pop("thread").join(timeout=5.0)


def probe_rendezvous(job: Job, timeout_s: float = RENDEZVOUS_PROBE_S, interval_s: float = 0.5,
                     hold_s: float = RENDEZVOUS_HOLD_S) -> None:
    """On a worker node (``node_rank`` > 0): open a TCP connection to node 0's ``master_addr:master_port``
    before NCCL starts, retrying every ``interval_s`` (node 0 may start a moment later) for
    ``timeout_s``; RendezvousUnreachable ("rendezvous unreachable from node k") when none opens. Once
    open, node 0's holder (``hold_rendezvous``) answers ``_WAIT``: wait up to ``hold_s`` for its
    ``_GO`` (every node reached it, the port is the store's now). A port that answers otherwise (node 0's
    store already) or closes: reachable, return."""
    import socket

    if job.nodes < 2 or job.node_rank == 0:
        return
    deadline = time.monotonic() + timeout_s
    last: OSError | None = None
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((job.master_addr, job.master_port), timeout=max(0.1, min(left, 3.0))) as conn:
                _wait_for_go(conn, job.node_rank, hold_s)
                return
        except OSError as exc:
            last = exc
        if time.monotonic() + interval_s >= deadline:
            break
        time.sleep(interval_s)
    raise RendezvousUnreachable(
        f"rendezvous unreachable from node {job.node_rank}: no TCP connection to node 0 at "
        f"{job.master_addr}:{job.master_port} within {timeout_s:.0f} s ({type(last).__name__}: {last}); the port is "
        "blocked between the nodes (firewall, security group) or that address is not one this node can reach "
        "(the wrong interface): open the port between the nodes or give node 0's internal address")


def _wait_for_go(conn: Any, node_rank: int, hold_s: float) -> None:
    """The connection is open (the port is reachable): if node 0's holder answers, say who we are and
    wait for its go; whatever else happens (no holder, a close, a timeout) ends the wait, never the probe."""
    with contextlib.suppress(OSError):
        conn.settimeout(5.0)
        if conn.recv(1) != _WAIT:
            return
        conn.sendall(_PROBE_HELLO + str(node_rank).encode() + b"\n")
        conn.settimeout(hold_s)
        conn.recv(1)


CLOSE_GRACE_S = 30.0
"""How long ``Ranks.close`` waits for the ranks to leave the group before killing them."""

Procs = list[tuple[int, subprocess.Popen[bytes], Path]]
"""(global rank, process, log) of each local rank."""
_incarnation = 0
"""Sets of ranks this runner started so far (across nodes, the next set meets at ``master_port`` + this)."""


class Ranks:
    """The attempt's rank processes: started at the first ``run``, kept until ``close``.

    ``local_ranks`` processes on this node (``job.count``; with ``job.nodes`` > 1 they are this
    node's share of the world, ``Layout``). ``run(phase)`` has every local rank run ``phase`` and
    returns, when all have finished it, what the node's first rank returned (a dict, or None); it
    raises RanksFailed (and kills every rank) when a rank exits or ``timeout_s`` passes ("timed
    out"). The ranks see the environment of their start (``os.environ`` then the job's ``env``). A
    ``run`` after a failure or ``close`` starts fresh ranks."""

    def __init__(self, job_path: Path, local_ranks: int) -> None:
        self.job_path, self.world_size = job_path, local_ranks
        self._rendezvous = Path()
        self._procs: Procs = []
        self._phases = 0

    def run(self, phase: str, timeout_s: float | None = None) -> dict[str, Any] | None:
        if not self._procs:
            release_rendezvous(timeout_s or RENDEZVOUS_HOLD_S)  # node 0: the probes' wait is this phase's
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
        first = result_file(self._rendezvous, self._procs[0][0], phase)
        return json.loads(first.read_text()) if first.is_file() else None

    @property
    def started(self) -> bool:
        """The ranks run (started by a ``run`` and neither failed nor closed since)."""
        return bool(self._procs)

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


def result_file(rendezvous: Path | str, rank: int, phase: str) -> Path:
    """Where a rank writes what its phase function returned (JSON), for the runner."""
    return Path(f"{rendezvous}.rank{rank}.{phase}.json")


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
    under (e.g. a profiler), ``rank`` the global rank; ``world_size`` is the ranks on this node."""
    rendezvous, procs = _start(job_path, world_size, phase, ["--phase", phase], wrapper, timeout_s)
    try:
        _wait(phase, procs, timeout_s, lambda: all(p.poll() == 0 for _, p, _ in procs), exit_ok=True)
    finally:
        _stop(procs, rendezvous, grace_s=0)


def _start(job_path: Path, world_size: int, label: str, worker_args: list[str],
           wrapper: Callable[[int], list[str]] | None, timeout_s: float | None,
           stdin: int | None = None) -> tuple[Path, Procs]:
    """Start one ``python -m payload worker`` per local rank (``world_size`` of them on this node),
    output to ``artifacts/logs/<label>-rank<r>.log`` (``r`` the global rank), with torchrun's
    ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE`` and ``NODE_RANK`` set."""
    global _incarnation
    release_rendezvous(timeout_s or RENDEZVOUS_HOLD_S)  # node 0: its ranks' store takes the port the runner held
    workdir = job_path.parent
    logs = workdir / "artifacts" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rendezvous = workdir / f".rendezvous-{label}-{uuid.uuid4().hex}"
    job = Job.load(job_path)
    layout = Layout(job.nodes, world_size, job.node_rank) if job.nodes > 1 else Layout(1, world_size)
    meet = init_method(job, rendezvous, _incarnation)
    _incarnation += 1
    env = {**os.environ, **job.env}
    package_root = str(Path(__file__).parents[2])  # the folder holding payload/
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    if "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = omp_threads(job, world_size, os.cpu_count() or 1)
    env.update(allocator_env(job, env))
    procs: Procs = []
    for local_rank in range(world_size):
        rank = layout.global_rank(local_rank)
        log_path = logs / f"{label}-rank{rank}.log"
        with log_path.open("wb") as out:
            cmd = [*(wrapper(rank) if wrapper else []), sys.executable, "-m", "payload", "worker", str(job_path),
                   *worker_args, "--rank", str(rank), "--world-size", str(layout.world_size),
                   "--local-rank", str(local_rank), "--init-method", meet,
                   "--rendezvous", str(rendezvous), "--timeout-s", str(timeout_s or DEFAULT_TIMEOUT_S)]
            where = {"RANK": rank, "LOCAL_RANK": local_rank, "WORLD_SIZE": layout.world_size,
                     "LOCAL_WORLD_SIZE": layout.count, "NODE_RANK": layout.node_rank}  # as torchrun sets them
            procs.append((rank, subprocess.Popen(cmd, stdin=stdin, stdout=out, stderr=subprocess.STDOUT,
                                                 env={**env, **{k: str(v) for k, v in where.items()}}), log_path))
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
