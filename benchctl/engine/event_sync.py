"""Tail an attempt's events.jsonl by byte offset into the store.

Only complete lines are taken; the offset and the events are committed together, so after any
crash the next read starts exactly where the stored events end. What a sync costs is bounded by
lines as well as bytes, whatever the node writes: one read of at most ``READ_LIMIT`` bytes, at most
``MAX_LINES_PER_SYNC`` lines, stored ``BATCH_LINES`` at a time (one short write transaction with
one bulk INSERT each). An attempt keeps at most ``MAX_MALFORMED`` malformed lines and
``MAX_EVENTS`` events of ``MAX_EVENT_BYTES``; what it drops past them is counted in its one
summary event (kind ``dropped``: "N more malformed lines dropped").

The file is written by the node, which is not trusted: a line that is not an event as the payload
writes it (not JSON, not an object, ``t`` not a finite number, an unknown ``kind``, a field the
controller reads with the wrong type, longer than ``MAX_LINE_BYTES``) is stored as an ``error``
event that says what was wrong and quotes the start of the line, escaped. Nothing a node writes
raises here; a read that fails raises ``ProviderError``.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from benchctl.engine.compile_caches import announced as cache_announced
from benchctl.payload.events import KINDS
from benchctl.provisioners.base import ProviderError, Transport
from benchctl.results.evidence_rules import event_time_problem, value_problem
from benchctl.store import queries as q
from benchctl.store.models import Attempt

MAX_LINE_BYTES = 256 * 1024
"""The longest event line taken (the payload's longest are a few KB)."""
READ_LIMIT = 4 * 1024 * 1024
"""The most one sync reads; a longer backlog is read by the next syncs."""
QUOTED_BYTES = 120
"""How much of a refused line its error event quotes."""
MAX_LINES_PER_SYNC = 100_000
"""The most lines one sync takes (about a second of work); the rest wait for the next sync."""
BATCH_LINES = 2_000
"""Lines per write transaction: one bulk INSERT each, so no write holds the database for long."""
MAX_MALFORMED = 100
"""Malformed lines stored per attempt as error events; the rest are counted in its summary event."""
MAX_EVENTS = 50_000
"""Events stored per attempt (the payload writes a few thousand); the rest are counted in its summary
event, except phase markers (``MARKERS``), kept up to ``MAX_MARKERS`` more."""
MAX_EVENT_BYTES = 32 * 1024 * 1024
"""Bytes of event lines stored per attempt, likewise (a node's long lines count by their length)."""
MARKERS = ("phase_start", "phase_end", "done")
MAX_MARKERS = 1_000
DRAIN_SYNCS = 32
"""The most syncs the last read of an attempt makes (3.2 M lines)."""
MALFORMED = "malformed lines"
OVER_CAP = f"events past the attempt's cap ({MAX_EVENTS:,} events, {MAX_EVENT_BYTES // 2**20} MiB)"

_NUMBER = (int, float)
_FIELDS: dict[tuple[str, str | None], dict[str, tuple[type, ...]]] = {
    ("sample", "profile"): {"timed_index": (int, type(None)), "step_time_s": _NUMBER, "warmup": (bool,)},
    ("sample", "collectives"): {"op": (str,), "bytes": (int,), "busbw_gbps": (*_NUMBER, type(None))},
    ("artifact", None): {"name": (str,), "path": (str,)},
    ("error", None): {"message": (str,)},
    ("done", None): {"exit_code": (int,)},
}
"""Fields the controller reads, by (kind, phase or None for any phase), and the types they must have."""


def _problem(event: Any) -> str | None:
    """What makes ``event`` (parsed JSON) not an event, or None."""
    if not isinstance(event, dict):
        return f"not an object but {type(event).__name__}"
    if "t" in event and (bad_time := event_time_problem(event["t"])):  # without one, it is stored at 0
        return bad_time
    kind, phase = event.get("kind"), event.get("phase")
    if kind not in KINDS:
        return f"'kind' is not one of {', '.join(KINDS)}"
    if phase is not None and not isinstance(phase, str):
        return "'phase' is not a string"
    fields = {**_FIELDS.get((kind, None), {}), **_FIELDS.get((kind, phase), {})}
    for name, types in fields.items():
        value = event.get(name)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"{kind} event's {name!r} is missing or not {'/'.join(t.__name__ for t in types)}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{kind} event's {name!r} is not finite"
        if isinstance(value, str) and "\0" in value:
            return f"{kind} event's {name!r} holds a NUL character"
    return value_problem(event)  # the record rules: 64-bit integers, finite numbers, UTF-8 text


def parse_line(raw: bytes) -> dict[str, Any]:
    """The event on one line, or an ``error`` event saying why the line is not one."""
    why: str | None = f"longer than {MAX_LINE_BYTES} bytes"
    if len(raw) <= MAX_LINE_BYTES:
        try:
            event = json.loads(raw)
            why = _problem(event)
        except (ValueError, RecursionError):  # RecursionError: nested too deep
            why = "not JSON"
        if why is None:
            return dict(event)
    quoted = repr(raw[:QUOTED_BYTES]) + (f" … ({len(raw)} bytes)" if len(raw) > QUOTED_BYTES else "")
    return {"t": time.time(), "kind": "error", "malformed_event": True,
            "message": f"unparseable event line ({why}): {quoted}"}


def parse_lines(data: bytes, complete: bool = False, max_lines: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """Events in the complete lines of ``data`` (its first ``max_lines`` lines) and the number of
    bytes they span. With ``complete`` (``data`` is a full read of ``READ_LIMIT`` bytes without a
    line end), all of it is one over-long line."""
    events, consumed = [], 0
    for raw, end in _lines(data, complete, max_lines):
        consumed = end
        if raw.strip():
            events.append(parse_line(raw))
    return events, consumed


def _lines(data: bytes, complete: bool, max_lines: int | None) -> Iterator[tuple[bytes, int]]:
    """Each complete line of ``data`` (the first ``max_lines``) with the offset just past it."""
    start, taken = 0, 0
    while max_lines is None or taken < max_lines:
        end = data.find(b"\n", start)
        if end < 0:
            if start == 0 and complete and data:
                yield data, len(data)
            return
        yield data[start:end], end + 1
        start, taken = end + 1, taken + 1


class EventStoreError(Exception):
    """The store refused an attempt's events (a busy database was retried first)."""


def valid_events(data: bytes, max_lines: int = MAX_LINES_PER_SYNC) -> list[dict[str, Any]]:
    """The events on the first ``max_lines`` complete lines of ``data``, malformed lines left out."""
    return [event for raw, _ in _lines(data, False, max_lines) if (event := _event(raw)) is not None]


@dataclass
class _Batch:
    """What one write transaction stores: events, the offset in the read past their lines, the lines dropped."""

    events: list[dict[str, Any]] = field(default_factory=list)
    end: int = 0
    dropped: Counter[str] = field(default_factory=Counter)


@dataclass
class EventCursor:
    """Where one reader of an attempt's events stands (its stored offset and line count), so that a
    sync need not read the attempt's row first: the row is read when the cursor is new, and again
    after another reader stored lines first (``append_events``' conditional offset refuses the
    batch then). Hold one per attempt, within one store."""

    attempt_id: int | None = None
    offset: int = 0
    lines: int = 0

    def at(self, engine: Engine, attempt_id: int) -> EventCursor:
        """This cursor, read from the store when it is not yet ``attempt_id``'s."""
        if self.attempt_id != attempt_id:
            row = q.attempt_row(engine, attempt_id)
            self.attempt_id, self.offset, self.lines = attempt_id, row.events_offset, row.events_lines
        return self

    def forget(self) -> None:
        self.attempt_id = None


def sync_events(engine: Engine, attempt: Attempt, transport: Transport,
                cursor: EventCursor | None = None) -> list[dict[str, Any]]:
    """Store the events appended since the attempt's stored offset (at most ``MAX_LINES_PER_SYNC``
    lines, ``BATCH_LINES`` per write transaction); return the phase markers among those stored
    (``phase_start``, ``phase_end``, ``done``) and the ``artifact`` events that announce a compile
    cache (the driver brings it home at once). ``cursor``: where the caller's last sync left off
    (without one, the attempt's row is read first). Raises ``ProviderError`` when the node cannot be read."""
    return _sync(engine, attempt, transport, cursor or EventCursor())[0]


def drain_events(engine: Engine, attempt: Attempt, transport: Transport, cursor: EventCursor | None = None) -> bool:
    """Sync until nothing is left to read, at most ``DRAIN_SYNCS`` times: the last read of an
    attempt. False when it stopped with lines left."""
    cursor = cursor or EventCursor()
    return any(not _sync(engine, attempt, transport, cursor)[1] for _ in range(DRAIN_SYNCS))


def _sync(engine: Engine, attempt: Attempt, transport: Transport,
          cursor: EventCursor) -> tuple[list[dict[str, Any]], bool]:
    """One sync: (its phase markers, whether it stopped at ``MAX_LINES_PER_SYNC`` lines)."""
    assert attempt.id is not None
    current = cursor.at(engine, attempt.id)
    try:
        data = transport.read_from(f"{attempt.remote_dir}/events.jsonl", current.offset, limit=READ_LIMIT)
    except OSError as exc:
        raise ProviderError(f"reading {attempt.remote_dir}/events.jsonl failed: {exc}") from exc
    data, base, stored = data[:READ_LIMIT], current.offset, current.lines
    malformed: int | None = None  # read from the store at the first malformed line
    room: int | None = None  # bytes the attempt may still store: known at the first event
    markers: list[dict[str, Any]] = []
    batch, begin, lines = _Batch(), 0, 0
    for raw, end in _lines(data, len(data) >= READ_LIMIT, MAX_LINES_PER_SYNC):
        lines += 1
        event = _event(raw) if raw.strip() else {}
        if event is None:
            malformed = q.malformed_stored(engine, attempt.id) if malformed is None else malformed
            if malformed < MAX_MALFORMED:
                batch.events.append(parse_line(raw))
                malformed += 1
            else:
                batch.dropped[MALFORMED] += 1
        elif event:
            kept = stored + len(batch.events)
            if room is None:
                room = _room(engine, attempt.id, base, len(data))
            if (kept < MAX_EVENTS and len(raw) <= room) or (event["kind"] in MARKERS
                                                            and kept < MAX_EVENTS + MAX_MARKERS):
                room -= len(raw)
                batch.events.append(event)
                markers += [event] if event["kind"] in MARKERS or cache_announced(event) else []
            else:
                batch.dropped[OVER_CAP] += 1
        batch.end = end
        if lines % BATCH_LINES == 0:
            if not _record(engine, cursor, batch, base + begin, base + end):
                return markers, False  # another reader took these lines
            stored, begin, batch = cursor.lines, end, _Batch()
    if batch.end > begin:
        _record(engine, cursor, batch, base + begin, base + batch.end)
    return markers, lines >= MAX_LINES_PER_SYNC


def _room(engine: Engine, attempt_id: int, offset: int, reading: int) -> int:
    """Bytes of event lines the attempt may still store. What it stored is at most what it consumed
    (``offset``), so the store is asked only when that and this read (``reading`` bytes) pass
    ``MAX_EVENT_BYTES``."""
    if offset + reading <= MAX_EVENT_BYTES:
        return MAX_EVENT_BYTES
    return MAX_EVENT_BYTES - q.stored_event_bytes(engine, attempt_id)


def _record(engine: Engine, cursor: EventCursor, batch: _Batch, read_from: int, new_offset: int) -> bool:
    """Store ``batch`` and move ``cursor`` past it; False (the cursor to be read again) when
    another reader stored these lines first."""
    assert cursor.attempt_id is not None
    try:
        appended = q.append_events(engine, cursor.attempt_id, batch.events, read_from, new_offset, batch.dropped)
    except SQLAlchemyError as exc:
        cursor.forget()  # whether it was stored is unknown
        why = getattr(exc, "orig", None) or exc  # the driver's error, without the statement and its rows
        raise EventStoreError(f"storing the node's events failed: {type(why).__name__}: {why}") from exc
    if appended is None:
        cursor.forget()
        return False
    cursor.offset, cursor.lines = new_offset, appended[1]
    return True


def _event(raw: bytes) -> dict[str, Any] | None:
    """The event on ``raw``, or None when it is not one (``parse_line`` then says why)."""
    if len(raw) > MAX_LINE_BYTES or not raw.lstrip().startswith(b"{"):
        return None
    try:
        event = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return dict(event) if _problem(event) is None else None
