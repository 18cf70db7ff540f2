"""Reads and writes of the store. Each write function commits its own transaction.

Functions take an Engine and plain values; they know nothing of the engine's state machine
(the controller checks transitions before calling ``set_cell_state``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, case, col, func, select, update

from benchctl.store.connections import autocommit, reader
from benchctl.store.models import Artifact, Attempt, Campaign, Cell, Event, Result

T = TypeVar("T")


@dataclass(frozen=True)
class NewCell:
    key: str
    provider: str
    gpu: str
    count: int
    market: str
    config_json: str


def upsert_campaign(engine: Engine, name: str, spec_json: str, source_path: str, budget_usd: float,
                    cells: Sequence[NewCell]) -> tuple[int, list[str]]:
    """Create the campaign or update its spec; add cells not yet known. Returns (id, keys added)."""
    now = time.time()
    with Session(engine) as s:
        campaign = s.exec(select(Campaign).where(Campaign.name == name)).first()
        if campaign is None:
            campaign = Campaign(name=name, uid=uuid.uuid4().hex[:12], spec_json=spec_json, source_path=source_path,
                                budget_usd=budget_usd, created_at=now, updated_at=now)
            s.add(campaign)
            s.flush()
        else:
            campaign.spec_json, campaign.source_path, campaign.budget_usd = spec_json, source_path, budget_usd
            campaign.updated_at = now
        assert campaign.id is not None
        known = {c.key: c for c in s.exec(select(Cell).where(Cell.campaign_id == campaign.id))}
        added = []
        for cell in cells:
            if cell.key in known:
                known[cell.key].config_json = cell.config_json
                continue
            s.add(Cell(campaign_id=campaign.id, key=cell.key, provider=cell.provider, gpu=cell.gpu,
                       count=cell.count, market=cell.market, config_json=cell.config_json, state="pending",
                       created_at=now, updated_at=now))
            added.append(cell.key)
        s.commit()
        return campaign.id, added


def campaigns(engine: Engine, name: str | None = None) -> list[Campaign]:
    with Session(reader(engine)) as s:
        query = select(Campaign).order_by(col(Campaign.created_at))
        if name is not None:
            query = query.where(Campaign.name == name)
        return list(s.exec(query))


def cells(engine: Engine, campaign_id: int) -> list[Cell]:
    with Session(reader(engine)) as s:
        return list(s.exec(select(Cell).where(Cell.campaign_id == campaign_id).order_by(col(Cell.id))))


def cell(engine: Engine, cell_id: int) -> Cell:
    with Session(reader(engine)) as s:
        found = s.get(Cell, cell_id)
        if found is None:
            raise LookupError(f"no cell {cell_id}")
        return found


def set_cell_state(engine: Engine, cell_id: int, state: str, reason: str | None = None) -> None:
    """One UPDATE (one round trip on PostgreSQL: ``connections.autocommit``)."""
    with autocommit(engine).begin() as conn:
        changed = conn.execute(update(Cell).where(col(Cell.id) == cell_id)
                               .values(state=state, reason=reason, updated_at=time.time())).rowcount
    if changed != 1:
        raise LookupError(f"no cell {cell_id}")


def new_attempt(engine: Engine, cell_id: int, token: str, provider: str, market: str, remote_dir: str,
                hourly_usd: float, host: str) -> Attempt:
    """The Attempt row (``add_attempt``) in a transaction of its own, committed."""
    with Session(engine) as s:
        attempt = add_attempt(s, cell_id, token, provider, market, remote_dir, hourly_usd, host)
        s.commit()
        s.refresh(attempt)
        return attempt


def add_attempt(s: Session, cell_id: int, token: str, provider: str, market: str, remote_dir: str,
                hourly_usd: float, host: str) -> Attempt:
    """The Attempt row, written (flushed) in ``s``, to be committed before the provider is asked for
    the node; ``launched_at`` = now. ``{number}`` in ``remote_dir`` becomes the attempt's number
    (1, 2, … per cell)."""
    number = (s.exec(select(func.count()).select_from(Attempt).where(Attempt.cell_id == cell_id)).one()) + 1
    attempt = Attempt(cell_id=cell_id, number=number, token=token, provider=provider, market=market,
                      remote_dir=remote_dir.replace("{number}", str(number)), hourly_usd=hourly_usd, host=host,
                      launched_at=time.time())
    s.add(attempt)
    s.flush()
    return attempt


@contextmanager
def campaign_admission(engine: Engine, campaign_id: int) -> Iterator[Session]:
    """A write transaction holding the campaign's admission lock until it ends: one controller
    (process) at a time reads the campaign's spend (``campaign_spend(…, session=)``) and writes an
    Attempt row (``add_attempt``) in it, so two controllers never both take the last dollars.
    PostgreSQL (and any other server): the campaign's row locked ``FOR UPDATE``, so another
    campaign's admissions do not wait, and the statements after it read what the previous holder
    committed (READ COMMITTED: each statement its own snapshot). SQLite: ``BEGIN IMMEDIATE``, the
    file's one write lock (every write transaction of the store takes it at BEGIN:
    ``database._sqlite_begin``), so the spend read inside it is the newest. Commits when the block
    ends, rolls back on an error; objects stay loaded after the commit. Its cost does not depend on
    the campaign's size: one lock statement on a server, none on SQLite."""
    with Session(engine, expire_on_commit=False) as s:
        if engine.dialect.name == "sqlite":
            s.connection()  # BEGIN IMMEDIATE now, before the spend is read
        else:
            s.execute(sa.select(col(Campaign.id)).where(col(Campaign.id) == campaign_id).with_for_update())
        yield s
        s.commit()


