"""Tail an attempt's events.jsonl by byte offset into the store.

Only complete lines are taken; the offset and the events are committed together, so after any
crash the next read starts exactly where the stored events end.

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
from typing import Any

from sqlalchemy.engine import Engine

from benchctl.payload.events import KINDS
from benchctl.provisioners.base import ProviderError, Transport
from benchctl.store import queries as q
from benchctl.store.models import Attempt

MAX_LINE_BYTES = 256 * 1024
"""The longest event line taken (the payload's longest are a few KB)."""
READ_LIMIT = 4 * 1024 * 1024
"""The most one sync reads; a longer backlog is read by the next syncs."""
QUOTED_BYTES = 120
"""How much of a refused line its error event quotes."""

_NUMBER = (int, float)
_FIELDS: dict[tuple[str, str | None], dict[str, tuple[type, ...]]] = {
    ("sample", "profile"): {"timed_index": (int, type(None)), "step_time_s": _NUMBER, "warmup": (bool,)},
    ("sample", "collectives"): {"op": (str,), "bytes": (int,), "busbw_gbps": (*_NUMBER, type(None))},
    ("artifact", None): {"name": (str,), "path": (str,)},
    ("error", None): {"message": (str,)},
    ("done", None): {"exit_code": (int,)},
}
"""Fields the controller reads, by (kind, phase or None for any phase), and the types they must have."""


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, _NUMBER):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _problem(event: Any) -> str | None:
    """What makes ``event`` (parsed JSON) not an event, or None."""
    if not isinstance(event, dict):
        return f"not an object but {type(event).__name__}"
    if "t" in event and not _finite(event["t"]):  # without one, it is stored at 0
        return "'t' is not a finite number"
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
    return None


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


def parse_lines(data: bytes, complete: bool = False) -> tuple[list[dict[str, Any]], int]:
    """Events in the complete lines of ``data`` and the number of bytes they span. With ``complete``
    (``data`` is a full read of ``READ_LIMIT`` bytes without a line end), all of it is one over-long line."""
    end = data.rfind(b"\n") + 1
    if end == 0 and complete:
        end = len(data)
    events = [parse_line(raw) for raw in data[:end].split(b"\n") if raw.strip()]
    return events, end


def sync_events(engine: Engine, attempt: Attempt, transport: Transport) -> list[dict[str, Any]]:
    """Store the events appended since the attempt's stored offset; return them."""
    assert attempt.id is not None
    current = next(a for a in q.attempts(engine, attempt.cell_id) if a.id == attempt.id)
    try:
        data = transport.read_from(f"{current.remote_dir}/events.jsonl", current.events_offset, limit=READ_LIMIT)
    except OSError as exc:
        raise ProviderError(f"reading {current.remote_dir}/events.jsonl failed: {exc}") from exc
    events, consumed = parse_lines(data[:READ_LIMIT], complete=len(data) >= READ_LIMIT)
    if consumed and q.record_events(engine, attempt.id, events, current.events_offset,
                                    current.events_offset + consumed):
        return events
    return []
