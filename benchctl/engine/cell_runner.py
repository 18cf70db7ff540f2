"""One cell's life: attempts until the cell is done, failed, cancelled or over budget.

Every state change is committed before its side effect; the Attempt row exists before the
provider is asked for the node; a launch happens only when the budget admits its worst case.
Open attempts left by a crashed controller are reconciled first: re-attached if their node still
runs, else closed at the time the provider says the node ended. The runner holds the cell's lease
(``ctx.leases``, taken by the engine); once the lease is lost it stops writing to the cell.
``max_attempts`` counts launches and launches refused for any reason but capacity; a capacity
refusal (``NoCapacity``) backs off and moves to the next offer (``benchctl.engine.capacity``), and
waiting for a busy node or for budget is no attempt either.
A cell of ``nodes`` > 1 rents its nodes as one unit (``Provider.launch_cluster``, all or nothing),
admitted by the budget at every node's price; a crashed controller's open attempt is matched to
every member it launched (``of_attempt``).
"""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass

from benchctl.campaign.spec import CellSpec
from benchctl.engine.attempt_driver import AttemptDriver, cell_dir_name
from benchctl.engine.bad_hosts import campaign_bad_hosts
from benchctl.engine.budget import Admission
from benchctl.engine.capacity import CapacityWait
from benchctl.engine.cell_states import CellState, check_transition
from benchctl.engine.cluster import cluster_state
from benchctl.engine.providers import offer_request
from benchctl.engine.run_context import Outcome, OutcomeKind, RunContext
from benchctl.provisioners.base import (
    NoCapacity,
    Node,
    NodeState,
    OfferRequest,
    Provider,
    ProviderError,
    of_attempt,
)
from benchctl.results.cell_result import save_cell_result
from benchctl.store import queries as q
from benchctl.store.models import Attempt


class RentStatus(str, enum.Enum):
    """What one try to rent a node gave."""

    LAUNCHED = "launched"
    BUSY = "busy"
    """Every matching node is in use by other attempts: wait."""
    BUDGET_WAIT = "budget_wait"
    OVER_BUDGET = "over_budget"
    NO_OFFER = "no_offer"
    LAUNCH_FAILED = "launch_failed"
    """The provider refused the launch (its attempt closed): an attempt used."""
    NO_CAPACITY = "no_capacity"
    """The provider refused the launch for capacity (its attempt closed ``launch_failed``): back off, next offer."""
    ALL_HELD = "all_held"
    """Every offer refused a launch for capacity lately: back off, then ask for offers again."""


@dataclass(frozen=True)
class Rented:
    """One try to rent a node: its status, why, and the attempt and node it made."""

    status: RentStatus
    detail: str = ""
    attempt: Attempt | None = None
    node: Node | None = None
    wait_s: float = 0.0
    """The back-off before the next try (``no_capacity``, ``all_held``)."""