def attach_node(engine: Engine, attempt_id: int, node: dict[str, Any], hourly_usd: float | None = None) -> None:
    """Record the node an attempt got (``Node.to_dict()``, a cluster's node 0 with its peers); its
    billed price and host replace the offer's when known: ``hourly_usd`` (that of every node of
    the attempt), else the node's ``hourly_usd``, and the node's ``host``."""
    with Session(engine) as s:
        attempt = s.get(Attempt, attempt_id)
        assert attempt is not None
        attempt.node_json = json.dumps(node, sort_keys=True)
        billed = hourly_usd if hourly_usd is not None else node.get("hourly_usd")
        if billed is not None:
            attempt.hourly_usd = float(billed)
        if node.get("host"):
            attempt.host = str(node["host"])
        s.commit()


def close_attempt(engine: Engine, attempt_id: int, outcome: str, detail: str | None = None,
                  terminated_at: float | None = None) -> Attempt:
    """Close an open attempt with its cost = hourly price × (terminated_at − launched_at). Idempotent."""
    with Session(engine) as s:
        attempt = s.get(Attempt, attempt_id)
        assert attempt is not None
        if attempt.open:
            attempt.open = False
            attempt.outcome, attempt.detail = outcome, detail
            attempt.terminated_at = terminated_at if terminated_at is not None else time.time()
            attempt.cost_usd = attempt_cost(attempt, attempt.terminated_at)
            s.commit()
            s.refresh(attempt)
        return attempt


def attempt_cost(attempt: Attempt, until: float) -> float:
    return running_cost(attempt.hourly_usd, attempt.launched_at, until)


def running_cost(hourly_usd: float | None, launched_at: float | None, until: float) -> float:
    """What an attempt at ``hourly_usd`` launched at ``launched_at`` costs up to ``until`` (0: either unknown)."""
    if launched_at is None or hourly_usd is None:
        return 0.0
    return max(0.0, until - launched_at) / 3600.0 * hourly_usd


@dataclass(frozen=True)
class CampaignSpend:
    """A campaign's attempts summed by the database: what ended, per outcome, and each attempt still open."""

    closed: dict[str, float]
    """Outcome (``unknown`` for none) → the cost of the closed attempts that ended so."""
    open: list[tuple[float | None, float | None]]
    """``(hourly_usd, launched_at)`` of every open attempt."""

    def running_usd(self, now: float) -> float:
        """What the open attempts have cost up to ``now``."""
        return sum(running_cost(hourly, launched, now) for hourly, launched in self.open)


def campaign_spend(engine: Engine, campaign_id: int, session: Session | None = None) -> CampaignSpend:
    """The campaign's spend in one statement (one snapshot): closed attempts summed per outcome in
    the database, open ones one row each. It returns as many rows at 10,000 closed attempts as at 10:
    the budget reads it on every status poll of every running cell. ``session``: read in that
    session's transaction (``campaign_admission``'s), else in a read of its own."""
    is_open = col(Attempt.open)
    query = (sa.select(is_open, col(Attempt.outcome), func.sum(col(Attempt.cost_usd)),
                       func.max(col(Attempt.hourly_usd)), func.max(col(Attempt.launched_at)))
             .join(Cell, col(Attempt.cell_id) == col(Cell.id)).where(col(Cell.campaign_id) == campaign_id)
             .group_by(is_open, col(Attempt.outcome), case((is_open, col(Attempt.id))))  # an open attempt: its own row
             .order_by(col(Attempt.outcome)))
    if session is not None:
        return _summed(session.execute(query))
    with Session(reader(engine)) as s:
        return _summed(s.execute(query))


