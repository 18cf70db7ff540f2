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

from benchctl.provisioners.base import Node, NodeState
from benchctl.provisioners.local.processes import node_processes
from benchctl.provisioners.local.provider import LocalProvider
from benchctl.store import queries as q
from benchctl.store.database import open_store
from tests.conftest import REPO

REPORT_CAMPAIGN = """\
name: rep
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
defaults: {market: on-demand, max_attempts: 1}
payload:
  phases: [preflight, collectives, profile]
  collectives: {min_bytes: 8, max_bytes: 64K, factor: 16, warmup_iters: 1, iters: 2}
  profile: {device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: 3}
matrix:
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}
  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 1.0}
  - {provider: local, gpu: cpu, count: 2, market: spot, price_usd_per_hour: 0.3, faults: {shm_mb: 64}}
"""
"""A local campaign with every phase, a healthy 1- and 2-rank cell and one whose node fails
preflight (``REPORT_FAILING_CELL``, max_attempts 1): run once per test run (``run_once``) and
shared by the report and import tests."""
REPORT_FAILING_CELL = "local:cpux2:spot"


def start(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "BENCHCTL_HOME": str(home)}
    env.pop("BENCHCTL_DB", None)
    return subprocess.Popen([sys.executable, "-m", "benchctl", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(predicate: Callable[[], object], timeout: float = 60.0, every: float = 0.1) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
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
