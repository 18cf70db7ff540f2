"""An in-memory provider and transport: the engine (cell runner, attempt driver, budget, leases)
driven in-process, in milliseconds, against scripted nodes.

Contract, as ``benchctl.provisioners.base`` states it: ``offers`` cheapest first; ``launch`` returns at once;
``status`` from the provider's own record (scripted here); ``terminate`` idempotent, and the node's
end time is what ``ended_at`` says; ``owned`` lists live tagged nodes. The transport keeps each node's
files in memory: ``put`` reads the job the controller ships, ``start`` starts the scripted payload,
every read of ``events.jsonl`` is one poll and appends the next batch of event lines the payload
would have written (``payload/events.py``'s format), and ``exit_code`` appears once every batch is
out. No thread, no subprocess, no clock of its own.

Clusters (``launch_cluster``, the base class's: each member launched in turn, all or nothing):
member k runs on the host of the k-th offer the last ``offers`` call listed after node 0's (the
same host where there are too few). A worker (``node_rank`` > 0 in its job) writes no events:
every read of its ``exit_code`` is one poll, and its exit code appears after as many polls as
node 0 has batches; its ``preempt_at_poll`` counts those polls.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from benchctl.payload.job import EXIT_OK
from benchctl.provisioners.base import (
    CommandResult,
    Node,
    NodeState,
    Offer,
    OfferRequest,
    Provider,
    ProviderError,
    Transport,
)

Events = list[list[dict[str, Any]]]
"""Batches of events: the i-th read of ``events.jsonl`` after the start appends batch i."""


@dataclass
class Script:
    """What one rented node does. ``events`` is the batches, or a function of the job the controller
    shipped (``job.json`` as a dict) returning them: a payload that honours ``done_phases`` and
    ``profile_steps_done`` the way the real one does."""

    events: Events | Callable[[dict[str, Any]], Events] = field(default_factory=lambda: payload_events)
    exit_code: int | None = EXIT_OK
    """Written once every batch is out; None: the payload never ends."""
    starting_polls: int = 0
    """How many ``status`` calls say ``starting`` before the node runs."""
    preempt_at_poll: int | None = None
    """The node vanishes (``preempted``) at this read of ``events.jsonl`` (1-based), before its batch
    (a worker: at this read of its ``exit_code``)."""
    log: str = ""
    """``payload.log``'s text."""
    artifacts: dict[str, bytes] = field(default_factory=dict)
    """Files under the attempt's ``artifacts/`` that ``get`` brings back."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Other files of the attempt directory (e.g. ``compile-cache/<key>.bin``), there from the start:
    ``read_from`` reads them, ``get`` of one brings it back."""


@dataclass
class MemoryNode:
    node: Node
    script: Script
    status_calls: int = 0
    reads: int = 0
    batches: Events | None = None
    job: dict[str, Any] | None = None
    shipped: list[str] = field(default_factory=list)
    """Paths (relative to the shipped directory) ``put`` copied."""
    shipped_files: dict[str, bytes] = field(default_factory=dict)
    """The bytes of what ``put`` copied outside ``payload/``."""
    started: list[str] = field(default_factory=list)
    """Commands ``start`` ran."""
    heartbeats: int = 0
    events: bytearray = field(default_factory=bytearray)
    gone: NodeState | None = None
    ended_at: float | None = None
    terminate_calls: int = 0

    def vanish(self, state: NodeState) -> None:
        if self.gone is None:
            self.gone, self.ended_at = state, time.time()

    @property
    def worker(self) -> bool:
        return int((self.job or {}).get("node_rank") or 0) > 0

    def exit_code(self) -> bytes:
        script = self.script
        if self.worker and self.started and self.gone is None and self.batches is not None:
            self.reads += 1
            if script.preempt_at_poll is not None and self.reads >= script.preempt_at_poll:
                self.vanish(NodeState.PREEMPTED)
        done = self.batches is not None and self.reads >= len(self.batches)
        if not self.started or self.gone is not None or not done or script.exit_code is None:
            return b""
        return f"{script.exit_code}\n".encode()


