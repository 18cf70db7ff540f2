"""Collecting an attempt's files (issue 31 item 5): artifact events are evidence, not truth.

A node that announces one file 300 times gets one row and one hash of it, and the hashing runs
once the node is terminated (it bills nothing then). In-process, against the memory provider."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, select

from benchctl.engine.scheduler import run_campaign
from benchctl.provisioners.base import NodeState
from benchctl.store.models import Artifact
from tests.fakes.memory_provider import MemoryProvider, Script, payload_events
from tests.memory_campaign import KEY, memory_run, offer

BIG = bytes(range(256)) * 4096  # 1 MiB
ANNOUNCEMENTS = 300


def _announcing(job: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The healthy payload's events, with one file announced ``ANNOUNCEMENTS`` times up front."""
    again = [{"t": 1.0, "kind": "artifact", "phase": "profile", "name": "big.bin", "path": "artifacts/big.bin"}]
    other = [{"t": 1.0, "kind": "artifact", "phase": "profile", "name": "gone", "path": "artifacts/missing.bin"}]
    return [again * ANNOUNCEMENTS + other * 5, *payload_events(job)]


def test_one_file_announced_300_times_is_hashed_once_after_terminate(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    provider = MemoryProvider([offer()], [Script(events=_announcing, artifacts={"big.bin": BIG})])
    run = memory_run(tmp_path, provider)
    hashed: list[int] = []
    node_at_hashing: list[NodeState | None] = []
    real = hashlib.sha256

    class Counting:  # hashlib.sha256 as the controller sees it: counts what it reads and when
        def __init__(self, data: bytes = b"") -> None:
            self.inner = real(data)
            node_at_hashing.append(provider.launched()[0].gone if provider.launched() else None)
            hashed.append(len(data))

        def update(self, data: bytes) -> None:
            hashed.append(len(data))
            self.inner.update(data)

        def hexdigest(self) -> str:
            return self.inner.hexdigest()

    monkeypatch.setattr(hashlib, "sha256", Counting)
    assert run_campaign(run.ctx, concurrency=1).complete
    monkeypatch.undo()
    assert run.cell().state == "done"
    with Session(run.engine) as session:
        rows = list(session.exec(select(Artifact).where(Artifact.cell_id == run.cell().id)))
    assert sorted((r.name, r.sha256 is not None) for r in rows) == [("big.bin", True), ("gone", False)], \
        "one row per distinct path; the missing file has no hash"
    (big,) = [r for r in rows if r.name == "big.bin"]
    assert big.sha256 == hashlib.sha256(BIG).hexdigest() and big.bytes == len(BIG)
    assert len(BIG) <= sum(hashed) < 2 * len(BIG), f"the file is read once, not {sum(hashed) // len(BIG)} times"
    assert node_at_hashing and set(node_at_hashing) == {NodeState.TERMINATED}, \
        "hashing runs once the node is terminated"
    (attempt,) = run.attempts(KEY)
    assert attempt.outcome == "done" and not attempt.open

