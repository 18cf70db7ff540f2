"""What the budget and the bad-host list read does not grow with the campaign (issue 31 item 12):
``Budget.exceeded`` (every status poll of every running cell), ``Budget.committed_usd`` (every
launch) and ``campaign_bad_hosts`` (every launch) sum in the database and read only the rows they
need, so they fetch as many rows and send as many statements at 1,000 attempts as at 10; their
figures are those of the attempts, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchctl.engine.bad_hosts import campaign_bad_hosts
from benchctl.engine.budget import Budget
from benchctl.provisioners.base import Node, Offer
from benchctl.store import queries as q
from benchctl.store.database import open_store
from benchctl.store.models import Attempt
from tests.store.db_counter import DbCounter, count_dbapi

WORST_CASE_S = 3600.0


def _campaign(engine: Engine, name: str = "c", cells: int = 1) -> tuple[int, list[int]]:
    new = [q.NewCell(key=f"k{i}", provider="p", gpu="cpu", count=1, market="on-demand", config_json="{}")
           for i in range(cells)]
    campaign_id, _ = q.upsert_campaign(engine, name, "{}", "/tmp/c.yaml", 1000.0, new)
    return campaign_id, [c.id or 0 for c in q.cells(engine, campaign_id)]


def _member(host: str) -> Node:
    offer = Offer(provider="p", offer_id=host, gpu="cpu", count=1, vcpus=1, region="r", hourly_usd=1.0,
                  market="on-demand", host=host)
    return Node(provider="p", node_id=host, token=host, campaign_tag="c", offer=offer, host=host)


def _attempt(engine: Engine, cell_id: int, token: str, hourly: float | None = 1.0, host: str | None = None) -> int:
    attempt = q.new_attempt(engine, cell_id, token, "p", "on-demand", "x", hourly or 0.0, host or f"h-{token}")
    if hourly is None:  # an attempt whose price is unknown
        with engine.begin() as conn:
            conn.execute(sa.update(Attempt).where(Attempt.id == attempt.id).values(hourly_usd=None))  # type: ignore[arg-type]
    return attempt.id or 0


def _mixed_campaign(engine: Engine) -> tuple[int, int, float]:
    """A campaign with every kind of attempt the figures treat apart: (campaign id, a cell, now)."""
    campaign_id, (cell, other) = _campaign(engine, cells=2)
    now = time.time()
    for token, outcome, hours in (("d1", "done", 1.0), ("p1", "preempted", 0.5), ("e1", "error", 2.0)):
        q.close_attempt(engine, _attempt(engine, cell, token, hourly=2.0), outcome, terminated_at=now + hours * 3600)
    q.close_attempt(engine, _attempt(engine, cell, "nohourly", hourly=None), "done")  # costs 0
    q.close_attempt(engine, _attempt(engine, other, "single", host="host-single"), "bad_node", "payload exit 3")
    q.close_attempt(engine, _attempt(engine, other, "done-host", host="host-fine"), "done")
    # a cluster's bad verdicts: naming a worker by rank, naming no node (the fabric), named in the detail
    for token, verdict, detail in (("named", {"bad_node_rank": 1}, "payload exit 3"),
                                   ("fabric", {"bad_node": True}, "payload exit 3"),
                                   ("detail", None, "exit 3 (node 1 of 2: w-detail)")):
        attempt_id = _attempt(engine, other, token, host=f"head-{token}")
        head = _member(f"head-{token}")
        q.attach_node(engine, attempt_id, Node(**{**head.__dict__, "peers": (_member(f"w-{token}"),)}).to_dict())
        if verdict is not None:
            q.record_events(engine, attempt_id, [{"t": 1.0, "kind": "error", "message": "bad", **verdict}], 0, 100)
        q.close_attempt(engine, attempt_id, "bad_node", detail)
    _attempt(engine, cell, "open1", hourly=3.0)  # launched now
    _attempt(engine, other, "open2", hourly=None)
    _, (elsewhere,) = _campaign(engine, "other")
    q.close_attempt(engine, _attempt(engine, elsewhere, "x1", hourly=50.0, host="host-other"), "bad_node")
    return campaign_id, cell, now


def _reference(engine: Engine, campaign_id: int, now: float) -> tuple[dict[str, float], tuple[float, int]]:
    """The figures computed from every attempt row, the way they were before they were summed in SQL."""
    by_outcome: dict[str, float] = {}
    committed, running = 0.0, 0
    for a in q.campaign_attempts(engine, campaign_id):
        key = "open" if a.open else (a.outcome or "unknown")
        by_outcome[key] = by_outcome.get(key, 0.0) + q.attempt_spent(a, now)
        if not a.open:
            committed += a.cost_usd or 0.0
        else:
            running += 1
            committed += max(now - (a.launched_at or now), WORST_CASE_S) * (a.hourly_usd or 0.0) / 3600.0
    return by_outcome, (committed, running)


def test_spend_and_bad_hosts_are_those_of_the_attempts(db_url: str) -> None:
    engine = open_store(db_url)
    campaign_id, _, now = _mixed_campaign(engine)
    later = now + 1800
    by_outcome, (committed, running) = _reference(engine, campaign_id, later)
    assert set(by_outcome) == {"done", "preempted", "error", "bad_node", "open"}
    assert q.spent_by_outcome(engine, campaign_id, later) == pytest.approx(by_outcome)
    assert by_outcome["open"] == pytest.approx(1.5, abs=0.01)  # 3 $/h for half an hour; an unknown price costs 0
    assert q.spent_usd(engine, campaign_id, later) == pytest.approx(sum(by_outcome.values()))
    budget = Budget(engine, campaign_id, 1000.0, WORST_CASE_S)
    assert budget.committed_usd(later) == (pytest.approx(committed), running)
    assert running == 2
    assert campaign_bad_hosts(engine, campaign_id) == {"host-single", "w-named", "w-detail"}
    assert not budget.exceeded()
    closed = sum(usd for outcome, usd in by_outcome.items() if outcome != "open")
    assert Budget(engine, campaign_id, closed - 0.5, WORST_CASE_S).exceeded()


def _cost(counter: DbCounter, engine: Engine, campaign_id: int) -> dict[str, tuple[int, int, int]]:
    budget = Budget(engine, campaign_id, 1000.0, WORST_CASE_S)
    calls: dict[str, Callable[[], object]] = {"exceeded": budget.exceeded, "committed_usd": budget.committed_usd,
                                              "campaign_bad_hosts": lambda: campaign_bad_hosts(engine, campaign_id),
                                              "spent_by_outcome": lambda: q.spent_by_outcome(engine, campaign_id)}
    cost = {}
    for name, call in calls.items():
        call()  # a connection made now is not what the call costs
        counter.reset()
        call()
        cost[name] = counter.snapshot()
    return cost


def test_budget_and_bad_hosts_cost_the_same_at_10_and_1000_attempts(db_url: str) -> None:
    engine = open_store(db_url)
    campaign_id, cell, now = _mixed_campaign(engine)
    loaded: list[object] = []

    def load(target: object, _context: object) -> None:
        loaded.append(target)

    sa.event.listen(Attempt, "load", load)
    try:
        counter = count_dbapi(engine)
        small = _cost(counter, engine, campaign_id)
        rows = [{"cell_id": cell, "number": 100 + i, "token": f"bulk-{i}", "provider": "p", "market": "on-demand",
                 "remote_dir": "x", "hourly_usd": 1.0, "host": f"bulk-host-{i}", "open": False,
                 "outcome": ("done", "preempted", "error")[i % 3], "launched_at": now, "terminated_at": now + 60,
                 "cost_usd": 1 / 60, "events_offset": 0, "events_lines": 0, "node_json": json.dumps({"x": i})}
                for i in range(990)]
        with engine.begin() as conn:
            conn.execute(sa.insert(Attempt), rows)
        large = _cost(counter, engine, campaign_id)
    finally:
        sa.event.remove(Attempt, "load", load)
    assert large == small, f"statements, round trips, rows fetched at 10 attempts {small}, at 1,000 {large}"
    assert not loaded, "no Attempt row is loaded as an ORM object"
    assert q.spent_by_outcome(engine, campaign_id, now)["done"] == pytest.approx(2.0 + 330 / 60, abs=0.01)