def _summed(rows: Iterable[Any]) -> CampaignSpend:
    closed: dict[str, float] = {}
    running: list[tuple[float | None, float | None]] = []
    for was_open, outcome, cost, hourly, launched in rows:
        if was_open:
            running.append((hourly, launched))
        else:
            key = outcome or "unknown"
            closed[key] = closed.get(key, 0.0) + (cost or 0.0)
    return CampaignSpend(closed, running)


def spent_by_outcome(engine: Engine, campaign_id: int, now: float | None = None) -> dict[str, float]:
    """Money spent per attempt outcome (``open`` for attempts still running)."""
    now = now if now is not None else time.time()
    spend = campaign_spend(engine, campaign_id)
    return {**spend.closed, "open": spend.running_usd(now)} if spend.open else dict(spend.closed)


def attempt_spent(attempt: Attempt, now: float) -> float:
    """What an attempt cost: its closed cost, or its running cost up to ``now`` while open."""
    return attempt_cost(attempt, now) if attempt.open else (attempt.cost_usd or 0.0)


def campaign_attempts(engine: Engine, campaign_id: int) -> list[Attempt]:
    """Every attempt of every cell of the campaign."""
    with Session(reader(engine)) as s:
        return list(s.exec(select(Attempt).join(Cell, col(Attempt.cell_id) == col(Cell.id))
                           .where(Cell.campaign_id == campaign_id).order_by(col(Attempt.id))))


@dataclass(frozen=True)
class EndedAttempt:
    """What is read of an attempt that ended with a given outcome (``attempts_ended``)."""

    id: int
    host: str | None
    node_json: str | None
    detail: str | None


def attempts_ended(engine: Engine, campaign_id: int, outcome: str) -> list[EndedAttempt]:
    """The campaign's attempts that ended ``outcome``, oldest first: only their rows, only the columns read."""
    query = (select(col(Attempt.id), col(Attempt.host), col(Attempt.node_json), col(Attempt.detail))
             .join(Cell, col(Attempt.cell_id) == col(Cell.id)).where(Cell.campaign_id == campaign_id)
             .where(col(Attempt.outcome) == outcome).order_by(col(Attempt.id)))
    with Session(reader(engine)) as s:
        return [EndedAttempt(attempt_id or 0, host, node_json, detail) for attempt_id, host, node_json, detail
                in s.exec(query)]


def attempt_errors(engine: Engine, attempt_ids: Sequence[int]) -> dict[int, list[str]]:
    """Attempt id → the ``data_json`` of its ``error`` events, in line order."""
    found: dict[int, list[str]] = {attempt_id: [] for attempt_id in attempt_ids}
    if not found:
        return found
    query = (select(col(Event.attempt_id), col(Event.data_json)).where(col(Event.attempt_id).in_(list(found)))
             .where(Event.kind == "error").order_by(col(Event.attempt_id), col(Event.line)))
    with Session(reader(engine)) as s:
        for attempt_id, data in s.exec(query):
            found[attempt_id].append(data)
    return found


def attempts(engine: Engine, cell_id: int) -> list[Attempt]:
    with Session(reader(engine)) as s:
        return list(s.exec(select(Attempt).where(Attempt.cell_id == cell_id).order_by(col(Attempt.number))))


def record_events(engine: Engine, attempt_id: int, events: Iterable[dict[str, Any]], read_from: int,
                  new_offset: int, dropped: Mapping[str, int] | None = None) -> int | None:
    """``append_events``: the number of events stored, None when another reader got there first."""
    appended = append_events(engine, attempt_id, events, read_from, new_offset, dropped)
    return None if appended is None else appended[0]


