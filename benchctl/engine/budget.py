"""The campaign's budget: no launch may make its worst case exceed ``budget_usd``.

An attempt's worst case is its hourly price × the longest it can live: the wait for the node to
be ready, the payload's timeout, and the collection of artifacts. Before a launch, the money
already spent by closed attempts + what every open attempt may still cost at worst + the new
attempt's worst case must fit in the budget: otherwise the cell waits while other attempts run
(their worst case is released when they end) or, with nothing running, ends with reason
``budget``. While attempts run, the actual spend is checked every status poll; a campaign over
budget stops its nodes, so it exceeds the budget by at most one poll's spend. While an
attempt's files are collected, ``Budget.watch`` checks the spend as often in a thread of its own.
A cell of ``nodes`` > 1 rents them as one attempt: its hourly price is the node's × nodes (an
attempt's recorded ``hourly_usd`` is that of all its nodes). Admission reads the spend and writes
the attempt's row under the campaign's admission lock, so controllers in other processes sharing
the store are admitted one at a time (``admit``).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.engine import Engine

from benchctl.campaign.spec import Campaign, CellSpec
from benchctl.engine.attempt_limits import (  # noqa: F401 (re-exported: the engine's names for them)
    COLLECT_ALLOWANCE_S,
    COLLECT_MIN_S,
    READY_TIMEOUT_S,
    attempt_worst_case_s,
    collect_timeout_s,
)
from benchctl.store import queries as q

if TYPE_CHECKING:
    from sqlmodel import Session

T = TypeVar("T")


def worst_case_spend(campaign: Campaign, cells: list[CellSpec], providers: Any, spent_usd: float) -> float:
    """What running ``cells`` could cost at most: every attempt of every cell at its best offer's price
    for its worst-case duration, plus what was spent, capped by the budget (no launch exceeds it)."""
    from benchctl.engine.providers import offer_request

    per_attempt_h = attempt_worst_case_s(campaign.spec) / 3600.0
    worst = spent_usd
    for cell in cells:
        offers = providers.get(cell.provider).offers(offer_request(cell, label=cell.key,
                                                                   image=campaign.spec.defaults.image))
        if offers:
            worst += cell.max_attempts * offers[0].hourly_usd * cell.nodes * per_attempt_h
    return min(worst, campaign.spec.budget_usd)


class Admission(str, enum.Enum):
    LAUNCH = "launch"
    WAIT = "wait"
    OVER = "over"


@dataclass
class Budget:
    engine: Engine
    campaign_id: int
    budget_usd: float
    attempt_worst_case_s: float
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _spent: tuple[float, float] | None = field(default=None, init=False)
    """(monotonic time, spend) of the last ``exceeded`` read, shared by this controller's cells."""

    def worst_case_usd(self, hourly_usd: float, nodes: int = 1) -> float:
        """An attempt's worst case at ``hourly_usd`` per node, on ``nodes`` nodes."""
        return hourly_usd * nodes * self.attempt_worst_case_s / 3600.0

    def committed_usd(self, now: float | None = None, session: Session | None = None) -> tuple[float, int]:
        """(spent by closed attempts + the worst case still possible for open ones, open attempts);
        ``session``: read in that transaction (``admit``'s)."""
        now = time.time() if now is None else now
        # the database's figures, never a copy of ours
        spend = q.campaign_spend(self.engine, self.campaign_id, session=session)
        total = sum(spend.closed.values())
        for hourly, launched_at in spend.open:
            total += max(now - (launched_at or now), self.attempt_worst_case_s) * (hourly or 0.0) / 3600.0
        return total, len(spend.open)

    def exceeded(self, max_age_s: float = 0.0) -> bool:
        """The campaign's spend (closed attempts' cost + open ones' so far) reached the budget: one
        aggregate query, as cheap at 10,000 attempts as at 10. ``max_age_s``: a spend read that
        recently (by any cell of this controller) answers instead, so that N cells watching the
        budget every ``s`` seconds read it about once per ``max_age_s``, not N times per ``s``.
        Admission (``admit``) always reads the store."""
        now = time.monotonic()
        last = self._spent
        if last is None or now - last[0] >= max_age_s:
            last = self._spent = (now, q.spent_usd(self.engine, self.campaign_id))
        return last[1] >= self.budget_usd

    @contextmanager
    def watch(self, on_exceeded: Callable[[], None], every_s: float) -> Iterator[None]:
        """While the block runs, check the spend every ``every_s`` in a thread; once it reaches the
        budget, call ``on_exceeded`` (once) so that the block stops what it is doing."""
        done = threading.Event()

        def check() -> None:
            while not done.wait(every_s):
                if self.exceeded():
                    on_exceeded()
                    return

        watcher = threading.Thread(target=check, name="budget-watch", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            done.set()
            watcher.join()

    def admit(self, hourly_usd: float, nodes: int = 1,
              record: Callable[[Session], T] | None = None) -> tuple[Admission, str, T | None]:
        """Decide whether an attempt at ``hourly_usd`` per node on ``nodes`` nodes may launch and, when
        it may, ``record`` its Attempt row (``q.add_attempt`` in the session given): (verdict, why not,
        what ``record`` returned). The spend is read and the row written in one transaction holding
        the campaign's admission lock (``q.campaign_admission``), so two controllers (processes)
        never both take the last dollars; ``_lock`` lines this controller's cells up before it, so
        they do not queue on the database."""
        with self._lock, q.campaign_admission(self.engine, self.campaign_id) as session:
            committed, running = self.committed_usd(session=session)
            worst = self.worst_case_usd(hourly_usd, nodes)
            if committed + worst <= self.budget_usd + 1e-9:
                return Admission.LAUNCH, "", record(session) if record is not None else None
        per_node = f" × {nodes} nodes" if nodes > 1 else ""
        why = (f"spent and committed ${committed:.2f} + this attempt's worst case ${worst:.2f} "
               f"(${hourly_usd:.2f}/h{per_node} × {self.attempt_worst_case_s / 3600:.2f} h) > budget_usd "
               f"${self.budget_usd:.2f}")
        return (Admission.WAIT if running else Admission.OVER), why, None
