"""A node that floods ``events.jsonl`` (issue 31, items 1 and 3): what the controller stores per
attempt is bounded (malformed lines, events), one summary event counts the rest, every write is a
short bulk transaction, a store that refuses the events ends the attempt (never leaves the cell
``running``), and ``logs`` streams the attempt's events and shows any stored record, however odd.

The caps are made small here (``monkeypatch``) so that a flood costs milliseconds; the figures for
real floods (1 M lines) are in docs/measurements/2026-11-26-event-flood.md
(``scripts/bench_event_flood.py``). The tests assert structure, never speed or memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from benchctl.engine import event_sync
from benchctl.engine.scheduler import run_campaign
from benchctl.store import queries as q
from benchctl.store.database import open_store
from tests.conftest import cli_here
from tests.fakes.memory_provider import MemoryProvider, Script, payload_events
from tests.memory_campaign import KEY, memory_run, offer

JUNK = {"t": 1.0, "kind": "no-such-kind"}
"""A line that is JSON but no event: malformed, as ``x`` or ``[1]`` would be."""


@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_sync, "MAX_LINES_PER_SYNC", 300, raising=False)
    monkeypatch.setattr(event_sync, "BATCH_LINES", 50, raising=False)
    monkeypatch.setattr(event_sync, "MAX_MALFORMED", 20, raising=False)
    monkeypatch.setattr(event_sync, "MAX_EVENTS", 200, raising=False)
    monkeypatch.setattr(event_sync, "MAX_MARKERS", 10, raising=False)


def _flooded(flood: list[dict[str, Any]]) -> Any:
    """The healthy payload's events with ``flood`` written in one go after the profile started."""
    def script(job: dict[str, Any]) -> list[list[dict[str, Any]]]:
        batches = payload_events(job)
        at = next(i for i, (e,) in enumerate(batches) if e["kind"] == "phase_start" and e["phase"] == "profile")
        return [*batches[:at + 1], flood, *batches[at + 1:]]
    return script


def _inserts(engine: sa.Engine) -> list[int]:
    """Rows per INSERT INTO event statement executed on ``engine`` from now on."""
    rows: list[int] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def count(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        if statement.lstrip().upper().startswith("INSERT INTO EVENT"):
            rows.append(len(parameters) if executemany else 1)

    return rows


def test_a_flood_of_junk_lines_keeps_a_bounded_number_in_bulk_writes_and_the_cell_finishes(
        tmp_path: Path, small_caps: None, db_url: str) -> None:
    provider = MemoryProvider([offer()], [Script(events=_flooded([JUNK] * 1000))])
    run = memory_run(tmp_path, provider, db=db_url)
    inserts = _inserts(run.engine)
    assert run_campaign(run.ctx, concurrency=1).states == {KEY: "done"}
    (attempt,) = run.attempts()
    stored = q.attempt_events(run.engine, attempt.id or 0)
    honest = len(provider.launched()[0].events.splitlines()) - 1000
    malformed = [e for e in stored if e.kind == "error" and json.loads(e.data_json).get("malformed_event")]
    assert len(malformed) == 20, "the first MAX_MALFORMED malformed lines are kept, quoted"
    (summary,) = [e for e in stored if e.kind == q.DROPPED_KIND]
    assert json.loads(summary.data_json)["message"] == "980 more malformed lines dropped"
    assert len(stored) == honest + 20 + 1, "the honest events around the flood are all stored"
    assert len(q.results(run.engine)) == 1, "the profile after the flood was measured and priced"
    assert inserts and max(inserts) <= 50, "no write transaction stores more than BATCH_LINES rows"
    assert len(inserts) <= 1000 // 50 + honest, "events are inserted in bulk, not one statement per line"
    assert attempt.events_lines == len(stored)


def test_a_flood_of_valid_events_is_capped_per_attempt_but_the_phase_markers_are_kept(
        tmp_path: Path, small_caps: None) -> None:
    flood = [{"t": 1.0, "kind": "error", "message": f"noise {i}"} for i in range(2000)]
    provider = MemoryProvider([offer()], [Script(events=_flooded(flood))])
    run = memory_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).states == {KEY: "done"}
    (attempt,) = run.attempts()
    stored = q.attempt_events(run.engine, attempt.id or 0)
    assert len(stored) <= 200 + 10 + 1
    (summary,) = [e for e in stored if e.kind == q.DROPPED_KIND]
    assert "more events past the attempt's cap" in json.loads(summary.data_json)["message"]
    kinds = [(e.kind, e.phase) for e in stored]
    assert ("phase_end", "profile") in kinds and ("done", None) in kinds, "markers after the cap are kept"