def append_events(engine: Engine, attempt_id: int, events: Iterable[dict[str, Any]], read_from: int,
                  new_offset: int, dropped: Mapping[str, int] | None = None) -> tuple[int, int] | None:
    """Store complete events read from an attempt's events.jsonl at byte ``read_from`` and advance
    its offset to ``new_offset``, atomically, only if the stored offset is still ``read_from``
    (another reader got there first otherwise: nothing is stored twice). Lines are numbered from
    the attempt's stored line count. One short write transaction of two statements (the offset and
    line count moved by one conditional UPDATE … RETURNING, one bulk INSERT; the caller bounds the
    batch). ``dropped`` (what → how many lines the caller left out of this batch) is added to the
    attempt's one summary event (kind ``dropped``: "N more <what> dropped"), made at the next line
    the first time. A busy database is retried (``retry_busy``). Returns (events stored, the
    attempt's line count after them), None when another reader got there first."""
    rows = [{"t": float(event.get("t", 0.0)), "kind": str(event.get("kind", "")), "phase": event.get("phase"),
             "data_json": json.dumps({k: v for k, v in event.items() if k not in ("t", "kind", "phase")},
                                     sort_keys=True)} for event in events]
    counts = {what: n for what, n in (dropped or {}).items() if n}

    def write() -> tuple[int, int] | None:
        with engine.begin() as conn:
            taken = conn.execute(sa.update(Attempt).where(col(Attempt.id) == attempt_id)
                                 .where(col(Attempt.events_offset) == read_from)
                                 .values(events_offset=new_offset, events_lines=col(Attempt.events_lines) + len(rows))
                                 .returning(col(Attempt.events_lines), col(Attempt.cell_id))).first()
            if taken is None:  # another reader stored these lines
                return None
            line = taken.events_lines
            if rows:
                conn.execute(sa.insert(Event), [{**row, "attempt_id": attempt_id, "cell_id": taken.cell_id,
                                                 "line": line - len(rows) + i} for i, row in enumerate(rows)])
            if counts and _add_dropped(conn, attempt_id, taken.cell_id, line, counts):
                line += 1
                conn.execute(sa.update(Attempt).where(col(Attempt.id) == attempt_id).values(events_lines=line))
            return len(rows), line

    return retry_busy(write)


DROPPED_KIND = "dropped"
"""The kind of an attempt's summary of the event lines it did not store (no node writes it)."""


def _add_dropped(conn: sa.Connection, attempt_id: int, cell_id: int, line: int, counts: Mapping[str, int]) -> int:
    """Add ``counts`` to the attempt's summary event (made at ``line``); 1 when it was made, else 0."""
    found = conn.execute(sa.select(col(Event.id), col(Event.data_json)).where(col(Event.attempt_id) == attempt_id)
                         .where(col(Event.kind) == DROPPED_KIND)).first()
    total = dict(counts)
    if found is not None:
        for what, n in json.loads(found.data_json).get("dropped", {}).items():
            total[what] = total.get(what, 0) + int(n)
    message = "; ".join(f"{n} more {what} dropped" for what, n in sorted(total.items()))
    data = json.dumps({"message": message, "dropped": total}, sort_keys=True)
    if found is not None:
        conn.execute(sa.update(Event).where(col(Event.id) == found.id).values(data_json=data, t=time.time()))
        return 0
    conn.execute(sa.insert(Event).values(attempt_id=attempt_id, cell_id=cell_id, line=line, t=time.time(),
                                         kind=DROPPED_KIND, phase=None, data_json=data))
    return 1


BUSY_TRIES = 4
"""How often a write that found the database locked is tried in all."""


def retry_busy(write: Callable[[], T], tries: int = BUSY_TRIES) -> T:
    """``write()`` (one whole transaction), tried again after 0.5, 1, 2 s while SQLite says the
    database is locked or busy (its own busy timeout already waited); other errors, and the last
    one, are raised."""
    for attempt in range(tries):
        try:
            return write()
        except OperationalError as exc:
            busy = "locked" in str(exc.orig) or "busy" in str(exc.orig)
            if not busy or attempt == tries - 1:
                raise
            time.sleep(0.5 * 2 ** attempt)
    raise AssertionError("unreachable")


def stored_event_bytes(engine: Engine, attempt_id: int) -> int:
    """The length of the attempt's stored events' data (what its lines hold beside t, kind, phase)."""
    with Session(engine) as s:
        return int(s.exec(select(func.coalesce(func.sum(func.length(Event.data_json)), 0))
                          .where(Event.attempt_id == attempt_id)).one())


def malformed_stored(engine: Engine, attempt_id: int) -> int:
    """How many of the attempt's stored events are malformed lines (error events marked ``malformed_event``)."""
    with Session(engine) as s:
        return s.exec(select(func.count()).select_from(Event).where(Event.attempt_id == attempt_id)
                      .where(Event.kind == "error")
                      .where(col(Event.data_json).contains('"malformed_event": true'))).one()


def events(engine: Engine, cell_id: int, kind: str | None = None, phase: str | None = None) -> list[Event]:
    with Session(reader(engine)) as s:
        query = select(Event).where(Event.cell_id == cell_id)
        if kind is not None:
            query = query.where(Event.kind == kind)
        if phase is not None:
            query = query.where(Event.phase == phase)
        return list(s.exec(query.order_by(col(Event.attempt_id), col(Event.line))))


