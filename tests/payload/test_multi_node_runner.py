"""The real payload across two "nodes" on this machine: two runners (node_rank 0 and 1), each in its
own attempt directory with its own job.json, meeting at 127.0.0.1 through torch.distributed's TCP
rendezvous, on CPU with gloo."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchctl.payload.comm.collective_math import bus_factor
from benchctl.payload.job import Job
from tests.conftest import REPO

pytestmark = pytest.mark.slow

COUNT = 2
"""Ranks per node where the test looks at a node's own ranks (global rank layout, intra-node groups)
or loses a node mid-profile; the tests of a node missing or judged bad as a whole run one rank per
node (``ONE``): each rank is an ``import torch`` (1.2-2 CPU-s). A node lost mid-profile keeps two:
with one rank per node, node 0's only rank once waited on in its gloo collective after its peer was
killed (once in about 45 runs: no error until its 600 s collective timeout), and with two either rank's
error ends the node."""
ONE = {"count": 1}
TINY_PROFILE: dict[str, Any] = {"model": "nanochat-d1", "vocab_size": 512, "device_batch_size": 2,
                                "sequence_len": 32, "total_batch_size": 2 * 32 * 2 * COUNT, "warmup_steps": 1,
                                "steps": 2, "seed": 0}
COLLECTIVES: dict[str, Any] = {"ops": ["all_reduce", "all_gather", "broadcast"], "min_bytes": 8, "max_bytes": 4096,
                               "factor": 64, "warmup_iters": 1, "iters": 2}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _job(node_rank: int, port: int, **overrides: Any) -> dict[str, Any]:
    job: dict[str, Any] = {"campaign": "tiny", "cell": "local/cpu/2x2", "attempt": 1, "token": "tok-123",
                           "gpu": "cpu", "count": COUNT, "nodes": 2, "node_rank": node_rank,
                           "master_addr": "127.0.0.1", "master_port": port,
                           "phases": ["preflight", "collectives", "profile"], "done_phases": [],
                           "profile": dict(TINY_PROFILE), "collectives": dict(COLLECTIVES)}
    job.update(overrides)
    Job.from_dict(job)  # the file we write is a valid Job
    return job


def start(workdir: Path, job: dict[str, Any]) -> subprocess.Popen[bytes]:
    """One node's runner, in a session of its own (so the whole node can be killed at once)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with (workdir / "payload.log").open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "payload", "run", "job.json"], cwd=workdir, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def events(workdir: Path) -> list[dict[str, Any]]:
    path = workdir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def finish(procs: list[subprocess.Popen[bytes]], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    try:
        return [proc.wait(timeout=max(0.1, deadline - time.monotonic())) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _samples(found: list[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    return [e for e in found if e["kind"] == "sample" and e.get("phase") == phase]


def test_two_nodes_run_one_attempt_as_one_world(tmp_path: Path) -> None:
    port = free_port()
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    codes = finish([start(nodes[n], _job(n, port)) for n in range(2)], timeout=240)
    logs = [(d / "payload.log").read_text() for d in nodes]
    assert codes == [0, 0], logs
    node0, node1 = events(nodes[0]), events(nodes[1])
    for found in (node0, node1):  # every node writes its own events, framed as on one node
        assert [(e["kind"], e["phase"]) for e in found if e["kind"] in ("phase_start", "phase_end")] == [
            (kind, phase) for phase in ("preflight", "collectives", "profile") for kind in ("phase_start", "phase_end")]
        assert found[-1] == {**found[-1], "kind": "done", "exit_code": 0}
        assert not [e for e in found if e["kind"] == "error"]

    # one world of nodes × count ranks: node k runs global ranks k·count … (k+1)·count - 1
    for n, directory in enumerate(nodes):
        rank_logs = sorted(p.name for p in (directory / "artifacts" / "logs").glob("*.log"))
        assert rank_logs == [f"attempt-rank{n * COUNT + r}.log" for r in range(COUNT)]
        for name in rank_logs:
            assert "joined the gloo group of 4" in (directory / "artifacts" / "logs" / name).read_text()
        assert not list(directory.glob(".rendezvous-*"))

    # samples of the ranks only on node 0 (global rank 0)
    assert not _samples(node1, "profile") and not _samples(node1, "collectives")
    profile = _samples(node0, "profile")
    assert len(profile) == TINY_PROFILE["warmup_steps"] + TINY_PROFILE["steps"]
    assert all(s["grad_accum"] == 1 for s in profile)  # total batch = batch × seq × 4 ranks: world size 4

    collectives = _samples(node0, "collectives")
    by_scope: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for s in collectives:
        by_scope.setdefault((s["scope"], s.get("node_rank", s.get("rail"))), []).append(s)
    assert sorted(by_scope, key=str) == sorted([("cluster", None), ("intra_node", 0), ("intra_node", 1),
                                                ("inter_node", 0), ("inter_node", 1)], key=str)
    ranks = {"cluster": 4, "intra_node": COUNT, "inter_node": 2}
    placements = {"all_reduce": [True], "all_gather": [False, True], "broadcast": [True]}
    for (scope, _), found in by_scope.items():
        granule = 4 * ranks[scope]
        sizes = [max(granule, b // granule * granule) for b in (8, 512)]
        assert [(s["op"], s["bytes"], s["in_place"]) for s in found] == [
            (op, size, p) for op, ps in placements.items() for size in sizes for p in ps]
        for s in found:
            assert s["ranks"] == ranks[scope] and s["wrong"] == 0
            assert s["busbw_gbps"] == pytest.approx(s["algbw_gbps"] * bus_factor(s["op"], ranks[scope]))
    table = (nodes[0] / "artifacts" / "collectives.txt").read_text()
    for title in ("all_reduce across the cluster (4 ranks", "all_reduce intra-node, node 1 (2 ranks",
                  "all_reduce inter-node, rail 1 (2 ranks"):  # then "; time: average over the ranks, …)"
        assert f"# {title}" in table
    (end,) = [e for e in node0 if e["kind"] == "phase_end" and e["phase"] == "collectives"]
    assert set(end["summary"]["intra_node"]) == {"node0", "node1"}
    assert set(end["summary"]["inter_node"]) == {"rail0", "rail1"}

    # preflight: the cross-node figures, the same on both nodes, not judged on CPU by default
    for found in (node0, node1):
        checks = {e["name"]: e for e in _samples(found, "preflight")}
        assert {"intra_node_busbw", "rail_busbw", "inter_node_busbw", "cluster_falloff"} <= set(checks)
        assert set(checks["intra_node_busbw"]["observed"]["busbw_gbps"]) == {"node0", "node1"}
        assert "not judged" in checks["intra_node_busbw"]["hint"]
        assert "fail" not in {c["status"] for c in checks.values()}
    figures = [json.loads((d / "artifacts" / "facts" / "cluster.json").read_text()) for d in nodes]
    assert figures[0] == figures[1]
    assert [n["node_rank"] for n in figures[0]["intra_node"]] == [0, 1]
    assert [r["rail"] for r in figures[0]["inter_node"]] == [0, 1]
    assert figures[0]["cluster"]["ranks"] == 4 and all(n["busbw_gbps"] > 0 for n in figures[0]["intra_node"])


def _rank_pids(workdir: Path) -> list[int]:
    return [int(line.split(" pid ")[1].split(":")[0]) for log in (workdir / "artifacts" / "logs").glob("*.log")
            for line in log.read_text().splitlines()[:1]]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("what", ["runner", "node"])
def test_a_node_that_dies_mid_phase_fails_the_other_not_hangs(tmp_path: Path, what: str) -> None:
    """``runner``: node 1's runner is killed alone (its ranks follow it); ``node``: the whole node is gone."""
    port = free_port()
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    job = {"phases": ["profile"], "profile": {**TINY_PROFILE, "steps": 100000}}  # COUNT ranks: see ONE
    procs = [start(nodes[n], _job(n, port, **job)) for n in range(2)]
    try:
        deadline = time.monotonic() + 180
        while len(_samples(events(nodes[0]), "profile")) < 2:  # the profile is under way on both nodes
            assert time.monotonic() < deadline, (nodes[0] / "payload.log").read_text()
            assert all(p.poll() is None for p in procs), [(d / "payload.log").read_text() for d in nodes]
            time.sleep(0.2)
        orphans = _rank_pids(nodes[1])
        assert len(orphans) == COUNT
        if what == "runner":
            os.kill(procs[1].pid, signal.SIGKILL)
        else:
            os.killpg(procs[1].pid, signal.SIGKILL)
        killed = time.monotonic()
        (code,) = finish(procs[:1], timeout=90)
        elapsed = time.monotonic() - killed
        while any(_alive(pid) for pid in orphans) and time.monotonic() < killed + 30:
            time.sleep(0.2)
        assert not [pid for pid in orphans if _alive(pid)], "node 1's ranks outlived their runner"
    finally:
        finish(procs, timeout=0)
        for pid in _rank_pids(nodes[1]):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert code == 1
    assert elapsed < 60
    found = events(nodes[0])
    (error,) = [e for e in found if e["kind"] == "error"]
    assert error["phase"] == "profile" and "rank" in error["message"]
    assert "bad_node_rank" not in error
    assert found[-1] == {**found[-1], "kind": "done", "exit_code": 1}


def test_a_node_that_never_joins_fails_preflight_at_its_budget(tmp_path: Path) -> None:
    workdir = tmp_path / "node0"
    job = _job(0, free_port(), **ONE, phases=["preflight", "profile"],
               preflight_thresholds={"cluster_probe_budget_s": 12})
    started = time.monotonic()
    (code,) = finish([start(workdir, job)], timeout=120)
    assert code == 1, (workdir / "payload.log").read_text()
    assert time.monotonic() - started < 12 + 90  # the probe's budget, the facts, the ranks' start and close
    found = events(workdir)
    (probe,) = [e for e in _samples(found, "preflight") if e["name"] == "cluster_probe"]
    assert probe["status"] == "fail" and "did not finish within" in probe["hint"]
    (error,) = [e for e in found if e["kind"] == "error"]
    assert error["phase"] == "preflight" and "cluster probe failed" in error["message"]
    assert "bad_node" not in error  # a missing peer is not this node's fault
    assert not [e for e in found if e.get("phase") == "profile"]


@pytest.mark.parametrize(("thresholds", "named", "count"), [
    ({"intra_node_busbw_min_gbps": 1e9}, 0, COUNT),  # every node below: the first is named
    ({"inter_node_busbw_min_gbps": 1e9}, None, 1),  # the node pair: no one node to name
])
def test_explicit_cross_node_thresholds_make_a_bad_node(tmp_path: Path, thresholds: dict[str, float],
                                                        named: int | None, count: int) -> None:
    port = free_port()
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    procs = [start(nodes[n], _job(n, port, count=count, phases=["preflight", "profile"],
                                  preflight_thresholds=thresholds)) for n in range(2)]
    assert finish(procs, timeout=180) == [3, 3], [(d / "payload.log").read_text() for d in nodes]
    for directory in nodes:  # every node reaches the same verdict
        found = events(directory)
        (error,) = [e for e in found if e["kind"] == "error"]
        assert error["bad_node"] is True and error["phase"] == "preflight"
        assert error.get("bad_node_rank") == named
        if named is None:
            assert "no one node named" in error["message"]
        else:
            assert "node 0 (" in error["message"] and "node 1 (" in error["message"]
        assert not [e for e in found if e.get("phase") == "profile"]
        assert found[-1] == {**found[-1], "kind": "done", "exit_code": 3}
