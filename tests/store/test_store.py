"""The store on SQLite and on PostgreSQL: migrations equal the models, old databases upgrade, queries."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Engine
from sqlmodel import SQLModel

from benchctl.store import queries as q
from benchctl.store.database import StoreError, create_db_engine, open_store
from benchctl.store.migrations import HEAD, VERSION_TABLE, SchemaTooNew, current_version, upgrade
from benchctl.store.models import Artifact, Result


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = open_store(db_url)
    try:
        yield eng
    finally:
        eng.dispose()


def _cell(key: str, gpu: str = "cpu", count: int = 1) -> q.NewCell:
    return q.NewCell(key=key, provider="local", gpu=gpu, count=count, market="on-demand",
                     config_json=json.dumps({"key": key}))


def _campaign_with_cell(engine: Engine, name: str = "c1") -> tuple[int, int]:
    campaign_id, _ = q.upsert_campaign(engine, name, "{}", "/tmp/c.yaml", 10.0, [_cell("a")])
    (cell,) = q.cells(engine, campaign_id)
    assert cell.id is not None
    return campaign_id, cell.id


def _attempt(engine: Engine, cell_id: int, token: str, hourly: float = 2.0) -> int:
    attempt = q.new_attempt(engine, cell_id, token=token, provider="local", market="on-demand",
                            remote_dir=f"benchctl/a/{token}", hourly_usd=hourly, host="localhost")
    assert attempt.id is not None
    return attempt.id


# --- schema and migrations -------------------------------------------------------------------


def test_migrated_schema_equals_models(engine: Engine) -> None:
    with engine.connect() as conn:
        assert current_version(conn) == HEAD
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        diffs = compare_metadata(ctx, SQLModel.metadata)
    other = [d for d in diffs if not (isinstance(d, tuple) and d[0] == "remove_table" and d[1].name == VERSION_TABLE)]
    assert other == []
    assert len(diffs) == 1  # exactly the migrations table, which no model describes


def test_upgrade_from_v1_keeps_data_and_adds_v2_tables(db_url: str) -> None:
    old = create_db_engine(db_url)
    try:
        assert upgrade(old, target=1) == [1]
        with old.connect() as conn:
            assert current_version(conn) == 1
            tables = set(sa.inspect(conn).get_table_names())
        assert {"campaign", "cell", "attempt", "event"} <= tables
        assert "result" not in tables and "artifact" not in tables
        meta = sa.MetaData()
        meta.reflect(old, only=["campaign", "cell", "attempt", "event"])
        campaign, cell, attempt, event = (meta.tables[n] for n in ("campaign", "cell", "attempt", "event"))
        with old.begin() as conn:
            conn.execute(campaign.insert().values(id=1, name="old", spec_json="{}", source_path="/x.yaml",
                                                  budget_usd=50.0, created_at=100.0, updated_at=100.0))
            conn.execute(cell.insert().values(id=1, campaign_id=1, key="local/cpu/1", provider="local", gpu="cpu",
                                              count=1, market="spot", config_json="{}", state="running",
                                              reason=None, created_at=100.0, updated_at=100.0))
            conn.execute(attempt.insert().values(
                id=1, cell_id=1, number=1, token="tok-old", provider="local", node_json=None, hourly_usd=3.0,
                market="spot", host="h", open=False, outcome="done", detail=None, launched_at=1000.0,
                terminated_at=4600.0, cost_usd=3.0, remote_dir="benchctl/x/1", events_offset=42, events_lines=2))
            conn.execute(event.insert(), [
                {"id": 1, "attempt_id": 1, "cell_id": 1, "line": 0, "t": 1001.0, "kind": "phase_start",
                 "phase": "preflight", "data_json": "{}"},
                {"id": 2, "attempt_id": 1, "cell_id": 1, "line": 1, "t": 1002.0, "kind": "sample",
                 "phase": "profile", "data_json": json.dumps({"step": 0, "step_time_s": 0.5})},
            ])
    finally:
        old.dispose()

    engine = open_store(db_url)
    try:
        with engine.connect() as conn:
            assert current_version(conn) == HEAD
        (row,) = q.campaigns(engine)
        assert (row.id, row.name, row.budget_usd) == (1, "old", 50.0)
        assert row.uid == "", "a campaign made before v3 keeps its old node tag"
        (c,) = q.cells(engine, 1)
        assert (c.key, c.state, c.market) == ("local/cpu/1", "running", "spot")
        (a,) = q.attempts(engine, 1)
        assert (a.token, a.open, a.cost_usd, a.events_offset, a.events_lines) == ("tok-old", False, 3.0, 42, 2)
        evs = q.events(engine, 1)
        assert [(e.line, e.kind, e.phase) for e in evs] == [(0, "phase_start", "preflight"), (1, "sample", "profile")]
        assert json.loads(evs[1].data_json) == {"step": 0, "step_time_s": 0.5}
        assert q.spent_usd(engine, 1, now=99999.0) == pytest.approx(3.0)

        # the v2 tables work through the queries
        q.save_result(engine, Result(cell_id=1, step_time_ms=500.0, step_time_p10_ms=450.0, step_time_p90_ms=550.0,
                                     timed_steps=10, hourly_usd=3.0, market="spot", target_steps=7200,
                                     train_hours=1.0, cost_to_train_usd=3.0, computed_at=2000.0))
        q.add_artifact(engine, Artifact(attempt_id=1, cell_id=1, name="preflight.json",
                                        remote_path="benchctl/x/1/artifacts/preflight.json", bytes=12))
        ((result, rcell, rcampaign),) = q.results(engine)
        assert (result.step_time_ms, result.cost_to_train_usd, rcell.key, rcampaign.name) == (
            500.0, 3.0, "local/cpu/1", "old")
        assert q.results(engine, campaign_id=2) == []
        with engine.connect() as conn:
            names = conn.execute(sa.text("SELECT name, bytes FROM artifact WHERE cell_id = 1")).all()
        assert [tuple(n) for n in names] == [("preflight.json", 12)]
    finally:
        engine.dispose()


def test_upgrade_twice_applies_nothing_and_newer_schema_is_refused(db_url: str) -> None:
    engine = create_db_engine(db_url)
    try:
        assert upgrade(engine) == list(range(1, HEAD + 1))
        assert upgrade(engine) == []
        with engine.connect() as conn:
            versions = conn.execute(sa.text(f"SELECT version FROM {VERSION_TABLE} ORDER BY version")).scalars().all()
        assert versions == list(range(1, HEAD + 1))
        with engine.begin() as conn:
            conn.execute(sa.text(f"INSERT INTO {VERSION_TABLE} (version, name, applied_at) VALUES (:v, 'future', 0)"),
                         {"v": HEAD + 1})
        with pytest.raises(SchemaTooNew, match=f"version {HEAD + 1}"):
            upgrade(engine)
    finally:
        engine.dispose()
    with pytest.raises(SchemaTooNew):
        open_store(db_url).dispose()


# --- queries ---------------------------------------------------------------------------------


def test_upsert_campaign_is_idempotent(engine: Engine) -> None:
    cid, added = q.upsert_campaign(engine, "camp", '{"v": 1}', "/a.yaml", 10.0, [_cell("a"), _cell("b")])
    assert added == ["a", "b"]
    cid2, added2 = q.upsert_campaign(engine, "camp", '{"v": 1}', "/a.yaml", 10.0, [_cell("a"), _cell("b")])
    assert (cid2, added2) == (cid, [])
    cid3, added3 = q.upsert_campaign(engine, "camp", '{"v": 2}', "/b.yaml", 20.0,
                                     [_cell("a"), _cell("b"), _cell("c", count=2)])
    assert (cid3, added3) == (cid, ["c"])
    assert [(c.key, c.count, c.state) for c in q.cells(engine, cid)] == [
        ("a", 1, "pending"), ("b", 1, "pending"), ("c", 2, "pending")]
    (camp,) = q.campaigns(engine)
    assert (camp.spec_json, camp.source_path, camp.budget_usd) == ('{"v": 2}', "/b.yaml", 20.0)
    assert q.campaigns(engine, name="nope") == []


def test_set_cell_state(engine: Engine) -> None:
    _, cell_id = _campaign_with_cell(engine)
    q.set_cell_state(engine, cell_id, "failed", "retries exhausted")
    row = q.cell(engine, cell_id)
    assert (row.state, row.reason) == ("failed", "retries exhausted")
    q.set_cell_state(engine, cell_id, "provisioning")
    row = q.cell(engine, cell_id)
    assert (row.state, row.reason) == ("provisioning", None)
    with pytest.raises(LookupError):
        q.set_cell_state(engine, 9999, "done")


def test_new_attempt_numbers_per_cell(engine: Engine) -> None:
    cid, cell_id = _campaign_with_cell(engine)
    _, added = q.upsert_campaign(engine, "c1", "{}", "/tmp/c.yaml", 10.0, [_cell("a"), _cell("b")])
    assert added == ["b"]
    other_cell = q.cells(engine, cid)[1].id
    assert other_cell is not None
    first = q.new_attempt(engine, cell_id, "t1", "local", "spot", "d/1", 1.0, "h")
    second = q.new_attempt(engine, cell_id, "t2", "local", "spot", "d/2", 1.0, "h")
    other = q.new_attempt(engine, other_cell, "t3", "local", "spot", "d/3", 1.0, "h")
    third = q.new_attempt(engine, cell_id, "t4", "local", "spot", "d/4", 1.0, "h")
    assert (first.number, second.number, third.number, other.number) == (1, 2, 3, 1)
    assert first.open is True and first.launched_at is not None
    assert (first.events_offset, first.events_lines) == (0, 0)
    assert [a.token for a in q.attempts(engine, cell_id)] == ["t1", "t2", "t4"]


def test_record_events_numbers_lines_and_advances_offset(engine: Engine) -> None:
    _, cell_id = _campaign_with_cell(engine)
    attempt_id = _attempt(engine, cell_id, "tok")
    stored = q.record_events(engine, attempt_id, [
        {"t": 1.0, "kind": "phase_start", "phase": "preflight"},
        {"t": 2.0, "kind": "sample", "phase": "preflight", "name": "python", "status": "pass"},
    ], read_from=0, new_offset=100)
    assert stored == 2
    (a,) = q.attempts(engine, cell_id)
    assert (a.events_offset, a.events_lines) == (100, 2)
    # a second reader that read from an offset already consumed stores nothing
    assert q.record_events(engine, attempt_id, [{"t": 1.0, "kind": "phase_start"}], read_from=0, new_offset=100) is None
    assert q.record_events(engine, attempt_id, [{"t": 3.0, "kind": "done", "exit_code": 0}], read_from=100,
                           new_offset=130) == 1
    (a,) = q.attempts(engine, cell_id)
    assert (a.events_offset, a.events_lines) == (130, 3)
    evs = q.events(engine, cell_id)
    assert [(e.line, e.t, e.kind, e.phase) for e in evs] == [
        (0, 1.0, "phase_start", "preflight"), (1, 2.0, "sample", "preflight"), (2, 3.0, "done", None)]
    assert json.loads(evs[1].data_json) == {"name": "python", "status": "pass"}
    assert json.loads(evs[2].data_json) == {"exit_code": 0}
    assert [e.line for e in q.events(engine, cell_id, kind="sample")] == [1]
    assert [e.line for e in q.events(engine, cell_id, phase="preflight")] == [0, 1]

    # atomic: a batch that fails part-way stores nothing and leaves the offset where it was
    with pytest.raises(ValueError):
        q.record_events(engine, attempt_id, [{"t": 4.0, "kind": "sample"}, {"t": "not-a-time", "kind": "x"}],
                        read_from=130, new_offset=999)
    (a,) = q.attempts(engine, cell_id)
    assert (a.events_offset, a.events_lines) == (130, 3)
    assert len(q.events(engine, cell_id)) == 3


def test_close_attempt_costs_and_is_idempotent(engine: Engine) -> None:
    _, cell_id = _campaign_with_cell(engine)
    attempt_id = _attempt(engine, cell_id, "tok", hourly=2.5)
    (a,) = q.attempts(engine, cell_id)
    assert a.launched_at is not None
    closed = q.close_attempt(engine, attempt_id, "done", "ok", terminated_at=a.launched_at + 7200)
    assert closed.open is False
    assert (closed.outcome, closed.detail) == ("done", "ok")
    assert closed.cost_usd == pytest.approx(5.0)
    again = q.close_attempt(engine, attempt_id, "preempted", "late", terminated_at=a.launched_at + 36000)
    assert (again.outcome, again.detail, again.terminated_at) == ("done", "ok", a.launched_at + 7200)
    assert again.cost_usd == pytest.approx(5.0)
    (stored,) = q.attempts(engine, cell_id)
    assert (stored.open, stored.outcome) == (False, "done")
    assert stored.cost_usd == pytest.approx(5.0)


def test_spent_usd_sums_closed_and_running(engine: Engine) -> None:
    campaign_id, cell_id = _campaign_with_cell(engine)
    closed_id = _attempt(engine, cell_id, "t1", hourly=2.0)
    (closed,) = q.attempts(engine, cell_id)
    assert closed.launched_at is not None
    q.close_attempt(engine, closed_id, "preempted", terminated_at=closed.launched_at + 3600)  # $2.00
    _attempt(engine, cell_id, "t2", hourly=4.0)
    running = q.attempts(engine, cell_id)[1]
    assert running.launched_at is not None
    assert q.spent_usd(engine, campaign_id, now=running.launched_at + 1800) == pytest.approx(2.0 + 2.0)
    assert q.spent_usd(engine, campaign_id, now=running.launched_at + 3600) == pytest.approx(2.0 + 4.0)
    # another campaign's attempts do not count
    other_campaign, other_cell = _campaign_with_cell(engine, name="c2")
    _attempt(engine, other_cell, "t3", hourly=100.0)
    assert q.spent_usd(engine, campaign_id, now=running.launched_at + 3600) == pytest.approx(6.0)
    assert q.spent_usd(engine, other_campaign, now=running.launched_at - 3600) == pytest.approx(0.0)


# --- errors and SQLite settings ---------------------------------------------------------------


def test_bad_url_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot use database URL"):
        create_db_engine("nosuchdialect://x")
    with pytest.raises(StoreError, match="cannot use database URL"):
        open_store("nosuchdialect://x")


def test_unreachable_postgres_is_a_store_error() -> None:
    with pytest.raises(StoreError, match=r"Check the URL") as info:
        open_store("postgresql+psycopg://postgres@127.0.0.1:1/test")
    assert "cannot open the database" in str(info.value)


def test_sqlite_is_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "benchctl.db"
    engine = open_store(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(sa.text("PRAGMA foreign_keys")).scalar() == 1
    finally:
        engine.dispose()
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persisted in the file
    finally:
        raw.close()


def test_new_campaigns_get_distinct_uids(engine: Engine) -> None:
    first, _ = q.upsert_campaign(engine, "a", "{}", "/a.yaml", 1.0, [])
    _second, _ = q.upsert_campaign(engine, "b", "{}", "/b.yaml", 1.0, [])
    again, _ = q.upsert_campaign(engine, "a", "{}", "/a.yaml", 1.0, [])
    uids = {c.name: c.uid for c in q.campaigns(engine)}
    assert first == again and len(uids["a"]) == 12 and uids["a"] != uids["b"]


def test_attach_node_takes_the_nodes_billed_price_and_host(engine: Engine) -> None:
    from benchctl.provisioners.base import Node, Offer

    _, cell_id = _campaign_with_cell(engine)
    billed, unknown = _attempt(engine, cell_id, "tok-b", hourly=2.0), _attempt(engine, cell_id, "tok-u", hourly=2.0)
    offer = Offer(provider="aws", offer_id="o", gpu="cpu", count=1, vcpus=2, region="r", hourly_usd=2.0,
                  market="spot", host="offer-host")
    q.attach_node(engine, billed, Node(provider="aws", node_id="i-1", token="tok-b", campaign_tag="c", offer=offer,
                                       hourly_usd=2.75, host="i-1").to_dict())
    q.attach_node(engine, unknown, Node(provider="aws", node_id="i-2", token="tok-u", campaign_tag="c",
                                        offer=offer).to_dict())
    by_token = {a.token: a for a in q.attempts(engine, cell_id)}
    assert (by_token["tok-b"].hourly_usd, by_token["tok-b"].host) == (2.75, "i-1")
    assert (by_token["tok-u"].hourly_usd, by_token["tok-u"].host) == (2.0, "localhost"), "None keeps the offer's"