class MemoryProvider(Provider):
    """Scripted offers and nodes. The i-th launch gets ``scripts[i]`` (the last repeats)."""

    name: ClassVar[str] = "memory"

    def __init__(self, offers: list[Offer], scripts: list[Script] | None = None, launch_failures: int = 0,
                 max_parallel: int | None = None, failing_launches: tuple[int, ...] = ()) -> None:
        self._offers = offers
        self._scripts = scripts or [Script()]
        self.launch_failures = launch_failures
        """How many launches raise ``ProviderError`` first."""
        self.failing_launches = set(failing_launches)
        """Which calls of ``launch`` (1-based, counting the failed ones) raise ``ProviderError``."""
        self.launch_calls = 0
        self.listed: list[Offer] = []
        """What the last ``offers`` call returned."""
        self.terminate_raises: dict[str, Exception] = {}
        """Node id → what its ``terminate`` raises (after counting the call, the node left running)."""
        self.max_parallel_nodes = max_parallel  # type: ignore[misc]  # per instance in this fake
        self.nodes: dict[str, MemoryNode] = {}
        self._ids = itertools.count(1)

    # -- Provider ---------------------------------------------------------------------------
    def offers(self, request: OfferRequest) -> list[Offer]:
        fits = [o for o in self._offers if o.gpu == request.gpu and o.count == request.count
                and o.market == request.market and o.host not in request.exclude_hosts]
        self.listed = sorted(fits, key=lambda o: o.hourly_usd)
        return list(self.listed)

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        self.launch_calls += 1
        if self.launch_failures > 0 or self.launch_calls in self.failing_launches:
            self.launch_failures = max(0, self.launch_failures - 1)
            raise ProviderError(f"launching {offer.offer_id} failed (scripted)")
        offer = self._member_offer(offer, token)
        number = next(self._ids)
        node = Node(provider=self.name, node_id=f"mem-{number}", token=token, campaign_tag=campaign_tag,
                    offer=offer, details={"host": offer.host}, host=offer.host or None)
        script = self._scripts[min(number - 1, len(self._scripts) - 1)]
        self.nodes[node.node_id] = MemoryNode(node, script)
        return node

    def status(self, node: Node) -> NodeState:
        state = self.nodes[node.node_id]
        state.status_calls += 1
        if state.gone is not None:
            return state.gone
        return NodeState.STARTING if state.status_calls <= state.script.starting_polls else NodeState.RUNNING

    def _member_offer(self, offer: Offer, token: str) -> Offer:
        """Member k of a cluster (token ``…-n<k>``): the k-th other offer listed, else ``offer``."""
        _, sep, index = token.rpartition("-n")
        if not sep or not index.isdigit():
            return offer
        others = [o for o in self.listed if o.host != offer.host]
        return others[int(index) - 1] if int(index) <= len(others) else offer

    def transport(self, node: Node) -> Transport:
        return MemoryTransport(self.nodes[node.node_id])

    def terminate(self, node: Node) -> None:
        state = self.nodes[node.node_id]
        state.terminate_calls += 1
        if node.node_id in self.terminate_raises:
            raise self.terminate_raises[node.node_id]
        state.vanish(NodeState.TERMINATED)

    def owned(self, campaign_tag: str) -> list[Node]:
        return [n.node for n in self.nodes.values() if n.node.campaign_tag == campaign_tag and n.gone is None]

    def ended_at(self, node: Node) -> float | None:
        return self.nodes[node.node_id].ended_at

    # -- test hooks -------------------------------------------------------------------------
    def preempt(self, node_id: str) -> None:
        """The provider takes the node back: no terminate of ours."""
        self.nodes[node_id].vanish(NodeState.PREEMPTED)

    def launched(self) -> list[MemoryNode]:
        return list(self.nodes.values())


