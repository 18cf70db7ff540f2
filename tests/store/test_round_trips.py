"""The store's round trips (issue 31 item 12): on PostgreSQL a one-statement read or write is one
round trip (no pre-ping, no BEGIN/ROLLBACK around it), a connection that sat idle is still checked
before use and replaced when the server dropped it; on SQLite a read takes no write lock."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchctl.engine.budget import Budget
from benchctl.store import connections
from benchctl.store import leases as store_leases
from benchctl.store import queries as q
from benchctl.store.database import open_store
from tests.conftest import PG_URL
from tests.store.db_counter import count_dbapi


def _cell(engine: Engine) -> tuple[int, int]:
    cell = q.NewCell(key="k", provider="p", gpu="cpu", count=1, market="on-demand", config_json="{}")
    campaign_id, _ = q.upsert_campaign(engine, "c", "{}", "/tmp/c.yaml", 10.0, [cell])
    return campaign_id, q.cells(engine, campaign_id)[0].id or 0


def test_one_statement_costs_one_round_trip_on_postgresql(pg_url: str) -> None:
    engine = open_store(pg_url)
    campaign_id, cell_id = _cell(engine)
    counter = count_dbapi(engine)
    budget = Budget(engine, campaign_id, 10.0, 3600.0)
    assert store_leases.acquire(engine, cell_id, "me", 60.0) is None
    calls = {"cell": lambda: q.cell(engine, cell_id), "attempts": lambda: q.attempts(engine, cell_id),
             "events": lambda: q.events(engine, cell_id, "error"), "exceeded": budget.exceeded,
             "set_cell_state": lambda: q.set_cell_state(engine, cell_id, "provisioning"),
             "renew": lambda: store_leases.renew(engine, cell_id, "me", 60.0)}
    cost = {}
    for name, call in calls.items():
        call()  # the connection is made (and its settings read) once
        counter.reset()
        call()
        cost[name] = (counter.statements, counter.round_trips)
    assert cost == dict.fromkeys(calls, (1, 1)), "(statements, round trips) of each call"
    assert q.cell(engine, cell_id).state == "provisioning"
    with pytest.raises(LookupError):
        q.set_cell_state(engine, cell_id + 1000, "done")


def test_a_connection_the_server_dropped_while_idle_is_replaced_before_use(pg_url: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    engine = open_store(pg_url)
    _, cell_id = _cell(engine)
    with engine.connect() as conn:  # the pool's most recently used connection is handed out next
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    admin = sa.create_engine(PG_URL)
    with admin.begin() as conn:
        assert conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
    admin.dispose()
    time.sleep(0.2)
    monkeypatch.setattr(connections, "IDLE_PING_S", 0.0)  # as if it had sat idle for long
    assert q.cell(engine, cell_id).key == "k"
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() != pid


def test_a_busy_connection_is_not_pinged(pg_url: str) -> None:
    engine = open_store(pg_url)
    _, cell_id = _cell(engine)
    q.cell(engine, cell_id)
    counter = count_dbapi(engine)
    q.cell(engine, cell_id)  # a new connection
    counter.reset()
    for _ in range(5):
        q.cell(engine, cell_id)
    assert counter.round_trips == 5


def test_a_read_on_sqlite_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = open_store(url)
    campaign_id, cell_id = _cell(engine)
    writer = sqlite3.connect(tmp_path / "store.db", isolation_level=None, timeout=0)
    writer.execute("BEGIN IMMEDIATE")  # another controller in the middle of a write
    try:
        started = time.monotonic()
        assert q.cell(engine, cell_id).key == "k"
        assert q.spent_usd(engine, campaign_id) == 0.0
        assert time.monotonic() - started < 15, "a read waited for the write lock (busy timeout: 30 s)"
    finally:
        writer.execute("ROLLBACK")
        writer.close()