def test_long_valid_lines_are_capped_by_bytes_per_attempt(tmp_path: Path, small_caps: None,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_sync, "MAX_EVENT_BYTES", 20_000, raising=False)
    flood = [{"t": 1.0, "kind": "error", "message": "x" * 1000} for _ in range(150)]  # under MAX_EVENTS, 150 KB
    provider = MemoryProvider([offer()], [Script(events=_flooded(flood))])
    run = memory_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).states == {KEY: "done"}
    (attempt,) = run.attempts()
    stored = q.attempt_events(run.engine, attempt.id or 0)
    assert sum(len(e.data_json) for e in stored) <= 20_000 + 1000
    assert sum(e.kind == "error" for e in stored) < 20
    (summary,) = [e for e in stored if e.kind == q.DROPPED_KIND]
    assert "more events past the attempt's cap" in json.loads(summary.data_json)["message"]


def test_a_backlog_past_one_sync_is_read_to_its_end_when_the_attempt_ends(tmp_path: Path, small_caps: None) -> None:
    """The payload wrote a flood and its results, then exited: the last read drains the backlog (up to
    ``DRAIN_SYNCS`` syncs of ``MAX_LINES_PER_SYNC`` lines) so the samples after the flood are kept."""
    def script(job: dict[str, Any]) -> list[list[dict[str, Any]]]:
        return [[JUNK] * 1000 + [e for (e,) in payload_events(job)]]  # everything in one poll
    provider = MemoryProvider([offer()], [Script(events=script)])
    run = memory_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).states == {KEY: "done"}
    (result, _, _), = q.results(run.engine)
    assert result.timed_steps == 3
    assert not any("stopped reading" in line for line in run.logged)


def test_the_last_read_of_a_flood_is_bounded_and_says_so(tmp_path: Path, small_caps: None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_sync, "DRAIN_SYNCS", 2, raising=False)
    provider = MemoryProvider([offer()], [Script(events=lambda job: [[JUNK] * 5000])])
    run = memory_run(tmp_path, provider)
    run_campaign(run.ctx, concurrency=1)
    (attempt,) = run.attempts()
    assert not attempt.open and attempt.events_offset < len(provider.launched()[0].events)
    assert any("stopped reading its events after 2 reads" in line for line in run.logged), run.logged


def test_a_store_that_refuses_the_events_ends_the_attempt_and_the_cell_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = q.append_events
    calls = {"n": 0}

    def locked(engine: Any, attempt_id: int, *args: Any, **kwargs: Any) -> Any:
        if attempt_id == 1:  # the first attempt: its database stays locked however often it is retried
            calls["n"] += 1
            raise OperationalError("INSERT INTO event ...", {}, Exception("database is locked"))
        return real(engine, attempt_id, *args, **kwargs)

    monkeypatch.setattr(q, "append_events", locked)
    provider = MemoryProvider([offer()])
    run = memory_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).states == {KEY: "done"}
    first, second = run.attempts()
    assert (first.outcome, first.open, second.outcome) == ("error", False, "done")
    assert "storing the node's events failed: Exception: database is locked" in (first.detail or "")
    assert "[SQL" not in (first.detail or ""), "the detail names the error, not the statement and its rows"
    assert all(node.terminate_calls for node in provider.launched())