class MemoryTransport(Transport):
    python = "python3"

    def __init__(self, state: MemoryNode) -> None:
        self.state = state
        self.fetched: list[str] = []

    def run(self, cmd: str, timeout: float = 60.0) -> CommandResult:
        if cmd.startswith("test -e "):  # is payload.log there: was the payload started
            return CommandResult(0 if self.state.started else 1, "", "")
        if cmd.startswith("touch "):
            self.state.heartbeats += 1
        return CommandResult(0, "", "")

    def start(self, cmd: str, cwd: str) -> None:
        state = self.state
        job = state.job or {}
        state.batches = state.script.events(job) if callable(state.script.events) else state.script.events
        state.started.append(cmd)

    def put(self, local_dir: str, remote_dir: str, timeout: Any = 300.0) -> None:
        root = Path(local_dir)
        self.state.shipped = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        self.state.shipped_files = {name: (root / name).read_bytes() for name in self.state.shipped
                                    if not name.startswith("payload/")}
        self.state.job = json.loads((root / "job.json").read_text())

    def get(self, remote_path: str, local_dir: str, timeout: Any = 600.0) -> None:
        name = remote_path.rsplit("/", 1)[-1]
        self.fetched.append(name)
        target = Path(local_dir)
        if name == "artifacts":
            for rel, data in self.state.script.artifacts.items():
                path = target / "artifacts" / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        elif name == "events.jsonl":
            (target / name).write_bytes(bytes(self.state.events))
        elif name == "payload.log":
            (target / name).write_text(self.state.script.log)
        elif (data := self._file(remote_path)) is not None:
            (target / name).write_bytes(data)

    def read_from(self, remote_file: str, offset: int, timeout: Any = 60.0, limit: int | None = None) -> bytes:
        state = self.state
        name = remote_file.rsplit("/", 1)[-1]
        if name == "events.jsonl":
            self._poll()
            data = bytes(state.events)
        elif name == "exit_code":
            data = state.exit_code()
        elif name == "payload.log":
            data = state.script.log.encode()
        else:
            data = self._file(remote_file) or b""
        end = len(data) if limit is None else offset + limit
        return data[offset:end]

    def _file(self, remote_path: str) -> bytes | None:
        """One of ``Script.files``, named by its path on the node (under the attempt directory)."""
        return next((data for rel, data in self.state.script.files.items() if remote_path.endswith(f"/{rel}")), None)

    def _poll(self) -> None:
        state = self.state
        if not state.started or state.gone is not None or state.batches is None:
            return
        if state.reads >= len(state.batches):
            return
        state.reads += 1
        if state.script.preempt_at_poll is not None and state.reads >= state.script.preempt_at_poll:
            state.vanish(NodeState.PREEMPTED)
            return
        for event in state.batches[state.reads - 1]:
            state.events += (json.dumps(event) + "\n").encode()


def payload_events(job: dict[str, Any]) -> Events:
    """What a healthy payload writes for ``job``, one event per poll: the pending phases (preflight
    always, as the real one), a collectives sample (with its phase's start), profile samples for the
    timed steps not yet recorded, then ``done``.
    Step times are 10 ms plus 1 ms per timed index. The shapes are the real payload's:
    ``payload/runner.py`` (phase_start/phase_end/done/error) and ``payload/workloads/profile.py`` (samples)."""
    done = set(job.get("done_phases") or [])
    profile = job.get("profile") or {}
    steps, warmup = int(profile.get("steps", 3)), int(profile.get("warmup_steps", 1))
    already = int(job.get("profile_steps_done") or 0)
    events: list[dict[str, Any]] = []
    t = time.time()
    for phase in job.get("phases") or ["preflight", "profile"]:
        if phase in done and phase != "preflight":
            continue
        events.append({"t": t, "kind": "phase_start", "phase": phase})
        if phase == "profile":
            for step in range(warmup):
                events.append({"t": t, "kind": "sample", "phase": "profile", "step": step, "warmup": True,
                               "timed_index": None, "step_time_s": 0.5})
            for index in range(already, steps):
                events.append({"t": t, "kind": "sample", "phase": "profile", "step": warmup + index - already,
                               "warmup": False, "timed_index": index, "step_time_s": 0.010 + index / 1000})
        if phase == "collectives":  # payload/comm/collectives.py: a sample per op and size (one here), rank 0's
            events.append({"t": t, "kind": "sample", "phase": "collectives", "op": "all_reduce", "bytes": 8,
                           "count": 2, "dtype": "float", "in_place": False, "time_us": 10.0, "algbw_gbps": 0.0008,
                           "busbw_gbps": 0.0008, "wrong": 0, "ranks": int(job.get("count") or 1)})
        events.append({"t": t, "kind": "phase_end", "phase": phase, "elapsed_s": 0.01, "summary": {}})
    events.append({"t": t, "kind": "done", "exit_code": 0})
    batches: Events = []
    for event in events:  # a sample comes with its phase's start: the polls per phase are as before
        if event["kind"] == "sample" and event["phase"] == "collectives":
            batches[-1].append(event)
        else:
            batches.append([event])
    return batches
