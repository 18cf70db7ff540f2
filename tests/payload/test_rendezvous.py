"""Rendezvous first (issue 27, item 7): before NCCL starts, each worker node probes node 0's
rendezvous port over TCP; a port nobody answers fails in seconds with its own exit code, naming the
node that could not reach it. No test here depends on how fast the machine is: a closed loopback
port, the outcome and the exit code, generous bounds only."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchctl.payload.comm import ranks
from benchctl.payload.comm.ranks import RendezvousUnreachable, hold_rendezvous, probe_rendezvous, release_rendezvous
from benchctl.payload.job import EXIT_RENDEZVOUS, Job
from tests.conftest import REPO


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job(node_rank: int, port: int, **more: Any) -> Job:
    return Job(campaign="c", cell="k", attempt=1, token="t", gpu="cpu", count=1, phases=["preflight"], nodes=2,
               node_rank=node_rank, master_addr="127.0.0.1", master_port=port, **more)


def test_a_port_nobody_answers_is_unreachable_naming_the_node() -> None:
    port = closed_port()
    with pytest.raises(RendezvousUnreachable, match=f"rendezvous unreachable from node 1: .*127.0.0.1:{port}"):
        probe_rendezvous(job(1, port), timeout_s=1.0, interval_s=0.2)


def test_node_0_answers_on_its_port_until_its_ranks_take_it() -> None:
    port = closed_port()
    hold_rendezvous(job(0, port))
    try:
        probe_rendezvous(job(1, port), timeout_s=30.0)  # answered: returns
        probe_rendezvous(job(0, port), timeout_s=0.0)  # node 0 itself never probes
    finally:
        release_rendezvous()
    with socket.create_server(("127.0.0.1", port)):  # released: the ranks' store can bind it
        pass
    assert not ranks._held


def test_no_worker_goes_on_while_the_holder_still_has_the_port() -> None:
    """A worker whose probe returned starts its ranks, whose store clients connect to node 0's port at
    once: the holder must be gone by then (ci run of tests/test_cluster_local.py: a stand-in rank that
    reached the holder lost its peer). Each prober waits until every worker node has reached node 0,
    and the port is free before any of them goes on."""
    import threading

    port = closed_port()
    hold_rendezvous(dataclasses.replace(job(0, port), nodes=3))
    done: dict[int, float] = {}

    def probe(rank: int) -> None:
        probe_rendezvous(dataclasses.replace(job(rank, port), nodes=3), timeout_s=30.0)
        done[rank] = time.monotonic()

    try:
        first = threading.Thread(target=probe, args=(1,))
        first.start()
        first.join(timeout=2.0)
        assert first.is_alive() and not done, "node 1 waits for node 2 to reach node 0"
        second = threading.Thread(target=probe, args=(2,))
        second.start()
        for thread in (first, second):
            thread.join(timeout=60.0)
        assert set(done) == {1, 2}
        with socket.create_server(("127.0.0.1", port)):  # free before node 0's own ranks were started
            pass
    finally:
        release_rendezvous(wait_s=0.0)
    assert not ranks._held


def test_a_worker_that_cannot_reach_node_0_exits_with_its_own_code_before_any_phase(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text(job(1, closed_port()).to_json())
    began = time.monotonic()
    with (tmp_path / "payload.log").open("wb") as out:
        code = subprocess.run([sys.executable, "-m", "payload", "run", "job.json"], cwd=tmp_path, stdout=out,
                              stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)},
                              timeout=300).returncode
    assert code == EXIT_RENDEZVOUS == 5
    assert time.monotonic() - began < 120  # ≈ RENDEZVOUS_PROBE_S; the bound is generous, not a timing
    found = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    (error,) = [e for e in found if e["kind"] == "error"]
    assert error["message"].startswith("rendezvous unreachable from node 1")
    assert "bad_node" not in error and "bad_node_rank" not in error  # no node is blamed
    assert not [e for e in found if e["kind"] == "phase_start"] and found[-1]["exit_code"] == 5
    assert "rendezvous unreachable from node 1" in (tmp_path / "payload.log").read_text()  # the controller's detail


def test_the_cluster_probe_has_its_own_budget_not_what_preflight_left(tmp_path: Path) -> None:
    """A slow first NCCL init between nodes: the probe gets ``cluster_probe_budget_s`` from its start,
    however little of the node-local ``budget_s`` is left."""
    from benchctl.payload.node.preflight import _cluster
    from benchctl.payload.node.thresholds import resolve

    given: list[float | None] = []

    class Ranks:
        def run(self, phase: str, timeout_s: float | None = None) -> dict[str, Any]:
            given.append(timeout_s)
            return {"nodes": 2, "bytes": 8, "intra_node": [], "inter_node": [], "cluster": {}}

    probes: dict[str, Any] = {}
    spent = job(0, 1, preflight_thresholds={"budget_s": 1})
    _cluster(spent, tmp_path / "job.json", tmp_path, probes, Ranks())  # type: ignore[arg-type]
    own = resolve()["cluster_probe_budget_s"]
    assert given == [own] and own >= 120 and "error" not in probes["cluster"]
    _cluster(job(0, 1, preflight_thresholds={"cluster_probe_budget_s": 40}), tmp_path / "job.json", tmp_path, probes,
             Ranks())  # type: ignore[arg-type]
    assert given[-1] == 40
