"""A stand-in for the node's interpreter: the real payload runner with rank processes that import no
torch. For end-to-end tests whose subject is the controller (providers, resume, interrupts, two
controllers, chaos), where each real rank costs 1.5 CPU-seconds of ``import torch`` and training that
the test never looks at.

A campaign names it as a provider's ``python`` (``standin_command``). ``python -m payload run
job.json`` then runs the real runner from the shipped payload folder (dead-man switch, spot watch,
phases, events, exit codes, resume at phase), with ``sys.executable`` pointing back here, so the
ranks it starts (``-m payload worker …``) run ``worker`` below: it speaks the rank protocol of
``payload.comm.ranks`` (phases on stdin, ``done_file``, ``result_file``) and, for ``profile``,
writes samples in the real shape (``payload/workloads/profile.py``'s docstring), one every ``STEP_S`` of
sleep, from ``job.profile_steps_done`` on, stopping at a step boundary on a spot notice, as the
real one does; ``preflight_cluster`` (across nodes) answers a healthy probe. Across nodes the ranks
meet at the job's TCP rendezvous (``--init-method``) in a group of plain sockets (``Peers``), and
every profile step and ``preflight_cluster`` is a barrier of that group, so a rank whose peer is
gone fails as an NCCL rank would, instead of measuring on alone. Other phases are refused (exit 1);
any other use of the interpreter (the preflight probes' spawned child) runs on the real one.

The real payload itself is tested by ``tests/payload/`` and by the end-to-end tests that keep it
(the quick start, the shared tiny and report campaigns, bad nodes, clusters, one preemption).
Every start is appended to ``$0.log`` beside the command, so a test can check it was used.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

STEP_S = 0.02
"""The sleep that stands in for one training step."""
HOLD: Path | None = None
"""``<command>.hold``: while it exists, the profile waits after its first timed step (a test that
must act while a profile runs, however slow the machine, creates it and removes it after)."""


def main(argv: list[str]) -> int:
    global HOLD
    command, args = argv[0], argv[1:]
    HOLD = Path(f"{command}.hold")
    with open(f"{command}.log", "a") as log:
        log.write(" ".join(args) + "\n")
    if args[:2] != ["-m", "payload"] or len(args) < 3 or args[2] not in ("run", "worker"):
        os.execv(sys.executable, [sys.executable, *args])  # anything else (a probe's child): the real interpreter
    sys.path[0] = os.getcwd()  # the attempt's folder, holding the shipped payload: what ``python -m`` finds
    if args[2] == "run":
        sys.executable = command  # the runner starts its ranks through this stand-in too
        sys.argv = ["payload", *args[2:]]
        runpy.run_module("payload", run_name="__main__", alter_sys=True)
        return 0  # not reached: the module exits
    return worker(args[3:])


def worker(argv: list[str]) -> int:
    from payload.comm.ranks import done_file, result_file
    from payload.events import EventLog
    from payload.job import Job

    parser = argparse.ArgumentParser()
    parser.add_argument("job")
    parser.add_argument("--phase")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--rendezvous", required=True)
    parser.add_argument("--init-method", required=True)
    parser.add_argument("--timeout-s", type=float, required=True)
    args, _ = parser.parse_known_args(argv)
    job = Job.load(args.job)
    peers = Peers(args.init_method, args.rank, args.world_size, args.timeout_s) if job.nodes > 1 else None
    events = EventLog(Path(args.job).parent / "events.jsonl") if args.rank == 0 else None
    phases = [args.phase] if args.phase else (line.strip() for line in sys.stdin)
    for name in phases:
        if not name:
            continue
        if name == "preflight_torch":
            result: dict[str, Any] | None = {"torch": "stand-in", "cuda": None, "nccl": None, "cuda_available": False,
                                             "device_count": 0, "devices": []}
        elif name == "preflight_cluster":
            if peers is not None:
                peers.barrier()
            result = _cluster_probe(job.nodes, job.count)
        elif name == "profile":
            result = _profile(job, args.world_size, events, peers)
        else:
            print(f"payload stand-in: no stand-in for the {name!r} phase", flush=True)
            return 1
        if result is not None:
            result_file(args.rendezvous, args.rank, name).write_text(json.dumps(result))
        with done_file(args.rendezvous, args.rank).open("a") as done:
            done.write(f"{name}\n")
    if events is not None:
        events.close()
    return 0


class Peers:
    """The ranks of every node in a group of sockets: global rank 0 listens at the rendezvous
    address of ``init_method`` (``tcp://host:port``, the port torch.distributed would take: the
    stand-in's ranks never start torch) and the others connect to it, all within ``timeout_s``.
    ``barrier`` returns once every rank reached it; it raises ``ConnectionError`` when a rank is gone
    and ``TimeoutError`` after ``timeout_s``."""

    def __init__(self, init_method: str, rank: int, world_size: int, timeout_s: float) -> None:
        where = urlsplit(init_method)
        address = (where.hostname or "", where.port or 0)
        self.rank = rank
        if rank == 0:
            with socket.create_server(address) as server:
                server.settimeout(timeout_s)
                self.links = [server.accept()[0] for _ in range(world_size - 1)]
        else:
            self.links = [_connect(address, timeout_s)]
        for link in self.links:
            link.settimeout(timeout_s)

    def barrier(self) -> None:
        if self.rank == 0:
            for link in self.links:
                _receive_one(link)
        for link in self.links:
            link.sendall(b".")
        if self.rank != 0:
            _receive_one(self.links[0])


def _connect(address: tuple[str, int], timeout_s: float) -> socket.socket:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection(address, timeout=timeout_s)
        except ConnectionRefusedError:  # rank 0 not listening yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _receive_one(link: socket.socket) -> None:
    if not link.recv(1):
        raise ConnectionError("payload stand-in: a peer rank is gone")


def _cluster_probe(nodes: int, count: int) -> dict[str, Any]:
    """``payload.node.probes.cluster_rank``'s result, every figure 1 GB/s and right (judged only where the
    campaign sets a threshold: on CPU cells, none does)."""
    def figure(ranks: int) -> dict[str, Any]:
        return {"busbw_gbps": 1.0, "algbw_gbps": 1.0, "wrong": 0, "ranks": ranks}

    return {"bytes": 1 << 20, "nodes": nodes, "count": count,
            "intra_node": [] if count == 1 else [{"node_rank": k, **figure(count)} for k in range(nodes)],
            "inter_node": [{"rail": r, **figure(nodes)} for r in range(count)], "cluster": figure(nodes * count)}


def _profile(job: Any, world_size: int, events: Any, peers: Peers | None) -> None:
    from payload.spot_notice import notice_file
    from payload.workloads.profile import PHASES, grad_accum_steps

    cfg = job.profile
    remaining = max(0, cfg.steps - job.profile_steps_done)
    if remaining == 0:
        return None
    accum = grad_accum_steps(cfg, world_size)
    watched = notice_file()
    for step in range(cfg.warmup_steps + remaining):
        start = time.perf_counter()
        time.sleep(STEP_S)
        if peers is not None:
            peers.barrier()  # the step's collectives: none goes on without every rank
        elapsed = time.perf_counter() - start
        if events is not None:
            warmup = step < cfg.warmup_steps
            events.emit("sample", phase="profile", step=step, warmup=warmup,
                        timed_index=None if warmup else job.profile_steps_done + step - cfg.warmup_steps,
                        step_time_s=elapsed, **dict.fromkeys(PHASES, elapsed / len(PHASES)),
                        loss=10.0 / (step + 1), tokens=cfg.total_batch_size,
                        tokens_per_s=cfg.total_batch_size / elapsed, mfu=None, grad_accum=accum, precision="f32",
                        compiled=False, attention="sdpa", host_data=cfg.host_data, mem_est_gib=0.0,
                        max_mem_allocated_gib=None)
        if watched is not None and watched.exists():
            break
        while HOLD is not None and HOLD.exists() and step >= cfg.warmup_steps:
            time.sleep(0.05)
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
