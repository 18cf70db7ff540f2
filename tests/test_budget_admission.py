"""Two controller processes never both take a campaign's last dollars (issue 31, budget admission).

Each process is a real controller's admission path (``CellRunner._rent``: offer → budget → Attempt
row → launch) on the same store, a SQLite file or the machine's PostgreSQL, with a budget that
allows exactly one more attempt. The interleaving is forced with events, not sleeps: controller A
reads the campaign's spend and stops there; controller B then starts its admission, and A goes on
as soon as B has either read the spend too (two reads of the same dollars: the race) or asked the
database for the admission lock (``BEGIN IMMEDIATE`` on SQLite, ``FOR UPDATE`` on PostgreSQL: B's
read then comes after A's row is committed). Exactly one of them launches."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchctl.engine.budget import Budget
from benchctl.engine.capacity import CapacityWait
from benchctl.engine.cell_runner import CellRunner
from benchctl.store import queries as q
from benchctl.store.database import open_store
from tests.fakes.memory_provider import MemoryProvider, Script
from tests.memory_campaign import memory_run, offer

TWO_CELLS = """\
  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 2.0}
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 2.0}
"""
HOURLY_USD = 2.0
GUARD_S = 120.0
"""Only a broken test waits this long (a child that died); the order itself is set by events."""


def _controller(url: str, workdir: str, count: int, pause: bool, events: dict[str, Any], told: Any) -> None:
    """One controller: set up, then (on ``start``) one try to rent a node for its cell. Tells
    ``told`` when it read the spend ("read"), when it asks the database for a write lock
    ("locking"), and how the try ended; with ``pause``, waits for ``go`` after reading the spend."""
    provider = MemoryProvider([offer(f"host-{count}", hourly_usd=HOURLY_USD, count=count)], [Script(exit_code=None)])
    run = memory_run(Path(workdir), provider, matrix=TWO_CELLS, db=url)
    run.ctx.budget.budget_usd = 1.5 * run.ctx.budget.worst_case_usd(HOURLY_USD)  # room for one attempt, not two
    runner = CellRunner(run.ctx, run.cell(f"local:cpux{count}:on-demand").id or 0)
    me = threading.get_ident()

    def locking(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if threading.get_ident() == me and (statement.startswith("BEGIN IMMEDIATE") or "FOR UPDATE" in statement):
            told.put("locking")

    read_spend = Budget.committed_usd

    def committed_usd(self: Budget, *args: Any, **kwargs: Any) -> tuple[float, int]:
        found = read_spend(self, *args, **kwargs)
        told.put("read")
        if pause:
            events["go"].wait()
        return found

    Budget.committed_usd = committed_usd  # type: ignore[method-assign]
    sa.event.listen(run.engine, "before_cursor_execute", locking)
    events["ready"].set()
    events["start"].wait()
    told.put(runner._rent(set(), CapacityWait(run.ctx.capacity)).status.value)


def _next(told: Any, skip: tuple[str, ...] = ()) -> str:
    while True:
        said = str(told.get(timeout=GUARD_S))
        if said not in skip:
            return said


def test_two_controllers_racing_for_the_last_attempt_admit_exactly_one(db_url: str, tmp_path: Path) -> None:
    mp = multiprocessing.get_context("spawn")
    a_events = {name: mp.Event() for name in ("ready", "start", "go")}
    b_events = {name: mp.Event() for name in ("ready", "start", "go")}
    a_told, b_told = mp.Queue(), mp.Queue()
    b = mp.Process(target=_controller, args=(db_url, str(tmp_path / "b"), 1, False, b_events, b_told))
    a = mp.Process(target=_controller, args=(db_url, str(tmp_path / "a"), 2, True, a_events, a_told))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        b.start()
        assert b_events["ready"].wait(GUARD_S), "B set up (its writes done before A holds anything)"
        a.start()
        assert a_events["ready"].wait(GUARD_S)
        a_events["start"].set()
        assert _next(a_told, skip=("locking",)) == "read", "A read the spend and waits"
        b_events["start"].set()
        assert _next(b_told) in ("read", "locking"), "B read the same dollars, or waits for A's admission"
        a_events["go"].set()
        a_end = _next(a_told, skip=("read", "locking"))
        b_end = _next(b_told, skip=("read", "locking"))
        a.join(GUARD_S)
        b.join(GUARD_S)
    finally:
        for child in (a, b):
            if child.is_alive():
                child.kill()
    assert (a.exitcode, b.exitcode) == (0, 0)
    assert (a_end, b_end) == ("launched", "budget_wait"), "A admitted; B waits for A's worst case to be released"
    engine = open_store(db_url)
    try:
        [campaign] = q.campaigns(engine, "tiny")
        assert len(q.campaign_attempts(engine, campaign.id or 0)) == 1, "one Attempt row: the budget held"
    finally:
        engine.dispose()
