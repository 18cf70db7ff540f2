"""Tail an attempt's events.jsonl by byte offset into the store.

Only complete lines are taken; the offset and the events are committed together, so after any
crash the next read starts exactly where the stored events end.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.engine import Engine

from provisioners.base import Transport
from store import queries as q
from store.models import Attempt


def parse_lines(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """Events in the complete lines of ``data`` and the number of bytes they span."""
    end = data.rfind(b"\n") + 1
    events = []
    for raw in data[:end].splitlines():
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            event = {"kind": "error", "message": f"unparseable event line: {raw[:200]!r}"}
        events.append(event if isinstance(event, dict) else {"kind": "error", "message": f"not an object: {event!r}"})
    return events, end


def sync_events(engine: Engine, attempt: Attempt, transport: Transport) -> list[dict[str, Any]]:
    """Store the events appended since the attempt's stored offset; return them."""
    assert attempt.id is not None
    current = next(a for a in q.attempts(engine, attempt.cell_id) if a.id == attempt.id)
    data = transport.read_from(f"{current.remote_dir}/events.jsonl", current.events_offset)
    events, consumed = parse_lines(data)
    if consumed and q.record_events(engine, attempt.id, events, current.events_offset,
                                    current.events_offset + consumed):
        return events
    return []
