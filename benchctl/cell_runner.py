"""One cell's life: rent a node, ship the payload, watch it, collect, terminate, record the result.

Every state change is committed before its side effect; the Attempt row exists before the
provider is asked for the node; the node is terminated in every exit path of an attempt
(``finally``), and the attempt closed with its cost.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine

import payload
from benchctl.cell_states import CellState, check_transition
from benchctl.event_sync import sync_events
from benchctl.providers import Providers
from benchctl.results import compute_result
from benchctl.spec import Campaign, CellSpec
from payload.job import EXIT_BAD_NODE, EXIT_OK, Job
from provisioners.base import Node, NodeState, OfferRequest, Provider, ProviderError, Transport
from store import queries as q
from store.models import Artifact, Attempt


@dataclass
class RunContext:
    """What every cell of one ``run``/``resume`` shares."""

    engine: Engine
    campaign: Campaign
    campaign_id: int
    campaign_uid: str
    providers: Providers
    artifacts_dir: Path
    stop: threading.Event = field(default_factory=threading.Event)
    poll_interval_s: float = 1.0
    status_interval_s: float = 5.0
    ready_timeout_s: float = 900.0
    log: Callable[[str], None] = print

    @property
    def campaign_tag(self) -> str:
        """Carried by every node of the campaign; the uid keeps two stores' same-named campaigns apart."""
        name = self.campaign.spec.name
        return f"bc-{name}-{self.campaign_uid}" if self.campaign_uid else f"bc-{name}"


@dataclass(frozen=True)
class Outcome:
    kind: str  # done | bad_node | preempted | error | cancelled
    detail: str = ""