def test_a_busy_database_is_retried_a_bounded_number_of_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    cells = [q.NewCell("k", "local", "cpu", 1, "od", "{}")]
    campaign_id, _ = q.upsert_campaign(engine, "c", "{}", "c.yaml", 5.0, cells)
    (cell,) = q.cells(engine, campaign_id)
    attempt = q.new_attempt(engine, cell.id or 0, "tok", "local", "od", "r", 1.0, "h")
    monkeypatch.setattr(q.time, "sleep", lambda s: None)
    busy = {"left": 2}

    @sa.event.listens_for(engine, "before_cursor_execute")
    def lock(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement.startswith("INSERT INTO event") and busy["left"]:
            busy["left"] -= 1
            raise sa.exc.OperationalError(statement, {}, Exception("database is locked"))

    event = {"t": 1.0, "kind": "phase_start", "phase": "profile"}
    assert q.record_events(engine, attempt.id or 0, [event], 0, 10) == 1, "stored on the third try"
    assert q.attempt_row(engine, attempt.id or 0).events_offset == 10
    busy["left"] = q.BUSY_TRIES
    with pytest.raises(OperationalError):
        q.record_events(engine, attempt.id or 0, [event], 10, 20)
    assert len(q.attempt_events(engine, attempt.id or 0)) == 1, "a refused batch stores nothing"
    assert q.attempt_row(engine, attempt.id or 0).events_offset == 10, "nor moves the offset"


def test_a_workers_flood_is_read_line_bounded_and_without_its_malformed_lines() -> None:
    data = b"x\n" * 50 + json.dumps({"t": 1.0, "kind": "error", "message": "bad", "bad_node": True}).encode() + b"\n"
    assert event_sync.valid_events(data, max_lines=100) == [{"t": 1.0, "kind": "error", "message": "bad",
                                                             "bad_node": True}]
    assert event_sync.valid_events(data, max_lines=50) == [], "lines past max_lines are not read"


# -- logs ------------------------------------------------------------------------------------

def _attempt_store(home: Path) -> tuple[sa.Engine, int]:
    home.mkdir(parents=True, exist_ok=True)
    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    campaign_id, _ = q.upsert_campaign(engine, "c1", "{}", "c1.yaml", 5.0,
                                       [q.NewCell("local:cpux1:on-demand", "local", "cpu", 1, "on-demand", "{}")])
    (cell,) = q.cells(engine, campaign_id)
    attempt = q.new_attempt(engine, cell.id or 0, "tok", "local", "on-demand", "r/{number}", 0.5, "node-a")
    assert attempt.id is not None
    return engine, attempt.id


def test_logs_of_a_flooded_attempt_streams_its_events_in_chunks_and_prints_the_summary(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, attempt_id = _attempt_store(home)
    events = [{"t": 1.0, "kind": "sample", "phase": "command", "i": i} for i in range(2500)]
    q.record_events(engine, attempt_id, events, 0, 100, dropped={"malformed lines": 999_900})
    reads: list[int] = []
    real = q.attempt_events

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows = real(*args, **kwargs)
        reads.append(len(rows))
        return rows

    monkeypatch.setattr(q, "attempt_events", counted)
    out = cli_here("logs", "local:cpux1:on-demand", home=home)
    assert out.returncode == 0, out.stderr
    header, *shown = out.stdout.split("events of attempt 1:\n")[1].splitlines()
    assert header.split() == ["time", "kind", "phase", "summary"]
    assert len(shown) == 2501 and "i=2499" in shown[2499]
    assert shown[2500].endswith("dropped      -            999900 more malformed lines dropped")
    assert reads and max(reads) <= 1000, "the events are read in chunks, never all at once"


NOT_SHOWN = "  line 1: stored event not shown ("


@pytest.mark.parametrize(("t", "data_json", "says"), [
    (1e308, '{"message": "far future"}', NOT_SHOWN + "OverflowError"),
    (-1e308, "{}", NOT_SHOWN + "OverflowError"),
    (1.0, '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", NOT_SHOWN + "RecursionError"),
    # no JSON to Python: shown as text
    (1.0, '{"pid": ' + "9" * 5000 + "}", '  00:00:01  error        -            {"pid": 9999'),
])
def test_logs_shows_a_stored_record_it_cannot_render_as_one_line_naming_it(
        home: Path, t: float, data_json: str, says: str) -> None:
    engine, attempt_id = _attempt_store(home)
    q.record_events(engine, attempt_id, [{"t": 1.0, "kind": "phase_start", "phase": "command"}], 0, 10)
    with engine.begin() as conn:  # a record no sync stores (a damaged or edited store, another version)
        conn.execute(sa.text("INSERT INTO event (attempt_id, cell_id, line, t, kind, phase, data_json) "
                             "VALUES (:a, 1, 1, :t, 'error', NULL, :d)"), {"a": attempt_id, "t": t, "d": data_json})
        conn.execute(sa.text("UPDATE attempt SET events_lines = 2 WHERE id = :a"), {"a": attempt_id})
    q.record_events(engine, attempt_id, [{"t": 2.0, "kind": "done", "exit_code": 0}], 10, 20)
    out = cli_here("logs", "local:cpux1:on-demand", home=home)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    header, *shown = out.stdout.split("events of attempt 1:\n")[1].splitlines()
    assert header.split() == ["time", "kind", "phase", "summary"]
    assert len(shown) == 3 and "phase_start  command" in shown[0] and "done" in shown[2]
    assert shown[1].startswith(says)
    assert len(shown[1]) < 300
