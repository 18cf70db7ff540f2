"""Writer of events.jsonl: append-only, one JSON object per line, flushed per line.

Every event has ``t`` (unix seconds) and ``kind`` (phase_start | sample | phase_end | artifact |
error | done | preempt_notice). Each line is written with a single ``os.write`` on an O_APPEND descriptor, so a
reader tailing by byte offset sees whole lines or nothing of a line still being written.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

KINDS = ("phase_start", "sample", "phase_end", "artifact", "error", "done", "preempt_notice")


class EventLog:
    """Appends events to ``path``; safe to open from several processes (O_APPEND)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        event = {"t": round(time.time(), 6), "kind": kind, **fields}
        os.write(self._fd, (json.dumps(event, sort_keys=True) + "\n").encode())
        return event

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """Every event in the events file at ``path``, in order.

    The file is shared with the ``command`` phase and anything else on the node that can write
    there, so a line that is not a JSON object is skipped, never raised on: a summary must not
    crash a phase over a stranger's line (the controller reports such lines as error events)."""
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                yield event


def read_samples(path: Path, phase: str) -> Iterator[dict[str, Any]]:
    """The ``sample`` events of ``phase`` in the events file at ``path``, in order (``read_events``)."""
    return (e for e in read_events(path) if e.get("kind") == "sample" and e.get("phase") == phase)