def save_result(engine: Engine, result: Result) -> None:
    with Session(engine) as s:
        existing = s.exec(select(Result).where(Result.cell_id == result.cell_id)).first()
        if existing is not None:
            s.delete(existing)
            s.flush()
        s.add(result)
        s.commit()


def delete_result(engine: Engine, cell_id: int) -> None:
    """Remove the cell's result, if it has one (its evidence was refused)."""
    with Session(engine) as s:
        existing = s.exec(select(Result).where(Result.cell_id == cell_id)).first()
        if existing is not None:
            s.delete(existing)
            s.commit()


def results(engine: Engine, campaign_id: int | None = None) -> list[tuple[Result, Cell, Campaign]]:
    with Session(engine) as s:
        query = select(Result, Cell, Campaign).where(Result.cell_id == Cell.id).where(Cell.campaign_id == Campaign.id)
        if campaign_id is not None:
            query = query.where(Campaign.id == campaign_id)
        return [(r, c, k) for r, c, k in s.exec(query)]


def add_artifact(engine: Engine, artifact: Artifact) -> None:
    with Session(engine) as s:
        s.add(artifact)
        s.commit()


def add_artifacts(engine: Engine, artifacts: list[Artifact]) -> None:
    """Every row in one transaction."""
    with Session(engine) as s:
        s.add_all(artifacts)
        s.commit()


def spent_usd(engine: Engine, campaign_id: int, now: float | None = None) -> float:
    """Money spent: closed attempts' cost plus open attempts' running cost up to ``now``."""
    return sum(spent_by_outcome(engine, campaign_id, now).values())


@dataclass(frozen=True)
class ProgressSnapshot:
    """What a live progress view shows of a campaign, read in one session."""

    cells: list[Cell]
    attempts: list[Attempt]
    latest_events: dict[int, Event]
    """Cell id → the newest stored payload event of that cell."""


def progress_snapshot(engine: Engine, campaign_id: int) -> ProgressSnapshot:
    """The campaign's cells, their attempts and each cell's newest event (three small selects)."""
    with Session(engine) as s:
        cell_rows = list(s.exec(select(Cell).where(Cell.campaign_id == campaign_id).order_by(col(Cell.id))))
        attempt_rows = list(s.exec(select(Attempt).join(Cell, col(Attempt.cell_id) == col(Cell.id))
                                   .where(Cell.campaign_id == campaign_id).order_by(col(Attempt.id))))
        newest = (select(func.max(Event.id)).join(Cell, col(Event.cell_id) == col(Cell.id))
                  .where(Cell.campaign_id == campaign_id).group_by(col(Event.cell_id)))
        event_rows = s.exec(select(Event).where(col(Event.id).in_(newest)))
        return ProgressSnapshot(cell_rows, attempt_rows, {e.cell_id: e for e in event_rows})


def cells_by_key(engine: Engine, key: str, campaign: str | None = None) -> list[tuple[Campaign, Cell]]:
    """Every cell with ``key`` (in the campaign named ``campaign``, when given), oldest campaign first."""
    with Session(engine) as s:
        query = (select(Campaign, Cell).where(Cell.campaign_id == Campaign.id).where(Cell.key == key)
                 .order_by(col(Campaign.created_at)))
        if campaign is not None:
            query = query.where(Campaign.name == campaign)
        return [(k, c) for k, c in s.exec(query)]


def attempt_events(engine: Engine, attempt_id: int, after_line: int = -1, limit: int | None = None) -> list[Event]:
    """The attempt's stored events after line ``after_line``, in line order (the first ``limit``)."""
    with Session(reader(engine)) as s:
        return list(s.exec(select(Event).where(Event.attempt_id == attempt_id).where(Event.line > after_line)
                           .order_by(col(Event.line)).limit(limit)))


def iter_attempt_events(engine: Engine, attempt_id: int, after_line: int = -1, chunk: int = 1000) -> Iterator[Event]:
    """``attempt_events``, read ``chunk`` rows per short session (memory bounded by ``chunk``, not by
    what the attempt stored)."""
    while rows := attempt_events(engine, attempt_id, after_line, limit=chunk):
        yield from rows
        after_line = rows[-1].line


def attempt_row(engine: Engine, attempt_id: int) -> Attempt:
    with Session(reader(engine)) as s:
        found = s.get(Attempt, attempt_id)
        if found is None:
            raise LookupError(f"no attempt {attempt_id}")
        return found
