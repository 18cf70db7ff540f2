"""The local provider's clusters: N "nodes" of processes on N of its virtual hosts, rented as one
unit under the machine lock, the rendezvous on 127.0.0.1, a preemption fault on node rank 1; and
(slow) a 2-node local cell end to end through the CLI with node 1 preempted mid-profile (on the
payload stand-in's ranks, whose every step waits for both nodes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.provisioners.base import Node, NodeState, OfferRequest, ProviderError
from benchctl.provisioners.local import provider as local
from benchctl.provisioners.local.processes import node_processes
from benchctl.provisioners.local.provider import LocalProvider
from tests.conftest import REPO, Tokens

CHECK_LOCK = "from benchctl.provisioners.local import machine_lock; print(machine_lock.held_elsewhere())"


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[LocalProvider]:
    prov = LocalProvider(tmp_path / "nodes")
    yield prov
    for path in (tmp_path / "nodes").glob("*/node.json"):  # never leave a process behind
        record = local._read_record(path.parent)
        if record is not None and record["node"] is not None:
            prov.terminate(Node.from_dict(record["node"]))


def _request(nodes: int = 2, exclude: tuple[str, ...] = (), faults: dict | None = None) -> OfferRequest:
    extra: dict = {"nodes": nodes} if nodes > 1 else {}
    if faults:
        extra["faults"] = faults
    return OfferRequest(gpu="cpu", count=1, market="on-demand", price_usd_per_hour=0.5, exclude_hosts=exclude,
                        label="cell-a", extra=extra)


def _held_elsewhere() -> bool:
    """What another process sees of this machine's local lock."""
    out = subprocess.run([sys.executable, "-c", CHECK_LOCK], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    return out.strip() == "True"


def test_a_cluster_is_n_nodes_on_hosts_not_excluded_holding_the_lock_until_the_last_ends(
        provider: LocalProvider, tok: Tokens) -> None:
    offer = provider.offers(_request(nodes=3, exclude=("local-1",)))[0]
    cluster = provider.launch_cluster(offer, 3, tok("c"), "camp")
    members = cluster.members()
    assert [m.token for m in members] == [tok("c"), tok("c") + "-n1", tok("c") + "-n2"]
    assert [m.offer.host for m in members] == ["local-0", "local-2", "local-3"], "a bad host is no member"
    assert all(provider.status(m) is NodeState.RUNNING for m in members)
    assert sorted(n.token for n in provider.owned("camp")) == [tok("c"), tok("c") + "-n1", tok("c") + "-n2"]
    assert provider.rendezvous_address(cluster) == "127.0.0.1"
    provider.terminate(members[0])
    assert _held_elsewhere(), "the machine stays held while a member runs"
    for member in members[1:]:
        provider.terminate(member)
    assert not _held_elsewhere(), "the last member gave the machine back"
    assert all(node_processes(m.token) == [] for m in members)


def test_too_few_hosts_for_the_cluster_launch_nothing(provider: LocalProvider, tok: Tokens) -> None:
    offer = provider.offers(_request(nodes=4, exclude=("local-3",)))[0]
    with pytest.raises(ProviderError, match=r"a 4-node local cluster needs 4 hosts .* 3 are left"):
        provider.launch_cluster(offer, 4, tok("f"), "camp")
    assert provider.owned("camp") == []


def test_a_failing_member_launch_terminates_the_members_launched(provider: LocalProvider,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   tok: Tokens) -> None:
    launch = provider._launch

    def second_fails(offer, token, tag):  # type: ignore[no-untyped-def]
        if token.endswith("-n1"):
            raise ProviderError("the second node did not start")
        return launch(offer, token, tag)

    monkeypatch.setattr(provider, "_launch", second_fails)
    offer = provider.offers(_request())[0]
    with pytest.raises(ProviderError, match="the second node did not start"):
        provider.launch_cluster(offer, 2, tok("g"), "camp")
    assert provider.owned("camp") == [] and node_processes(tok("g")) == []
    assert not _held_elsewhere()


def test_a_clusters_preemption_fault_kills_node_rank_1_once_node_0_recorded_the_steps(
        provider: LocalProvider, tok: Tokens) -> None:
    offer = provider.offers(_request(faults={"preempt_at_step": 2, "shm_mb": 64}))[0]
    cluster = provider.launch_cluster(offer, 2, tok("p"), "camp")
    head, worker = cluster.members()
    assert head.offer.details == {"faults": {"shm_mb": 64}, "cell": "cell-a"}, "node 0 keeps its host's faults"
    assert worker.offer.details.get("faults") == {"preempt_at_step": 2}, "local-1 is not a faulty host"
    events = provider.root / tok("p") / "home" / "run" / "events.jsonl"
    events.parent.mkdir(parents=True)
    sample = {"kind": "sample", "phase": "profile", "warmup": False}
    events.write_text(json.dumps(sample) + "\n")
    assert provider.status(worker) is NodeState.RUNNING
    events.write_text((json.dumps(sample) + "\n") * 2)
    deadline = time.monotonic() + 10
    while provider.status(worker) is NodeState.RUNNING and time.monotonic() < deadline:
        time.sleep(0.05)
    assert provider.status(worker) is NodeState.PREEMPTED
    assert provider.status(head) is NodeState.RUNNING, "one member lost, the other still runs"
    assert provider.ended_at(worker) is not None


TWO_NODE_CAMPAIGN = """\
name: pair
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
defaults: {market: spot, max_attempts: 3}
payload:
  phases: [preflight, profile]
  profile: {device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: %d}
providers:
  local: {python: "%s"}
matrix:
  - {provider: local, gpu: cpu, count: 1, nodes: 2, price_usd_per_hour: 0.5, faults: {preempt_at_step: 3}}
"""
TWO_NODE_KEY = "local:cpux1:spot:nodes=2"


@pytest.mark.slow
def test_a_two_node_local_cell_survives_node_1_preempted_mid_profile(home: Path, tmp_path: Path,
                                                                    standin_python: Path) -> None:
    # the stand-in's ranks, whose every step waits for both nodes (the real payload across nodes, a node
    # lost included: tests/payload/test_multi_node_runner.py; through the engine: test_cluster_bad_worker)
    from tests.conftest import run_cli
    from tests.local_campaign import no_live_nodes, only_cell

    steps = 8
    path = tmp_path / "pair.yaml"
    path.write_text(TWO_NODE_CAMPAIGN % (steps, standin_python))
    result = run_cli("run", str(path), "--poll-interval", "0.1", "--status-interval", "0.5", home=home, timeout=400)
    engine, cell = only_cell(home)
    from benchctl.store import queries as q

    attempts = q.attempts(engine, cell.id or 0)
    assert (cell.key, cell.state) == (TWO_NODE_KEY, "done"), (cell.reason, [(a.outcome, a.detail) for a in attempts],
                                                             result.stderr[-3000:])
    assert result.returncode == 0, result.stderr
    first, *_, last = attempts
    assert first.outcome == "preempted" and "node 1 of 2 preempted" in (first.detail or ""), first.detail
    assert last.outcome == "done"
    samples = [json.loads(e.data_json) for e in q.events(engine, cell.id or 0, kind="sample", phase="profile")]
    assert sorted(s["timed_index"] for s in samples if not s["warmup"]) == list(range(steps)), "each step once"
    nodes = home / "nodes"
    for attempt in attempts:
        cluster = Node.from_dict(json.loads(attempt.node_json or "{}"))
        assert [m.token for m in cluster.members()] == [attempt.token, f"{attempt.token}-n1"]
        for rank, member in enumerate(cluster.members()):
            job = json.loads((nodes / member.token / "home" / attempt.remote_dir / "job.json").read_text())
            assert (job["nodes"], job["node_rank"], job["master_addr"]) == (2, rank, "127.0.0.1")
            assert f"kill -9 {member.details['leader_pid']}" in job["idle_shutdown"], "each node powers itself off"
    head, gone = Node.from_dict(json.loads(first.node_json or "{}")).members()
    lost_at = float((nodes / gone.token / "ended_at").read_text())
    terminated_at = json.loads((nodes / head.token / "node.json").read_text())["terminated_at"]
    assert first.terminated_at == max(lost_at, terminated_at), "billed until the last member ended"
    worker = home / "artifacts" / "pair" / TWO_NODE_KEY / str(last.number) / "node-1"
    assert (worker / "payload.log").is_file()
    verdict = json.loads((worker / "artifacts" / "preflight.json").read_text())  # the worker's own, replayable
    assert verdict["verdict"] == "pass" and (worker / "artifacts" / "facts" / "cluster.json").is_file()
    (row, _, _), = q.results(engine)
    assert row.timed_steps == steps
    no_live_nodes(home)