class CellRunner:
    def __init__(self, ctx: RunContext, cell_id: int) -> None:
        self.ctx = ctx
        self.cell_id = cell_id
        row = q.cell(ctx.engine, cell_id)
        self.key = row.key
        self.spec = CellSpec.model_validate_json(row.config_json)
        self.provider: Provider = ctx.providers.get(self.spec.provider)

    # -- state -------------------------------------------------------------------------------
    def state(self) -> CellState:
        return CellState(q.cell(self.ctx.engine, self.cell_id).state)

    def transition(self, new: CellState, reason: str | None = None) -> None:
        current = self.state()
        if current is new and new is not CellState.PROVISIONING:
            return
        check_transition(current, new)
        q.set_cell_state(self.ctx.engine, self.cell_id, new.value, reason)
        self.ctx.log(f"{self.key}: {new.value}" + (f" ({reason})" if reason else ""))

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> CellState:
        if self.state() is CellState.DONE:
            return CellState.DONE
        bad_hosts: set[str] = set()  # hosts this run found bad; the store has the campaign's (see _request)
        for attempt in q.attempts(self.ctx.engine, self.cell_id):
            if attempt.open:
                outcome = self._reconcile(attempt)
                if self._settle(outcome, attempt, bad_hosts):
                    return self.state()
        tries = 0
        last = "no attempt made"
        while True:
            if self.ctx.stop.is_set():
                self.transition(CellState.CANCELLED, "interrupted; `benchctl resume` continues")
                return CellState.CANCELLED
            if tries >= self.spec.max_attempts:
                self.transition(CellState.FAILED, f"{tries} attempts used (max_attempts); last: {last}")
                return CellState.FAILED
            tries += 1
            self.transition(CellState.PROVISIONING)
            request = self._request()
            excluded = bad_hosts | set(request.exclude_hosts)
            offers = [o for o in self.provider.offers(request) if o.host not in excluded]
            if not offers:
                self.transition(CellState.FAILED, f"{self.spec.provider} has no offer for this cell now "
                                "(hosts that failed preflight are excluded); try again later or change the cell")
                return CellState.FAILED
            offer = offers[0]
            attempt = q.new_attempt(self.ctx.engine, self.cell_id, f"bc-{uuid.uuid4().hex[:16]}", offer.provider,
                                    offer.market, "", offer.hourly_usd, offer.host)
            attempt = self._set_remote_dir(attempt)
            try:
                node = self.provider.launch(offer, attempt.token, self.ctx.campaign_tag)
            except ProviderError as exc:
                q.close_attempt(self.ctx.engine, _id(attempt), "launch_failed", str(exc))
                last = f"launch failed: {exc}"
                continue
            q.attach_node(self.ctx.engine, _id(attempt), node.to_dict())
            outcome = self._drive(attempt, node, reattach=False)
            last = f"{outcome.kind}: {outcome.detail}" if outcome.detail else outcome.kind
            if self._settle(outcome, attempt, bad_hosts):
                return self.state()

    def _settle(self, outcome: Outcome, attempt: Attempt, bad_hosts: set[str]) -> bool:
        """Record an attempt's outcome in the cell's state; True when the cell is finished."""
        if outcome.kind == "done":
            result = compute_result(self.ctx.engine, self.cell_id, self.ctx.campaign.spec)
            if result is not None:
                q.save_result(self.ctx.engine, result)
            self.transition(CellState.DONE)
            return True
        if outcome.kind == "cancelled":
            self.transition(CellState.CANCELLED, "interrupted; `benchctl resume` continues")
            return True
        if outcome.kind == "bad_node":
            if attempt.host:
                bad_hosts.add(attempt.host)
            self.transition(CellState.BAD_NODE, outcome.detail)
        elif outcome.kind == "preempted":
            self.transition(CellState.PREEMPTED, outcome.detail)
        else:
            self.ctx.log(f"{self.key}: attempt {attempt.number} failed: {outcome.detail}")
        return False

    def _request(self) -> OfferRequest:
        s = self.spec
        bad = q.bad_hosts(self.ctx.engine, self.ctx.campaign_id)
        return OfferRequest(gpu=s.gpu or "", count=s.world_size, market=s.market, region=s.region,
                            instance_type=s.instance_type, min_vcpus=s.min_vcpus,
                            price_usd_per_hour=s.price_usd_per_hour, exclude_hosts=tuple(sorted(bad)),
                            extra={"faults": s.faults.model_dump(exclude_none=True)} if s.faults else {})

    def _set_remote_dir(self, attempt: Attempt) -> Attempt:
        from sqlmodel import Session

        with Session(self.ctx.engine) as s:
            row = s.get(Attempt, attempt.id)
            assert row is not None
            row.remote_dir = f"benchctl/{self.ctx.campaign.spec.name}/{self.key}/{row.number}"
            s.commit()
            s.refresh(row)
            return row

    # -- one attempt -------------------------------------------------------------------------
    def _reconcile(self, attempt: Attempt) -> Outcome:
        """An attempt left open by a crashed controller: re-attach if its node still runs."""
        if attempt.node_json is None:
            for node in self.provider.owned(self.ctx.campaign_tag):
                if node.token == attempt.token:
                    self.provider.terminate(node)
            q.close_attempt(self.ctx.engine, _id(attempt), "lost", "controller stopped before the launch returned")
            return Outcome("error", "lost at launch")
        node = Node.from_dict(json.loads(attempt.node_json))
        if self.provider.status(node) is NodeState.RUNNING:
            self.ctx.log(f"{self.key}: re-attaching to attempt {attempt.number} on {node.node_id}")
            return self._drive(attempt, node, reattach=True)
        transport = self._try_transport(node)
        if transport is not None:
            sync_events(self.ctx.engine, attempt, transport)
        self._terminate(node)
        q.close_attempt(self.ctx.engine, _id(attempt), "preempted", "node gone while the controller was away")
        return Outcome("preempted", "node gone while the controller was away")

    def _drive(self, attempt: Attempt, node: Node, reattach: bool) -> Outcome:
        outcome = Outcome("error", "controller error")
        try:
            transport = self.provider.transport(node)
            if reattach and transport.run(f"test -e {shlex.quote(attempt.remote_dir)}/payload.log").code != 0:
                reattach = False  # the controller stopped before the payload was started
            if not reattach:
                if not self._wait_ready(node):
                    outcome = Outcome("preempted" if not self.ctx.stop.is_set() else "cancelled",
                                      "node did not become ready")
                    return outcome
                self._start_payload(attempt, transport)
            outcome = self._watch(attempt, node, transport)
            if outcome.kind == "done":
                self.transition(CellState.COLLECTING)
                self._collect(attempt, transport)
            elif outcome.kind == "bad_node":
                self._collect(attempt, transport)  # the verdict and the facts are the evidence
            return outcome
        except ProviderError as exc:
            outcome = Outcome("error", str(exc))
            return outcome
        finally:
            self._last_sync(attempt, node)
            self._terminate(node)
            q.close_attempt(self.ctx.engine, _id(attempt), outcome.kind, outcome.detail or None)

    def _last_sync(self, attempt: Attempt, node: Node) -> None:
        """Read what the node still has before it goes: nothing measured is lost."""
        transport = self._try_transport(node)
        if transport is None:
            return
        with contextlib.suppress(ProviderError):
            sync_events(self.ctx.engine, attempt, transport)

    def _terminate(self, node: Node) -> None:
        for delay in (0, 1, 5):
            time.sleep(delay)
            try:
                self.provider.terminate(node)
                return
            except ProviderError as exc:
                self.ctx.log(f"{self.key}: terminate {node.node_id} failed ({exc}); retrying")
        self.ctx.log(f"{self.key}: could not terminate {node.node_id}: run `benchctl resume` or terminate it "
                     "at the provider")

    def _try_transport(self, node: Node) -> Transport | None:
        try:
            return self.provider.transport(node)
        except ProviderError:
            return None

    def _wait_ready(self, node: Node) -> bool:
        deadline = time.monotonic() + self.ctx.ready_timeout_s
        while time.monotonic() < deadline and not self.ctx.stop.is_set():
            state = self.provider.status(node)
            if state is NodeState.RUNNING:
                return True
            if state in (NodeState.PREEMPTED, NodeState.TERMINATED):
                return False
            self.ctx.stop.wait(self.ctx.poll_interval_s)
        return False

    def _done_phases(self) -> list[str]:
        """Workload phases finished by earlier attempts. Preflight is never carried over: it judges
        the node, and every new node must prove itself healthy."""
        ended = {e.phase for e in q.events(self.ctx.engine, self.cell_id, kind="phase_end") if e.phase}
        return sorted(ended - {"preflight"})

    def _start_payload(self, attempt: Attempt, transport: Transport) -> None:
        done = self._done_phases()
        job = Job(campaign=self.ctx.campaign.spec.name, cell=self.key, attempt=attempt.number, token=attempt.token,
                  gpu=self.spec.gpu or "", count=self.spec.world_size,
                  phases=list(self.ctx.campaign.spec.payload.phases),
                  done_phases=done, profile=self.ctx.campaign.profile_config(self.spec),
                  collectives=self.ctx.campaign.collectives_config(), command=self.ctx.campaign.command_config(),
                  preflight_thresholds=dict(self.ctx.campaign.spec.payload.preflight.thresholds),
                  env=dict(self.spec.env))
        with tempfile.TemporaryDirectory(prefix="benchctl-stage-") as stage:
            shutil.copytree(Path(payload.__file__).parent, Path(stage) / "payload",
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            (Path(stage) / "job.json").write_text(job.to_json())
            upload = self.ctx.campaign.command_upload()
            if upload is not None and "command" in job.pending_phases():
                shutil.copytree(upload, Path(stage) / "work", ignore=shutil.ignore_patterns("__pycache__"))
            transport.put(stage, attempt.remote_dir)
        self.transition(CellState.PREFLIGHT if "preflight" in job.pending_phases() else CellState.RUNNING)
        transport.start(f"{transport.python} -m payload run job.json > payload.log 2>&1; echo $? > exit_code",
                        cwd=attempt.remote_dir)

    def _watch(self, attempt: Attempt, node: Node, transport: Transport) -> Outcome:
        last_status = time.monotonic()
        timeout = time.monotonic() + self.ctx.campaign.spec.payload.timeout_minutes * 60
        while True:
            for event in sync_events(self.ctx.engine, attempt, transport):
                if event.get("kind") == "phase_start" and event.get("phase") != "preflight" \
                        and self.state() is CellState.PREFLIGHT:
                    self.transition(CellState.RUNNING)
            exit_code = transport.read_from(f"{attempt.remote_dir}/exit_code", 0).strip()
            if exit_code:
                sync_events(self.ctx.engine, attempt, transport)
                return self._exit_outcome(int(exit_code), attempt, transport)
            if self.ctx.stop.is_set():
                return Outcome("cancelled", "interrupted")
            if time.monotonic() - last_status >= self.ctx.status_interval_s:
                last_status = time.monotonic()
                state = self.provider.status(node)
                if state in (NodeState.PREEMPTED, NodeState.TERMINATED):
                    return Outcome("preempted", f"the provider reports the node {state.value}")
            if time.monotonic() > timeout:
                return Outcome("error", f"payload ran past payload.timeout_minutes "
                               f"({self.ctx.campaign.spec.payload.timeout_minutes})")
            self.ctx.stop.wait(self.ctx.poll_interval_s)

    def _exit_outcome(self, code: int, attempt: Attempt, transport: Transport) -> Outcome:
        if code == EXIT_OK:
            return Outcome("done")
        errors = [json.loads(e.data_json).get("message", "") for e in q.events(self.ctx.engine, self.cell_id, "error")
                  if e.attempt_id == attempt.id]
        detail = errors[-1] if errors else _tail(transport.read_from(f"{attempt.remote_dir}/payload.log", 0))
        return Outcome("bad_node" if code == EXIT_BAD_NODE else "error", f"payload exit {code}: {detail}")

    def _collect(self, attempt: Attempt, transport: Transport) -> None:
        local = self.ctx.artifacts_dir / self.key / str(attempt.number)
        local.mkdir(parents=True, exist_ok=True)
        for name in ("artifacts", "events.jsonl", "payload.log"):
            transport.get(f"{attempt.remote_dir}/{name}", str(local))
        for event in q.events(self.ctx.engine, self.cell_id, "artifact"):
            if event.attempt_id != attempt.id:
                continue
            data = json.loads(event.data_json)
            path = local / data["path"]
            q.add_artifact(self.ctx.engine, Artifact(attempt_id=_id(attempt), cell_id=self.cell_id, name=data["name"],
                                                     remote_path=f"{attempt.remote_dir}/{data['path']}",
                                                     local_path=str(path) if path.exists() else None,
                                                     bytes=path.stat().st_size if path.exists() else None))


def _id(attempt: Attempt) -> int:
    assert attempt.id is not None
    return attempt.id


def _tail(data: bytes, lines: int = 3) -> str:
    return " | ".join(data.decode(errors="replace").strip().splitlines()[-lines:])
