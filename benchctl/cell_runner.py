"""One cell's life: attempts until the cell is done, failed, cancelled or over budget.

Every state change is committed before its side effect; the Attempt row exists before the
provider is asked for the node; a launch happens only when the budget admits its worst case.
Open attempts left by a crashed controller are reconciled first: re-attached if their node still
runs, else closed at the time the provider says the node ended. The runner holds the cell's lease
(``ctx.leases``, taken by the engine); once the lease is lost it stops writing to the cell.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from benchctl.attempt_driver import AttemptDriver, cell_dir_name
from benchctl.budget import Admission
from benchctl.cell_states import CellState, check_transition
from benchctl.providers import offer_request
from benchctl.results import compute_result
from benchctl.run_context import Outcome, RunContext
from benchctl.spec import CellSpec
from provisioners.base import Node, NodeState, OfferRequest, Provider, ProviderError
from store import queries as q
from store.models import Attempt


@dataclass(frozen=True)
class Rented:
    """What one try to rent a node gave: launched | busy | budget_wait | over_budget | no_offer |
    launch_failed (its attempt closed)."""

    status: str
    detail: str = ""
    attempt: Attempt | None = None
    node: Node | None = None


class CellRunner:
    def __init__(self, ctx: RunContext, cell_id: int) -> None:
        self.ctx = ctx
        self.cell_id = cell_id
        row = q.cell(ctx.engine, cell_id)
        self.key = row.key
        self.spec = CellSpec.model_validate_json(row.config_json)
        self.provider: Provider = ctx.providers.get(self.spec.provider)
        self.driver = AttemptDriver(ctx, cell_id, self.key, self.spec, self.provider, self.transition, self.halted)

    # -- state -------------------------------------------------------------------------------
    def state(self) -> CellState:
        return CellState(q.cell(self.ctx.engine, self.cell_id).state)

    def transition(self, new: CellState, reason: str | None = None) -> None:
        if not self.ctx.leases.verify(self.cell_id):
            return  # the cell is someone else's now (taken over, or `benchctl down`)
        current = self.state()
        if current is new and new is not CellState.PROVISIONING:
            return
        check_transition(current, new)
        q.set_cell_state(self.ctx.engine, self.cell_id, new.value, reason)
        self.ctx.log(f"{self.key}: {new.value}" + (f" ({reason})" if reason else ""))

    def halted(self) -> Outcome | None:
        if self.ctx.leases.lost(self.cell_id):
            return Outcome("abandoned", "this controller lost the cell's lease (taken over, or `benchctl down`)")
        if self.ctx.stop.is_set():
            return Outcome("cancelled", "interrupted")
        return None

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
        waiting_logged = False
        while True:
            if (halt := self.halted()) is not None:
                self._settle(halt, None, bad_hosts)
                return self.state()
            if tries >= self.spec.max_attempts:
                self.transition(CellState.FAILED, f"{tries} attempts used (max_attempts); last: {last}")
                return CellState.FAILED
            tries += 1
            self.transition(CellState.PROVISIONING)
            if (halt := self.halted()) is not None:  # the transition re-checked the lease
                self._settle(halt, None, bad_hosts)
                return self.state()
            rented = self._rent(bad_hosts)
            if rented.status in ("busy", "budget_wait"):
                tries -= 1  # not an attempt: wait for the node, or the money, other attempts hold
                if rented.status == "budget_wait" and not waiting_logged:
                    self.ctx.log(f"{self.key}: waiting for budget: {rented.detail}")
                    waiting_logged = True
                self.ctx.stop.wait(self.ctx.status_interval_s)
                continue
            if rented.status == "no_offer":
                self.transition(CellState.FAILED, f"{self.spec.provider} has no offer for this cell now "
                                "(hosts that failed preflight are excluded); try again later or change the cell")
                return CellState.FAILED
            if rented.status == "over_budget":
                self.transition(CellState.FAILED, f"budget: {rented.detail}; raise budget_usd (or lower "
                                "payload.timeout_minutes) and `benchctl resume`")
                return CellState.FAILED
            if rented.attempt is None or rented.node is None:
                last = rented.detail
                continue
            outcome = self.driver.drive(rented.attempt, rented.node, reattach=False)
            last = f"{outcome.kind}: {outcome.detail}" if outcome.detail else outcome.kind
            if self._settle(outcome, rented.attempt, bad_hosts):
                return self.state()

    def _rent(self, bad_hosts: set[str]) -> Rented:
        """Offer → budget → Attempt row → launch, under the provider's launch lock (two cells of this
        controller never take the same offer). Never waits: the caller does, without the lock."""
        with self.ctx.providers.launch_lock(self.spec.provider):
            request = self._request()
            excluded = bad_hosts | set(request.exclude_hosts)
            offers = [o for o in self.provider.offers(request) if o.host not in excluded]
            if not offers:
                return Rented("busy" if self.provider.all_busy(request) else "no_offer")
            offer = offers[0]
            with self.ctx.budget.admit(offer.hourly_usd) as (verdict, why):
                if verdict is Admission.WAIT:
                    return Rented("budget_wait", why)
                if verdict is Admission.OVER:
                    return Rented("over_budget", why)
                remote_dir = f"benchctl/{self.ctx.campaign.spec.name}/{cell_dir_name(self.key)}/{{number}}"
                attempt = q.new_attempt(self.ctx.engine, self.cell_id, f"bc-{uuid.uuid4().hex[:16]}", offer.provider,
                                        offer.market, remote_dir, offer.hourly_usd, offer.host)
            try:
                node = self.provider.launch(offer, attempt.token, self.ctx.campaign_tag)
            except ProviderError as exc:
                q.close_attempt(self.ctx.engine, _id(attempt), "launch_failed", str(exc))
                return Rented("launch_failed", f"launch failed: {exc}", attempt)
            q.attach_node(self.ctx.engine, _id(attempt), node.to_dict())
            return Rented("launched", "", attempt, node)

    def _settle(self, outcome: Outcome, attempt: Attempt | None, bad_hosts: set[str]) -> bool:
        """Record an attempt's outcome in the cell's state; True when the cell is finished (for this run)."""
        if outcome.kind == "abandoned" or self.ctx.leases.lost(self.cell_id):
            self.ctx.log(f"{self.key}: {outcome.detail or 'lease lost'}; this controller leaves the cell")
            return True
        if outcome.kind == "done":
            result = compute_result(self.ctx.engine, self.cell_id, self.ctx.campaign.spec)
            if result is not None:
                q.save_result(self.ctx.engine, result)
            self.transition(CellState.DONE)
            return True
        if outcome.kind == "cancelled":
            self.transition(CellState.CANCELLED, "interrupted; `benchctl resume` continues")
            return True
        if outcome.kind == "budget":
            self.transition(CellState.FAILED, f"budget: {outcome.detail}; raise budget_usd and `benchctl resume`")
            return True
        if outcome.kind == "bad_node":
            if attempt is not None and attempt.host:
                bad_hosts.add(attempt.host)
            self.transition(CellState.BAD_NODE, outcome.detail)
        elif outcome.kind == "preempted":
            self.transition(CellState.PREEMPTED, outcome.detail)
        elif attempt is not None:
            self.ctx.log(f"{self.key}: attempt {attempt.number} failed: {outcome.detail}")
        return False

    def _request(self) -> OfferRequest:
        return offer_request(self.spec, self.key, q.bad_hosts(self.ctx.engine, self.ctx.campaign_id),
                             image=self.ctx.campaign.spec.defaults.image)

    def _reconcile(self, attempt: Attempt) -> Outcome:
        """An attempt left open by a crashed controller: re-attach if its node still runs."""
        if attempt.node_json is None:
            for node in self.provider.owned(self.ctx.campaign_tag):
                if node.token == attempt.token:
                    self.provider.terminate(node)
            q.close_attempt(self.ctx.engine, _id(attempt), "lost", "controller stopped before the launch returned")
            return Outcome("error", "lost at launch")
        node = Node.from_dict(json.loads(attempt.node_json))
        try:
            state = self.provider.status(node)
        except ProviderError as exc:  # e.g. SkyPilot found the cluster unhealthy: end the attempt, node and all
            outcome = Outcome("error", str(exc))
            self.driver.end(attempt, node, outcome)
            return outcome
        if state is NodeState.RUNNING:
            self.ctx.log(f"{self.key}: re-attaching to attempt {attempt.number} on {node.node_id}")
            return self.driver.drive(attempt, node, reattach=True)
        outcome = Outcome("preempted", "node gone while the controller was away")
        self.driver.end(attempt, node, outcome)
        return outcome


def _id(attempt: Attempt) -> int:
    assert attempt.id is not None
    return attempt.id
