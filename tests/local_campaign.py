"""Driving a local campaign from outside, as a user or a fault would: start the CLI, wait for a
state, read the store, check that no node process is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from provisioners.base import Node, NodeState
from provisioners.local import LocalProvider
from provisioners.local_processes import node_processes
from store import queries as q
from store.database import open_store
from tests.conftest import REPO


def start(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "BENCHCTL_HOME": str(home)}
    env.pop("BENCHCTL_DB", None)
    return subprocess.Popen([sys.executable, "-m", "benchctl", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(predicate: Callable[[], object], timeout: float = 60.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def home_store(home: Path):  # type: ignore[no-untyped-def]
    return open_store(f"sqlite:///{home / 'benchctl.db'}")


def only_cell(home: Path):  # type: ignore[no-untyped-def]
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    assert campaign.id is not None
    (cell,) = q.cells(engine, campaign.id)
    return engine, cell


def running_profile_node(home: Path) -> Node | None:
    """The node of the open attempt once its profile phase has recorded a timed (non-warmup) sample."""
    if not (home / "benchctl.db").exists():
        return None
    engine = home_store(home)
    for campaign in q.campaigns(engine):
        for cell in q.cells(engine, campaign.id or 0):
            timed = {e.attempt_id for e in q.events(engine, cell.id or 0, kind="sample", phase="profile")
                     if not json.loads(e.data_json).get("warmup")}
            for attempt in q.attempts(engine, cell.id or 0):
                if attempt.open and attempt.node_json and attempt.id in timed:
                    return Node.from_dict(json.loads(attempt.node_json))
    return None


def no_live_nodes(home: Path) -> None:
    provider = LocalProvider(home / "nodes")
    for record in (home / "nodes").glob("*/node.json"):
        node = Node.from_dict(json.loads(record.read_text())["node"])
        assert node_processes(node.token) == [], f"node {node.node_id} still has processes"
        assert provider.status(node) is not NodeState.RUNNING
