"""What one running cell costs the store does not grow with how often it is polled (issue 31 item 12).

No timing: the statements SQLAlchemy sends are counted (a ``before_cursor_execute`` listener). A
poll's event sync reads no attempt row (the driver's ``EventCursor`` knows where it stands), and a
stored batch is one conditional UPDATE … RETURNING and one bulk INSERT; a state change is one
UPDATE conditional on the lease; the budget watch of many cells reads the spend once per interval.
A cursor another reader overtook stores nothing twice and catches up. The payload package is copied
once per process, not per attempt."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchctl import payload
from benchctl.engine import payload_stage
from benchctl.engine.capacity import CapacityWait
from benchctl.engine.cell_runner import CellRunner
from benchctl.engine.cell_states import CellState
from benchctl.engine.event_sync import EventCursor, sync_events
from benchctl.store import leases as store_leases
from benchctl.store import queries as q
from benchctl.store.models import Attempt
from tests.fakes.memory_provider import MemoryProvider, Script
from tests.memory_campaign import memory_run, offer


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """The statements this thread sends inside the block (SQLite's ``BEGIN IMMEDIATE`` of a write not
    included): the lease's renewal thread may renew meanwhile on a slow machine, and is not the poll."""
    sent: list[str] = []
    caller = threading.get_ident()

    def listen(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        if not sql.startswith("BEGIN") and threading.get_ident() == caller:
            sent.append(" ".join(sql.split()))

    sa.event.listen(engine, "before_cursor_execute", listen)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", listen)


def _started(tmp_path: Path, steps: int = 8) -> tuple[Any, CellRunner, Attempt, Any, Any]:
    """A cell whose payload runs on a memory node: (run, runner, attempt, node, transport)."""
    provider = MemoryProvider([offer()], [Script(exit_code=None)])
    run = memory_run(tmp_path, provider, steps=steps)
    cell_id = run.cell().id or 0
    run.ctx.leases.take(cell_id)
    runner = CellRunner(run.ctx, cell_id)
    runner.transition(CellState.PROVISIONING)
    rented = runner._rent(set(), CapacityWait(run.ctx.capacity))
    assert rented.attempt is not None and rented.node is not None
    transport = provider.transport(rented.node)
    runner.driver._start_payload(rented.attempt, rented.node, transport)
    return run, runner, rented.attempt, provider.launched()[0], transport


def test_a_poll_reads_no_attempt_row_and_a_batch_is_two_statements(tmp_path: Path) -> None:
    run, _runner, attempt, _node, transport = _started(tmp_path)
    cursor = EventCursor()
    with statements(run.engine) as first:
        sync_events(run.engine, attempt, transport, cursor)
    assert sum(s.startswith("SELECT") and "FROM attempt" in s for s in first) == 1, "a new cursor reads the row"
    per_poll = []
    for _ in range(12):
        with statements(run.engine) as sent:
            sync_events(run.engine, attempt, transport, cursor)
        per_poll.append(sent)
    assert not [s for sent in per_poll for s in sent if s.startswith("SELECT")], "no read per poll"
    stored = [sent for sent in per_poll if sent]
    assert stored, "the payload wrote events meanwhile"
    for sent in stored:  # one batch: the offset and line count moved, the events inserted
        assert [s.split()[0] for s in sent] == ["UPDATE", "INSERT"], sent
    row = q.attempt_row(run.engine, attempt.id or 0)
    assert (cursor.offset, cursor.lines) == (row.events_offset, row.events_lines)
    lines = [e.line for e in q.attempt_events(run.engine, attempt.id or 0)]
    assert lines == list(range(len(lines))) and len(lines) == row.events_lines


def test_a_cursor_another_reader_overtook_stores_nothing_twice_and_catches_up(tmp_path: Path) -> None:
    run, _runner, attempt, node, transport = _started(tmp_path)
    ours, theirs = EventCursor(), EventCursor()
    sync_events(run.engine, attempt, transport, ours)
    for _ in range(3):
        sync_events(run.engine, attempt, transport, theirs)  # a controller that took the cell over
    for _ in range(4):
        sync_events(run.engine, attempt, transport, ours)
    row = q.attempt_row(run.engine, attempt.id or 0)
    events = q.attempt_events(run.engine, attempt.id or 0)
    assert [e.line for e in events] == list(range(row.events_lines)), "every line stored once, in order"
    assert len({(e.t, e.kind, e.phase, e.data_json) for e in events}) == len(events), "no event stored twice"
    assert (ours.offset, ours.lines) == (row.events_offset, row.events_lines)
    assert row.events_offset == len(node.events) and row.events_lines == node.events.count(b"\n")


def test_a_state_change_is_one_update_conditional_on_the_lease(tmp_path: Path) -> None:
    run, runner, _attempt, _node, _transport = _started(tmp_path)
    cell_id = runner.cell_id
    with statements(run.engine) as sent:
        runner.transition(CellState.RUNNING)
    assert len(sent) == 1 and sent[0].startswith("UPDATE cell SET state") and "lease_owner" in sent[0], sent
    assert q.cell(run.engine, cell_id).state == "running"
    store_leases.revoke_all(run.engine, run.ctx.campaign_id)  # `benchctl down`
    with statements(run.engine) as sent:
        runner.transition(CellState.COLLECTING)
    assert q.cell(run.engine, cell_id).state == "running", "a cell this controller lost is not written"
    assert runner.halted() is not None and run.ctx.leases.lost(cell_id)
    with statements(run.engine) as sent:
        runner.transition(CellState.DONE)
    assert sent == [], "nothing is sent for a cell known lost"


def test_the_budget_watch_of_many_cells_reads_the_spend_once_per_interval(tmp_path: Path) -> None:
    run, _runner, _attempt, _node, _transport = _started(tmp_path)
    with statements(run.engine) as sent:
        verdicts = {run.ctx.budget.exceeded(max_age_s=3600) for _ in range(50)}
    assert verdicts == {False} and len(sent) == 1, sent
    with statements(run.engine) as sent:
        run.ctx.budget.exceeded()
        run.ctx.budget.exceeded()
    assert len(sent) == 2, "without max_age_s every call reads the store"


def test_the_payload_is_copied_once_per_process_and_linked_into_each_stage(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(payload_stage, "_snapshot", None)
    copied: list[Path] = []
    real_copytree = shutil.copytree

    def copytree(src: Any, *args: Any, **kwargs: Any) -> Any:
        copied.append(Path(src))
        return real_copytree(src, *args, **kwargs)

    monkeypatch.setattr(shutil, "copytree", copytree)
    package = Path(payload.__file__).parent
    files = sorted(p.relative_to(package) for p in package.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    for attempt in ("a", "b", "c"):
        payload_stage.stage_payload(tmp_path / attempt)
    assert copied.count(package) == 1, "the package is copied once, not once per attempt"
    for rel in files:
        a, c = tmp_path / "a" / "payload" / rel, tmp_path / "c" / "payload" / rel
        assert a.read_bytes() == (package / rel).read_bytes() and os.path.samefile(a, c)
    assert not list((tmp_path / "b" / "payload").rglob("__pycache__"))


def test_taking_a_free_lease_is_one_update(tmp_path: Path) -> None:
    run = memory_run(tmp_path, MemoryProvider([offer()]))
    cell_id = run.cell().id or 0
    with statements(run.engine) as sent:
        assert store_leases.acquire(run.engine, cell_id, "ctl-a", 60.0) is None
    assert len(sent) == 1 and sent[0].startswith("UPDATE cell SET lease_owner"), sent
    with statements(run.engine) as sent:
        assert store_leases.acquire(run.engine, cell_id, "ctl-b", 60.0) == "ctl-a", "held: not taken"
    assert [s.split()[0] for s in sent] == ["UPDATE", "SELECT"], sent
    assert store_leases.acquire(run.engine, cell_id, "ctl-b", 60.0, is_dead=lambda owner: owner == "ctl-a") is None
    assert store_leases.acquire(run.engine, cell_id, "ctl-a", 60.0) == "ctl-b", "a dead holder's lease was taken over"
