"""The worker nodes of a cluster attempt (node ranks 1 … N-1): their jobs, their exit codes, their logs.

Node 0 is driven as a single node is (its events, its exit code, its artifacts); each worker runs
the same payload with its own ``node_rank`` and reports its exit code. A worker's non-zero (or
unreadable) exit code ends the attempt as an error with the tail of its ``payload.log``; its exit
3 (preflight found a bad node), or its error event saying so once node 0 failed, ends it
``bad_node``, the node named by the worker's own error event (``worker_errors``: its
``bad_node_rank``, else none, the fabric; without a readable error event, the worker itself). Its
``payload.log`` and ``artifacts`` are collected into ``node-<k>/`` of the attempt's
directory; a worker whose files cannot be read is logged, never fatal (node 0 holds the results).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchctl.engine.cluster import rendezvous_port
from benchctl.engine.event_sync import valid_events
from benchctl.payload.job import EXIT_BAD_NODE, EXIT_OK, Job
from benchctl.provisioners.base import Node, Provider, ProviderError, Transport
from benchctl.provisioners.transfer_deadline import Deadline, TransferTimeout

EXIT_CODE_BYTES = 64
"""The most read of a node's ``exit_code`` file."""
LOG_READ_BYTES = 1024 * 1024
"""The most read of ``payload.log`` for the reason of a failed payload."""
EXIT_CODE = re.compile(rb"[0-9]{1,3}")


@dataclass(frozen=True)
class Worker:
    rank: int
    node: Node
    transport: Transport


def workers(provider: Provider, node: Node) -> list[Worker]:
    """A transport to each member but node 0 (none for a single node)."""
    return [Worker(rank, member, provider.transport(member)) for rank, member in enumerate(node.members()) if rank]


def member_jobs(job: Job, provider: Provider, node: Node, token: str) -> list[Job]:
    """``job`` for each member in node-rank order: the cluster's size, the member's rank, node 0's
    rendezvous address (``Provider.rendezvous_address``), the attempt's port (``rendezvous_port``),
    and the member's own idle shutdown and spot notice (``job`` has node 0's)."""
    members = node.members()
    if len(members) == 1:
        return [job]
    address = provider.rendezvous_address(members[0])
    return [dataclasses.replace(job, nodes=len(members), node_rank=rank, master_addr=address,
                                master_port=rendezvous_port(token),
                                idle_shutdown=provider.idle_shutdown_command(member),
                                spot_notice=provider.spot_notice(member))
            for rank, member in enumerate(members)]


def unstarted(found: list[Worker], remote_dir: str) -> list[int]:
    """The node ranks of the workers whose payload was never started (no ``payload.log``)."""
    return [w.rank for w in found if w.transport.run(f"test -e {shlex.quote(remote_dir)}/payload.log").code != 0]


@dataclass(frozen=True)
class WorkerFailure:
    """A worker whose payload ended other than well: its node rank, exit status (None: the
    ``exit_code`` file holds none) and why, for the attempt's detail."""

    rank: int
    code: int | None
    reason: str


def failed_worker(found: list[Worker], remote_dir: str) -> WorkerFailure | None:
    """The first worker whose payload ended other than well, a bad node's (exit 3) before any
    other's; None while every worker runs or ended with 0."""
    failures = []
    for worker in found:
        code = worker.transport.read_from(f"{remote_dir}/exit_code", 0, limit=EXIT_CODE_BYTES).strip()
        if not code:
            continue
        if not EXIT_CODE.fullmatch(code):
            failures.append(WorkerFailure(worker.rank, None, f"node {worker.rank}'s exit_code file holds "
                                                               f"{code[:20]!r}, not an exit status"))
        elif int(code) != EXIT_OK:
            log = worker.transport.read_from(f"{remote_dir}/payload.log", 0, limit=LOG_READ_BYTES)
            failures.append(WorkerFailure(worker.rank, int(code), f"node {worker.rank}: payload exit {int(code)}: "
                                                                  f"{tail(log)}"))
    return next((f for f in failures if f.code == EXIT_BAD_NODE), failures[0] if failures else None)


def bad_verdict_of(found: list[Worker], remote_dir: str) -> Worker | None:
    """The first worker whose error events say its preflight found a bad node (``bad_node``),
    whatever its exit code says yet (its ranks leave after that event: node 0 may fail first)."""
    return next((w for w in found if any(e.get("bad_node") is True for e in worker_errors(w, remote_dir))), None)


def worker_errors(worker: Worker, remote_dir: str) -> list[dict[str, Any]]:
    """The error events of a worker's ``events.jsonl`` (a worker writes no samples: its first
    ``LOG_READ_BYTES`` hold them); none when it cannot be read."""
    return [event for event in _events(worker, remote_dir) or [] if event.get("kind") == "error"]


def _events(worker: Worker, remote_dir: str) -> list[dict[str, Any]] | None:
    """The events in a worker's ``events.jsonl`` (its first ``LOG_READ_BYTES``, at most
    ``MAX_LINES_PER_SYNC`` lines), each line checked as node 0's are, malformed ones left out
    (``event_sync.valid_events``); None when it cannot be read."""
    try:
        data = worker.transport.read_from(f"{remote_dir}/events.jsonl", 0, limit=LOG_READ_BYTES)
    except (ProviderError, OSError):
        return None
    return valid_events(data)


def workers_passed_preflight(found: list[Worker], remote_dir: str) -> bool:
    """Every worker's ``events.jsonl`` has ended its preflight phase (``phase_end``): no bad-node
    verdict can come from the workers any more. True without workers."""
    return all(any(e.get("kind") == "phase_end" and e.get("phase") == "preflight" for e in _events(w, remote_dir) or [])
               for w in found)


def collect_workers(found: list[Worker], remote_dir: str, local: Path, deadline: Deadline, max_bytes: int,
                    log: Callable[[str], None]) -> None:
    """Each worker's ``payload.log`` and ``artifacts`` (its rank logs, its preflight's facts
    snapshot and ``preflight.json``, so a worker's verdict replays at home) into
    ``local/node-<k>/``. Raises only ``TransferTimeout``."""
    for worker in found:
        target = local / f"node-{worker.rank}"
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        worker.transport.max_artifact_bytes = max_bytes
        for remote, into in (("payload.log", target), ("artifacts", target)):
            try:
                worker.transport.get(f"{remote_dir}/{remote}", str(into), timeout=deadline)
            except TransferTimeout:
                raise
            except ProviderError as exc:
                log(f"node {worker.rank}'s {remote} was not collected: {exc}")
        for refused in worker.transport.refused_members():
            log(f"refused from node {worker.rank}'s files: {refused}")


def tail(data: bytes, lines: int = 3) -> str:
    return " | ".join(data.decode(errors="replace").strip().splitlines()[-lines:])
