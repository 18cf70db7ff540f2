"""The budget is watched while an attempt's files are collected: spend that reaches the budget
then stops the download, terminates the node and fails the cell with reason ``budget``, where it
used to wait for the stalled node. Real CLI, real sshd on 127.0.0.1 (``tests/fakes/stalling_node``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import Session

from benchctl.provisioners.base import Node, NodeState
from benchctl.provisioners.ssh import SSHProvider
from benchctl.store import queries as q
from benchctl.store.models import Attempt
from tests.fakes.sshd import SSHServer
from tests.fakes.stalling_node import STALL_S, stall_campaign, stalling_sshd
from tests.local_campaign import home_store, only_cell, start, wait_for


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    with stalling_sshd(tmp_path_factory.mktemp("stalling")) as server:
        yield server


@pytest.mark.slow
def test_spend_reaching_the_budget_while_collecting_stops_the_collection(home: Path, tmp_path: Path,
                                                                        sshd: SSHServer) -> None:
    path = stall_campaign(tmp_path / "stall.yaml", sshd, tmp_path / "machine")
    proc = start(home, "run", str(path), "--poll-interval", "0.1", "--status-interval", "0.3")

    def collecting() -> bool:
        return (home / "benchctl.db").exists() and bool(q.campaigns(home_store(home))) and \
            only_cell(home)[1].state == "collecting"

    wait_for(collecting, timeout=30)
    engine, cell = only_cell(home)
    with Session(engine) as s:  # money another controller spent on this campaign meanwhile
        s.add(Attempt(cell_id=cell.id or 0, number=99, token="elsewhere", provider="ssh", market="on-demand",
                      remote_dir="-", hourly_usd=5.0, open=False, outcome="done", launched_at=time.time() - 3600,
                      terminated_at=time.time(), cost_usd=5.0))
        s.commit()
    over_at = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - over_at < 10, f"stopped within a few status polls, not after the {STALL_S} s stall"
    assert proc.returncode == 1, err
    engine, cell = only_cell(home)
    assert cell.state == "failed" and (cell.reason or "").startswith("budget:"), cell.reason
    (ours,) = [a for a in q.attempts(engine, cell.id or 0) if a.token != "elsewhere"]
    assert not ours.open and ours.outcome == "budget", (ours.outcome, ours.detail)
    node = Node.from_dict(json.loads(ours.node_json or "{}"))
    assert SSHProvider(home / "ssh", []).status(node) is NodeState.TERMINATED
    assert not list((home / "ssh" / "claims").iterdir()), "the machine is free again"
