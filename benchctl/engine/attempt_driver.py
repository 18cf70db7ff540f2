"""One attempt on one node or one cluster: ship the payload, watch it, collect, and always terminate and close.

``drive`` ends in ``finally`` with a last read of the node's events, ``terminate`` and the
attempt closed at the time the provider says the node stopped billing (else now), whatever
happened: no exit path leaves a billing node the store thinks is closed. Each of the three runs
whatever the one before raised (what failed is logged and added to the attempt's detail). The
one exception to closing: a cell whose lease this controller lost (``abandoned``): its node is
terminated, and the attempt is left to the cell's new owner (``benchctl down``, or the controller
that took it over, which reconciles it).
The node is not trusted: a malformed event line is stored as an error event (``event_sync``), an
``exit_code`` file that holds no exit status is an attempt error (the cell retries), and an
OSError of the node's files or of the attempt's local directory ends the attempt as an error.
Collecting the attempt's files has a deadline (``collect_timeout_s``) and the budget is watched
meanwhile: at the budget the transfer stops and the attempt ends ``budget``. The node's
``events.jsonl`` and ``payload.log`` come home before its ``artifacts/`` (a damaged or oversized
archive cannot cost them). Artifact rows are written, and their files hashed (each distinct path
once: ``artifact_records``), only after ``terminate``: hashing never runs while the node bills.
While the payload runs, every ``status_interval_s`` the driver asks the provider for the node's
state (a preempted node ends the attempt) and checks the campaign's spend against its budget; it
touches the payload's heartbeat (its dead-man switch) as often, or four times per
``max_idle_minutes`` if that is more often. A compile cache the node announces is brought home as
soon as its event is read, and the stage of a later attempt of the same key carries it
(``benchctl.engine.compile_caches``).
A cluster (``nodes`` > 1, ``Node.peers``) is one attempt: it is ready once every member runs, it
is preempted once any member is preempted or terminated (a payload that failed, or a node that
could not be read, while a member was gone is that preemption too), every member gets the stage
with its own ``node_rank`` and runs the payload (``benchctl.engine.workers``), and every member is
terminated, each whatever the others raise; the attempt ends when the last member stopped billing.
The cell is ``running`` once node 0 started a later phase and every worker's preflight passed (a
worker's own verdict can come after node 0's); a worker's exit 3 ends the attempt ``bad_node``
naming the node its preflight named (``benchctl.engine.bad_hosts``), also when node 0 then failed;
a verdict that names no node (the fabric between them) ends it ``error``, no host blamed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchctl.campaign.spec import CellSpec
from benchctl.engine import compile_caches, event_sync
from benchctl.engine.artifact_records import Announced, announced, artifact_rows
from benchctl.engine.bad_hosts import bad_member_host, bad_node_rank, naming, worker_bad_rank
from benchctl.engine.budget import collect_timeout_s
from benchctl.engine.cell_states import CellState
from benchctl.engine.cluster import billed_hourly, cluster_ended_at, cluster_state, terminate_all
from benchctl.engine.event_sync import EventCursor, EventStoreError, drain_events, sync_events
from benchctl.engine.payload_stage import stage_payload
from benchctl.engine.run_context import Outcome, OutcomeKind, RunContext
from benchctl.engine.workers import (
    EXIT_CODE,
    EXIT_CODE_BYTES,
    LOG_READ_BYTES,
    Worker,
    WorkerFailure,
    bad_verdict_of,
    collect_workers,
    failed_worker,
    member_jobs,
    tail,
    unstarted,
    worker_errors,
    workers,
    workers_passed_preflight,
)
from benchctl.home import private_dir
from benchctl.payload.deadman import HEARTBEAT
from benchctl.payload.job import EXIT_BAD_NODE, EXIT_OK, Job
from benchctl.provisioners.base import NoCapacity, Node, NodeState, Provider, ProviderError, Transport
from benchctl.provisioners.transfer_deadline import Deadline, TransferTimeout
from benchctl.results.cell_result import timed_samples
from benchctl.results.evidence_check import phases_done
from benchctl.store import queries as q
from benchctl.store.models import Attempt

MAX_DIR_NAME_BYTES = 120
"""Longer cell keys get a shortened directory name (a file name holds at most 255 bytes)."""


def cell_dir_name(key: str) -> str:
    """The directory of a cell's attempts on nodes and under artifacts/: the key itself when it is
    short, else its start and a hash of all of it (keys with long env values)."""
    if len(key.encode()) <= MAX_DIR_NAME_BYTES:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{key.encode()[:MAX_DIR_NAME_BYTES - 17].decode(errors='ignore')}-{digest}"


@dataclass
class AttemptDriver:
    ctx: RunContext
    cell_id: int
    key: str
    spec: CellSpec
    provider: Provider
    transition: Callable[[CellState], None]
    halted: Callable[[], Outcome | None]
    """Why the attempt must stop now (Ctrl-C, lost lease), or None."""
    collected: list[Announced] | None = field(default=None, init=False)
    """The artifacts that came home, recorded by ``end`` once the node is terminated."""
    events: EventCursor = field(default_factory=EventCursor, init=False)
    """Where this driver's reads of its attempt's events stand (no read of the attempt's row per poll)."""

    def drive(self, attempt: Attempt, node: Node, reattach: bool) -> Outcome:
        outcome = Outcome(OutcomeKind.ERROR, "controller error")
        try:
            if not reattach:
                not_ready = self._wait_ready(node)
                if not_ready is not None:
                    outcome = not_ready
                    return outcome
                q.attach_node(self.ctx.engine, attempt.id or 0, node.to_dict(),  # a price known once it runs
                              hourly_usd=billed_hourly(self.provider, node))
            transport = self.provider.transport(node)  # some providers know the address only once ready
            peers = workers(self.provider, node)
            if reattach and transport.run(f"test -e {shlex.quote(attempt.remote_dir)}/payload.log").code != 0:
                reattach = False  # the controller stopped before the payload was started
            if reattach and (missing := unstarted(peers, attempt.remote_dir)):
                outcome = Outcome(OutcomeKind.ERROR, "the controller stopped while it started the cluster's payload "
                                  f"(not started on node {', '.join(map(str, missing))})")
                return outcome
            if not reattach:
                self._start_payload(attempt, node, transport, peers)
            outcome = self._watch(attempt, node, transport, peers)
            if outcome.kind is OutcomeKind.DONE:
                self.transition(CellState.COLLECTING)
            if outcome.kind in (OutcomeKind.DONE, OutcomeKind.BAD_NODE):  # a bad node's verdict and facts: evidence
                outcome = self._collect_in_time(attempt, transport, peers) or outcome
            return outcome
        except NoCapacity as exc:  # found while waiting for the node (SkyPilot fails over, then gives up)
            outcome = Outcome(OutcomeKind.LAUNCH_FAILED, f"no capacity: {exc}")
            return outcome
        except ProviderError as exc:
            outcome = self._gone_or(node, Outcome(OutcomeKind.ERROR, str(exc)))
            return outcome
        except OSError as exc:  # the node's files, or the attempt's local directory
            outcome = Outcome(OutcomeKind.ERROR, f"{type(exc).__name__}: {exc}")
            return outcome
        except EventStoreError as exc:  # the store refused the node's events (retried): the attempt ends
            outcome = Outcome(OutcomeKind.ERROR, str(exc))
            return outcome
        finally:
            self.end(attempt, node, outcome)

    def end(self, attempt: Attempt, node: Node, outcome: Outcome) -> None:
        """The last sync, ``terminate`` and the attempt closed (unless ``abandoned``): each runs
        whatever the one before raised; what failed is logged and added to the attempt's detail."""
        failed = []
        for step, call in (("the last read of its events", lambda: self.last_sync(attempt, node)),
                           ("terminating its node", lambda: self.terminate(node)),
                           ("recording its artifacts", lambda: self.record_artifacts(attempt))):
            try:
                call()
            except Exception as exc:  # whatever it was, the node must still be terminated and the attempt closed
                failed.append(f"{step} failed: {type(exc).__name__}: {exc}")
        for problem in failed:  # logged only once the node is terminated: a failing log cannot skip that
            self.ctx.log(f"{self.key}: attempt {attempt.number}: {problem}")
        if outcome.kind is OutcomeKind.ABANDONED:  # the cell's new owner (or `down`) closes it
            return
        try:
            ended = cluster_ended_at(self.provider, node)
        except Exception as exc:  # then it ended now
            ended = None
            self.ctx.log(f"{self.key}: when node {node.node_id} stopped billing is unknown ({exc}); closing it now")
        detail = "; ".join([outcome.detail, *failed] if outcome.detail else failed)
        q.close_attempt(self.ctx.engine, _id(attempt), outcome.kind.value, detail or None, terminated_at=ended)

    def record_artifacts(self, attempt: Attempt) -> None:
        """The rows of what ``_collect`` brought home (nothing if it did not finish), each file hashed once."""
        if self.collected is None:
            return
        local = self.ctx.artifacts_dir / cell_dir_name(self.key) / str(attempt.number)
        q.add_artifacts(self.ctx.engine, artifact_rows(self.collected, _id(attempt), self.cell_id,
                                                       attempt.remote_dir, local))
        self.collected = None

    def last_sync(self, attempt: Attempt, node: Node) -> None:
        """Read what the node still has before it goes: nothing measured is lost (past
        ``event_sync.DRAIN_SYNCS`` reads of a flood, the rest is left to the events.jsonl that comes home). A
        node that cannot be read is logged (its events are lost), never raised."""
        try:
            if not drain_events(self.ctx.engine, attempt, self.provider.transport(node), self.events):
                self.ctx.log(f"{self.key}: attempt {attempt.number}: stopped reading its events after "
                             f"{event_sync.DRAIN_SYNCS} reads at its end; the rest stays in its events.jsonl "
                             "(collected with its artifacts)")
        except ProviderError as exc:
            self.ctx.log(f"{self.key}: could not read attempt {attempt.number}'s last events: {exc}")

    def terminate(self, node: Node) -> None:
        """One ``terminate`` of each member, each whatever the others raise: the provider's API call
        already retries what may pass on retry (``Unavailable``), and a node already gone is success
        there. A ``ProviderError`` is logged; anything else is raised once every member was asked."""
        def one(member: Node) -> None:
            try:
                self.provider.terminate(member)
            except ProviderError as exc:
                self.ctx.log(f"{self.key}: could not terminate {member.node_id} ({exc}): run `benchctl down` or "
                             "terminate it at the provider")

        if not node.peers:
            one(node)
            return
        failed = terminate_all(one, node)
        if failed:
            raise ProviderError("; ".join(failed))

    def _wait_ready(self, node: Node) -> Outcome | None:
        """None once the node runs; else why it never will."""
        deadline = time.monotonic() + self.ctx.ready_timeout_s
        while time.monotonic() < deadline:
            if (halt := self.halted()) is not None:
                return halt
            state, which = cluster_state(self.provider, node)
            if state is NodeState.RUNNING:
                if node.peers:
                    self.ctx.log(f"{self.key}: all {len(node.members())} nodes running")
                return None
            if state in (NodeState.PREEMPTED, NodeState.TERMINATED):
                if not self.ctx.leases.verify(self.cell_id):
                    return Outcome(OutcomeKind.ABANDONED, "this controller lost the cell's lease")
                return Outcome(OutcomeKind.PREEMPTED,
                               f"the provider reports {which} {state.value} before it was ready")
            if self.ctx.budget.exceeded(self.ctx.status_interval_s):
                return Outcome(OutcomeKind.BUDGET, "the campaign's spend reached budget_usd")
            self.ctx.stop.wait(self.ctx.poll_interval_s)
        nodes = f"all {len(node.members())} nodes were" if node.peers else "the node was"
        return Outcome(OutcomeKind.ERROR, f"{nodes} not ready after {self.ctx.ready_timeout_s:.0f} s")

    def _gone_or(self, node: Node, outcome: Outcome) -> Outcome:
        """``outcome``, or ``preempted`` when a member of a cluster is gone: a worker that lost its
        peer fails, and a gone node cannot be read, before the status poll tells why."""
        if not node.peers:
            return outcome
        try:
            state, which = cluster_state(self.provider, node)
        except ProviderError:
            return outcome
        if state not in (NodeState.PREEMPTED, NodeState.TERMINATED):
            return outcome
        if not self.ctx.leases.verify(self.cell_id):
            return Outcome(OutcomeKind.ABANDONED, "this controller lost the cell's lease")
        return Outcome(OutcomeKind.PREEMPTED, f"the provider reports {which} {state.value} ({outcome.detail})")

    def _job(self, attempt: Attempt, node: Node) -> Job:
        campaign = self.ctx.campaign
        done = self._done_phases()
        return Job(campaign=campaign.spec.name, cell=self.key, attempt=attempt.number, token=attempt.token,
                   gpu=self.spec.gpu or node.offer.gpu, count=self.spec.world_size,
                   phases=list(campaign.spec.payload.phases),
                   done_phases=done, profile=campaign.profile_config(self.spec),
                   collectives=campaign.collectives_config(), command=campaign.command_config(),
                   preflight_thresholds=dict(campaign.spec.payload.preflight.thresholds), env=dict(self.spec.env),
                   profile_steps_done=0 if "profile" in done else len(timed_samples(self.ctx.engine, self.cell_id)),
                   max_idle_minutes=campaign.spec.max_idle_minutes,
                   idle_shutdown=self.provider.idle_shutdown_command(node), spot_notice=self.provider.spot_notice(node),
                   instance_type=self.spec.instance_type or node.offer.details.get("instance_type"),
                   fabric=self.spec.fabric or node.offer.fabric)

    def _done_phases(self) -> list[str]:
        """Workload phases finished by earlier attempts (``evidence_check.phases_done``: framed by the
        attempt's own start and end, with their samples). Preflight is never carried over: it judges
        the node, and every new node must prove itself healthy."""
        return sorted(phases_done(self.ctx.engine, self.cell_id, self.ctx.campaign.spec) - {"preflight"})

    def _start_payload(self, attempt: Attempt, node: Node, transport: Transport,
                       peers: list[Worker] | None = None) -> None:
        """Ship the stage to every member (its own ``job.json``), then start node 0, then the others
        (``peers``: their transports, made here when not given)."""
        peers = workers(self.provider, node) if peers is None else peers
        job = self._job(attempt, node)
        jobs = member_jobs(job, self.provider, node, attempt.token)
        transports = [transport, *(worker.transport for worker in peers)]
        with tempfile.TemporaryDirectory(prefix="benchctl-stage-") as stage:
            stage_payload(Path(stage))
            shipping = compile_caches.ship(compile_caches.store_dir(self.ctx.artifacts_dir), job, Path(stage))
            if shipping.compile_caches:
                jobs = [replace(member_job, compile_caches=shipping.compile_caches) for member_job in jobs]
                self.ctx.log(f"{self.key}: attempt {attempt.number} is shipped {len(shipping.compile_caches)} "
                             "compile cache(s) of its key")
            (Path(stage) / HEARTBEAT).touch()
            upload = self.ctx.campaign.command_upload()
            if upload is not None and "command" in job.pending_phases():
                shutil.copytree(upload, Path(stage) / "work", symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            for member_job, member in zip(jobs, transports, strict=True):
                (Path(stage) / "job.json").write_text(member_job.to_json())
                member.put(stage, attempt.remote_dir)
        if job.profile_steps_done:
            self.ctx.log(f"{self.key}: attempt {attempt.number} measures the profile's remaining "
                         f"{max(0, job.profile.steps - job.profile_steps_done) if job.profile else 0} timed steps")
        self.transition(CellState.PREFLIGHT if "preflight" in job.pending_phases() else CellState.RUNNING)
        for member in transports:
            member.start(f"{member.python} -m payload run job.json > payload.log 2>&1; echo $? > exit_code",
                         cwd=attempt.remote_dir)

    def _watch(self, attempt: Attempt, node: Node, transport: Transport, peers: list[Worker]) -> Outcome:
        last_status = last_beat = float("-inf")
        beat_every = min(self.ctx.status_interval_s, self.ctx.campaign.spec.max_idle_minutes * 60 / 4)
        timeout = time.monotonic() + self.ctx.campaign.spec.payload.timeout_minutes * 60
        past_preflight = False  # node 0 started a later phase; running once every worker passed its own too
        in_preflight = True  # until the cell is read in another state: then it never returns to preflight
        while True:
            for event in sync_events(self.ctx.engine, attempt, transport, self.events):
                past_preflight |= event.get("kind") == "phase_start" and event.get("phase") != "preflight"
                if compile_caches.announced(event):  # now: a preempted node's cache still serves the next
                    self._bring_cache_home(attempt, node, transport, event)
            if past_preflight and in_preflight:
                in_preflight = q.cell(self.ctx.engine, self.cell_id).state == CellState.PREFLIGHT.value
                if in_preflight and workers_passed_preflight(peers, attempt.remote_dir):
                    self.transition(CellState.RUNNING)
                    in_preflight = False
            exit_code = transport.read_from(f"{attempt.remote_dir}/exit_code", 0, limit=EXIT_CODE_BYTES).strip()
            if exit_code:
                sync_events(self.ctx.engine, attempt, transport, self.events)
                if not EXIT_CODE.fullmatch(exit_code):
                    return self._gone_or(node, Outcome(
                        OutcomeKind.ERROR, f"the node's exit_code file holds {exit_code[:20]!r}, not an exit status"))
                return self._exit_outcome(int(exit_code), attempt, node, transport, peers)
            if (failed := failed_worker(peers, attempt.remote_dir)) is not None:
                return self._worker_outcome(failed, attempt, node, peers)
            if (halt := self.halted()) is not None:
                return halt
            if time.monotonic() - last_status >= self.ctx.status_interval_s:
                last_status = time.monotonic()
                state, which = cluster_state(self.provider, node)
                if state in (NodeState.PREEMPTED, NodeState.TERMINATED):
                    if not self.ctx.leases.verify(self.cell_id):  # `benchctl down` (or a takeover) ended it
                        return Outcome(OutcomeKind.ABANDONED, "this controller lost the cell's lease")
                    return Outcome(OutcomeKind.PREEMPTED, f"the provider reports {which} {state.value}")
                if self.ctx.budget.exceeded(self.ctx.status_interval_s):
                    return Outcome(OutcomeKind.BUDGET, "the campaign's spend reached budget_usd while this attempt ran")
            if time.monotonic() - last_beat >= beat_every:
                last_beat = time.monotonic()
                for member in (transport, *(worker.transport for worker in peers)):
                    with contextlib.suppress(ProviderError):
                        member.run(f"touch {shlex.quote(attempt.remote_dir)}/{HEARTBEAT}", timeout=30)
            if time.monotonic() > timeout:
                return Outcome(OutcomeKind.ERROR, f"payload ran past payload.timeout_minutes "
                               f"({self.ctx.campaign.spec.payload.timeout_minutes})")
            self.ctx.stop.wait(self.ctx.poll_interval_s)

    def _bring_cache_home(self, attempt: Attempt, node: Node, transport: Transport, event: dict[str, Any]) -> None:
        """Keep the compile cache the node announced (``compile_caches.bring_home``, within a quarter of
        the dead-man switch's minutes: no heartbeat is touched meanwhile); what is refused, or fails
        to come, is logged: the attempt goes on without it."""
        local = self.ctx.artifacts_dir / cell_dir_name(self.key) / str(attempt.number)
        try:
            private_dir(local, below=self.ctx.artifacts_dir.parent)
            transport.max_artifact_bytes = int(self.ctx.campaign.spec.max_artifact_gb * 1024**3)
            kept = compile_caches.bring_home(transport, attempt.remote_dir, event, self._job(attempt, node), local,
                                             compile_caches.store_dir(self.ctx.artifacts_dir),
                                             Deadline(min(compile_caches.FETCH_S,  # the heartbeat waits meanwhile
                                                          self.ctx.campaign.spec.max_idle_minutes * 60 / 4)))
        except Exception as exc:  # whatever the node sent or the transfer did: only a cache is lost
            self.ctx.log(f"{self.key}: attempt {attempt.number}: its compile cache is not kept: {exc}")
            return
        self.ctx.log(f"{self.key}: attempt {attempt.number}: its compile cache came home ({kept.name}); "
                     "later attempts of its key are shipped it")

    def _exit_outcome(self, code: int, attempt: Attempt, node: Node, transport: Transport,
                      peers: list[Worker]) -> Outcome:
        """Node 0's exit: done, its bad node, or an error (a worker's bad node first, by its exit 3
        or its error event: node 0 fails when a worker's ranks left after its own preflight failed)."""
        if code == EXIT_OK:
            return Outcome(OutcomeKind.DONE)
        errors = [json.loads(e.data_json) for e in q.events(self.ctx.engine, self.cell_id, "error")
                  if e.attempt_id == attempt.id]
        detail = str(errors[-1].get("message", "")) if errors else tail(
            transport.read_from(f"{attempt.remote_dir}/payload.log", 0, limit=LOG_READ_BYTES))
        if code != EXIT_BAD_NODE:
            with contextlib.suppress(ProviderError):  # a worker that cannot be read: node 0's error stands
                failed = failed_worker(peers, attempt.remote_dir)
                if failed is not None and failed.code == EXIT_BAD_NODE:
                    return self._worker_outcome(failed, attempt, node, peers)
                if (bad := bad_verdict_of(peers, attempt.remote_dir)) is not None:
                    return self._worker_bad_node(bad, "preflight found a bad node", "", attempt, node)
            return self._gone_or(node, Outcome(OutcomeKind.ERROR, f"payload exit {code}: {detail}"))
        return self._bad_node(node, f"payload exit {code}: {detail}", bad_node_rank(errors))

    def _worker_outcome(self, failed: WorkerFailure, attempt: Attempt, node: Node, peers: list[Worker]) -> Outcome:
        """A worker's payload ended other than well: its bad node (exit 3, named by its own error
        events), else an error (or the preemption of a member that is gone)."""
        if failed.code != EXIT_BAD_NODE:
            return self._gone_or(node, Outcome(OutcomeKind.ERROR, failed.reason))
        worker = next(w for w in peers if w.rank == failed.rank)
        return self._worker_bad_node(worker, f"payload exit {failed.code}", failed.reason, attempt, node)

    def _worker_bad_node(self, worker: Worker, how: str, reason: str, attempt: Attempt, node: Node) -> Outcome:
        """``bad_node`` from a worker's verdict: the node its error events name (``worker_bad_rank``),
        their last message as the detail (``reason`` without one)."""
        errors = worker_errors(worker, attempt.remote_dir)
        detail = f"node {worker.rank}: {how}: {errors[-1].get('message', '')}" if errors else reason
        return self._bad_node(node, detail, worker_bad_rank(errors, worker.rank))

    def _bad_node(self, node: Node, detail: str, rank: int | None) -> Outcome:
        """``bad_node``, naming the cluster's member ``rank`` when it is a worker (see ``bad_hosts``).
        A cluster's verdict that names no node (the fabric between the nodes) is an ``error``: no
        host is blamed, no node replaced as bad (the next attempt may take the same hosts)."""
        if node.peers and rank is None:
            return Outcome(OutcomeKind.ERROR, f"{detail} (the fabric between the nodes: no node named, no host "
                           "excluded)")
        bad_host = bad_member_host(node, rank)
        where = f" {naming(rank, len(node.members()), bad_host)}" if bad_host and rank is not None else ""
        return Outcome(OutcomeKind.BAD_NODE, f"{detail}{where}", bad_host=bad_host)

    def _collect_in_time(self, attempt: Attempt, transport: Transport, peers: list[Worker]) -> Outcome | None:
        """Collect within ``collect_timeout_s`` while the budget is watched; None when it ended in
        time, else how the attempt ends (``budget`` when the spend reached the budget meanwhile)."""
        deadline = Deadline(collect_timeout_s(self.ctx.campaign.spec))
        with self.ctx.budget.watch(lambda: deadline.cancel("the campaign's spend reached budget_usd"),
                                   self.ctx.status_interval_s):
            try:
                self._collect(attempt, transport, deadline)
                collect_workers(peers, attempt.remote_dir, self.ctx.artifacts_dir / cell_dir_name(self.key)
                                / str(attempt.number), deadline, transport.max_artifact_bytes,
                                lambda line: self.ctx.log(f"{self.key}: attempt {attempt.number}: {line}"))
            except TransferTimeout as exc:
                return Outcome(OutcomeKind.BUDGET if deadline.cancelled else OutcomeKind.ERROR,
                               f"collecting artifacts: {exc}")
        return None

    def _collect(self, attempt: Attempt, transport: Transport, deadline: Deadline) -> None:
        cell_dir = self.ctx.artifacts_dir / cell_dir_name(self.key)
        local = cell_dir / str(attempt.number)
        private_dir(local, below=self.ctx.artifacts_dir.parent)  # a planted link there is refused, not followed
        transport.max_artifact_bytes = int(self.ctx.campaign.spec.max_artifact_gb * 1024**3)
        for name in ("events.jsonl", "payload.log", "artifacts"):
            transport.get(f"{attempt.remote_dir}/{name}", str(local), timeout=deadline)
        self.collected = announced(q.events(self.ctx.engine, self.cell_id, "artifact"), _id(attempt))
        for refused in transport.refused_members():
            self.ctx.log(f"{self.key}: collecting the node's files: {refused}")


def _id(attempt: Attempt) -> int:
    assert attempt.id is not None
    return attempt.id
