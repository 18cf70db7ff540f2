"""What the cloud campaign tests check the same way: a node is mid-profile (read on the node), and
a canary secret reached nothing benchctl or the nodes wrote."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

CANARY = "canary-9f3b7e1d-secret"
WRITTEN = {"benchctl.db", "job.json", "events.jsonl", "payload.log"}
"""Files a leak would be in; they must exist for the search to mean anything."""


def measuring(workdir: Path, campaign: str, key: str) -> bool:
    """The first attempt of cell ``key`` is mid-profile on its node: a timed sample is in the
    node's own events.jsonl and the payload has not finished (read on the node, not in the store,
    which lags behind by a poll)."""
    events = workdir / "benchctl" / campaign / key / "1" / "events.jsonl"
    text = events.read_text() if events.exists() else ""
    return '"warmup": false' in text and '"kind": "done"' not in text


def assert_canary_nowhere(output: str, roots: Iterable[Path]) -> None:
    """CANARY is not in the controller's ``output`` nor in any file under ``roots``."""
    assert CANARY not in output, "not in the controller's output"
    leaks, checked = [], set()
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                checked.add(path.name)
                if CANARY.encode() in path.read_bytes():
                    leaks.append(str(path))
    assert leaks == [], "the key reached files benchctl wrote (database, events, job.json, logs, artifacts)"
    assert checked >= WRITTEN, "the places a leak would be exist"