class CellRunner:
    def __init__(self, ctx: RunContext, cell_id: int) -> None:
        self.ctx = ctx
        self.cell_id = cell_id
        row = q.cell(ctx.engine, cell_id)
        self.key = row.key
        self.spec = CellSpec.model_validate_json(row.config_json)
        self.provider: Provider = ctx.providers.get(self.spec.provider)
        self._state = CellState(row.state)
        self.driver = AttemptDriver(ctx, cell_id, self.key, self.spec, self.provider, self.transition, self.halted)

    # -- state -------------------------------------------------------------------------------
    def state(self) -> CellState:
        """The cell's state: read with the cell, then as this runner set it. While this controller
        holds the cell's lease no one else writes it (``benchctl down`` revokes the lease first),
        and every write here is conditional on the lease (``Leases.set_state``)."""
        return self._state

    def transition(self, new: CellState, reason: str | None = None) -> None:
        if self.ctx.leases.lost(self.cell_id):
            return  # the cell is someone else's now (taken over, or `benchctl down`)
        current = self.state()
        if current is new and new is not CellState.PROVISIONING:
            return
        check_transition(current, new)
        if not self.ctx.leases.set_state(self.cell_id, new.value, reason):
            return  # taken over, or `benchctl down`, since the lease was last renewed
        self._state = new
        self.ctx.log(f"{self.key}: {new.value}" + (f" ({reason})" if reason else ""))

    def halted(self) -> Outcome | None:
        if self.ctx.leases.lost(self.cell_id):
            return Outcome(OutcomeKind.ABANDONED,
                           "this controller lost the cell's lease (taken over, or `benchctl down`)")
        if self.ctx.stop.is_set():
            return Outcome(OutcomeKind.CANCELLED, "interrupted")
        return None

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> CellState:
        """Run the cell to a final state (for this run); the caller holds its lease."""
        self._state = CellState(q.cell(self.ctx.engine, self.cell_id).state)  # as it is now the lease is ours
        if self.state() is CellState.DONE:
            return CellState.DONE
        bad_hosts: set[str] = set()  # hosts this run found bad; the store has the campaign's (see _request)
        for attempt in q.attempts(self.ctx.engine, self.cell_id):
            if attempt.open:
                outcome = self._reconcile(attempt)
                if self._settle(outcome, attempt, bad_hosts):
                    return self.state()
        tries = 0  # launches made, or refused for another reason than capacity
        last = "no attempt made"
        waiting_logged = False
        busy_logged = ""
        capacity = CapacityWait(self.ctx.capacity)
        while True:
            if (halt := self.halted()) is not None:
                self._settle(halt, None, bad_hosts)
                return self.state()
            if tries >= self.spec.max_attempts:
                self.transition(CellState.FAILED, f"{tries} attempts used (max_attempts); last: {last}")
                return CellState.FAILED
            self.transition(CellState.PROVISIONING)
            if (halt := self.halted()) is not None:  # the transition re-checked the lease
                self._settle(halt, None, bad_hosts)
                return self.state()
            rented = self._rent(bad_hosts, capacity)
            if rented.status in (RentStatus.BUSY, RentStatus.BUDGET_WAIT):
                # not an attempt: wait for the node, or the money, other attempts hold
                if rented.status is RentStatus.BUDGET_WAIT and not waiting_logged:
                    self.ctx.log(f"{self.key}: waiting for budget: {rented.detail}")
                    waiting_logged = True
                elif rented.status is RentStatus.BUSY and rented.detail and rented.detail != busy_logged:
                    self.ctx.log(f"{self.key}: busy: {rented.detail}")  # once per holder
                    busy_logged = rented.detail
                self.ctx.stop.wait(self.ctx.status_interval_s)
                continue
            if rented.status in (RentStatus.NO_CAPACITY, RentStatus.ALL_HELD):  # not an attempt either
                if not self._back_off(capacity, rented.detail, rented.wait_s):
                    return CellState.FAILED
                continue
            if rented.status is RentStatus.NO_OFFER:
                self.transition(CellState.FAILED, f"{self.spec.provider} has no offer for this cell now "
                                "(hosts that failed preflight are excluded); try again later or change the cell")
                return CellState.FAILED
            if rented.status is RentStatus.OVER_BUDGET:
                self.transition(CellState.FAILED, f"budget: {rented.detail}; raise budget_usd (or lower "
                                "payload.timeout_minutes) and `benchctl resume`")
                return CellState.FAILED
            if rented.attempt is None or rented.node is None:
                tries += 1
                last = rented.detail
                continue
            outcome = self.driver.drive(rented.attempt, rented.node, reattach=False)
            if outcome.kind is OutcomeKind.LAUNCH_FAILED:  # capacity refused after the launch returned: not a try
                if not self._back_off(capacity, outcome.detail, capacity.refused(rented.node.offer)):
                    return CellState.FAILED
                continue
            capacity.launched()  # the node came up: the run of refusals is over
            tries += 1
            last = f"{outcome.kind.value}: {outcome.detail}" if outcome.detail else outcome.kind.value
            if self._settle(outcome, rented.attempt, bad_hosts):
                return self.state()

    def _back_off(self, capacity: CapacityWait, detail: str, wait_s: float) -> bool:
        """After a refusal for capacity: wait ``wait_s`` (False, the cell failed, once refusals have
        lasted the capacity wait)."""
        if capacity.exhausted():
            self.transition(CellState.FAILED, f"no capacity: {self.spec.provider} refused every launch for "
                            f"capacity for {capacity.waited_s / 60:.0f} min (last: {detail}); "
                            "`benchctl resume` tries again")
            return False
        self.ctx.log(f"{self.key}: {detail}; next try in {wait_s:.0f} s")
        self.ctx.stop.wait(wait_s)
        return True

    def _rent(self, bad_hosts: set[str], capacity: CapacityWait) -> Rented:
        """Offer → budget → Attempt row → launch, under the provider's launch lock (two cells of this
        controller never take the same offer). Offers refused for capacity lately are skipped
        (``capacity``). Never waits: the caller does, without the lock."""
        with self.ctx.providers.launch_lock(self.spec.provider):
            request = self._request(bad_hosts)
            excluded = set(request.exclude_hosts)
            listed = [o for o in self.provider.offers(request) if o.host not in excluded]
            if not listed:
                if self.provider.all_busy(request):
                    return Rented(RentStatus.BUSY, self.provider.busy_detail(request) or "")
                return Rented(RentStatus.NO_OFFER)
            offers = capacity.available(listed)
            if not offers:
                return Rented(RentStatus.ALL_HELD, f"every {self.spec.provider} offer refused the launch for "
                              "capacity; asking for offers again", wait_s=capacity.all_held())
            offer = offers[0]
            nodes = self.spec.nodes
            remote_dir = f"benchctl/{self.ctx.campaign.spec.name}/{cell_dir_name(self.key)}/{{number}}"
            verdict, why, attempt = self.ctx.budget.admit(
                offer.hourly_usd, nodes=nodes, record=lambda s: q.add_attempt(
                    s, self.cell_id, f"bc-{uuid.uuid4().hex[:16]}", offer.provider, offer.market, remote_dir,
                    offer.hourly_usd * nodes, offer.host))
            if verdict is Admission.WAIT:
                return Rented(RentStatus.BUDGET_WAIT, why)
            if verdict is Admission.OVER or attempt is None:
                return Rented(RentStatus.OVER_BUDGET, why)
            try:
                if nodes > 1:
                    node = self.provider.launch_cluster(offer, nodes, attempt.token, self.ctx.campaign_tag)
                else:
                    node = self.provider.launch(offer, attempt.token, self.ctx.campaign_tag)
            except NoCapacity as exc:
                q.close_attempt(self.ctx.engine, _id(attempt), OutcomeKind.LAUNCH_FAILED.value, str(exc))
                return Rented(RentStatus.NO_CAPACITY, f"no capacity at {offer.host or offer.offer_id}: {exc}", attempt,
                              wait_s=capacity.refused(offer))
            except ProviderError as exc:
                q.close_attempt(self.ctx.engine, _id(attempt), OutcomeKind.LAUNCH_FAILED.value, str(exc))
                return Rented(RentStatus.LAUNCH_FAILED, f"launch failed: {exc}", attempt)
            q.attach_node(self.ctx.engine, _id(attempt), node.to_dict())
            return Rented(RentStatus.LAUNCHED, "", attempt, node)

    def _settle(self, outcome: Outcome, attempt: Attempt | None, bad_hosts: set[str]) -> bool:
        """Record an attempt's outcome in the cell's state; True when the cell is finished (for this run)."""
        if outcome.kind is OutcomeKind.ABANDONED or self.ctx.leases.lost(self.cell_id):
            self.ctx.log(f"{self.key}: {outcome.detail or 'lease lost'}; this controller leaves the cell")
            return True
        if outcome.kind is OutcomeKind.DONE:
            self.transition(CellState.DONE, save_cell_result(self.ctx.engine, self.cell_id, self.ctx.campaign.spec))
            return True
        if outcome.kind is OutcomeKind.CANCELLED:
            self.transition(CellState.CANCELLED, "interrupted; `benchctl resume` continues")
            return True
        if outcome.kind is OutcomeKind.BUDGET:
            self.transition(CellState.FAILED, f"budget: {outcome.detail}; raise budget_usd and `benchctl resume`")
            return True
        if outcome.kind is OutcomeKind.BAD_NODE:
            host = outcome.bad_host or (attempt.host if attempt is not None else None)
            if host:
                bad_hosts.add(host)
            self.transition(CellState.BAD_NODE, outcome.detail)
        elif outcome.kind is OutcomeKind.PREEMPTED:
            self.transition(CellState.PREEMPTED, outcome.detail)
        elif attempt is not None:
            self.ctx.log(f"{self.key}: attempt {attempt.number} failed: {outcome.detail}")
        return False

    def _request(self, bad_hosts: set[str] | None = None) -> OfferRequest:
        """The cell's request, every host found bad excluded (the campaign's and this run's: a
        provider renting a cluster avoids them for every member)."""
        excluded = campaign_bad_hosts(self.ctx.engine, self.ctx.campaign_id) | (bad_hosts or set())
        return offer_request(self.spec, self.key, excluded, image=self.ctx.campaign.spec.defaults.image)

    def _reconcile(self, attempt: Attempt) -> Outcome:
        """An attempt left open by a crashed controller: re-attach if its node (every node of its
        cluster) still runs; else end it, every member terminated."""
        if attempt.node_json is None:  # the launch (of some of a cluster's nodes) may have happened
            for node in self.provider.owned(self.ctx.campaign_tag):
                if of_attempt(node.token, attempt.token):
                    self.provider.terminate(node)
            q.close_attempt(self.ctx.engine, _id(attempt), OutcomeKind.LOST.value,
                            "controller stopped before the launch returned")
            return Outcome(OutcomeKind.ERROR, "lost at launch")
        node = Node.from_dict(json.loads(attempt.node_json))
        try:
            state, which = cluster_state(self.provider, node)
        except ProviderError as exc:  # e.g. SkyPilot found the cluster unhealthy: end the attempt, node and all
            outcome = Outcome(OutcomeKind.ERROR, str(exc))
            self.driver.end(attempt, node, outcome)
            return outcome
        if state is NodeState.RUNNING:
            self.ctx.log(f"{self.key}: re-attaching to attempt {attempt.number} on {node.node_id}")
            return self.driver.drive(attempt, node, reattach=True)
        gone = "node" if not node.peers else f"{which} ({state.value})"
        outcome = Outcome(OutcomeKind.PREEMPTED, f"{gone} gone while the controller was away")
        self.driver.end(attempt, node, outcome)
        return outcome


def _id(attempt: Attempt) -> int:
    assert attempt.id is not None
    return attempt.id
