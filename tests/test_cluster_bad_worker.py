"""A cluster's worker that fails its own preflight. End to end (slow): a 2-node local cell whose
worker's host is faulty (``faults.node_ranks: [1]``) ends that attempt ``bad_node`` naming node 1's
host, the next cluster leaves that host out (node 0's is kept) and finishes the cell; the campaign's
bad hosts are that host alone. Then the engine's parts of it against scripted nodes (fast)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchctl.payload.job import EXIT_BAD_NODE, EXIT_ERROR
from benchctl.provisioners.base import Node
from tests.conftest import cli_here, run_cli
from tests.local_campaign import no_live_nodes, only_cell

CAMPAIGN = """\
name: badworker
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 64}
defaults: {market: on-demand, max_attempts: 3}
payload:
  phases: [preflight, collectives]
  collectives: {ops: [all_reduce], min_bytes: 8, max_bytes: 1K, factor: 32, warmup_iters: 1, iters: 2}
matrix:
  - {provider: local, gpu: cpu, count: 1, nodes: 2, price_usd_per_hour: 0.5,
     faults: {env: {NCCL_SHM_DISABLE: "1"}, node_ranks: [1]}}
"""
KEY = "local:cpux1:on-demand:nodes=2"


@pytest.mark.slow
def test_a_bad_worker_is_named_and_replaced_and_the_next_cluster_finishes(home: Path, tmp_path: Path) -> None:
    from benchctl.engine.bad_hosts import campaign_bad_hosts
    from benchctl.engine.cluster import member_hosts
    from benchctl.store import queries as q

    path = tmp_path / "badworker.yaml"
    path.write_text(CAMPAIGN)
    result = run_cli("run", str(path), "--poll-interval", "0.1", "--status-interval", "0.5", home=home, timeout=400)
    engine, cell = only_cell(home)
    attempts = q.attempts(engine, cell.id or 0)
    assert (cell.key, cell.state) == (KEY, "done"), (cell.reason, [(a.outcome, a.detail) for a in attempts],
                                                     result.stderr[-3000:])
    assert result.returncode == 0, result.stderr
    clusters = [member_hosts(Node.from_dict(json.loads(a.node_json or "{}"))) for a in attempts]
    assert clusters == [["local-0", "local-1"], ["local-0", "local-2"]], "node 0's host kept, the worker's replaced"
    first, last = attempts
    assert first.outcome == "bad_node", first.detail
    assert "node 1 of 2: local-1" in (first.detail or "") and "NCCL_SHM_DISABLE" in (first.detail or ""), first.detail
    assert last.outcome == "done"
    assert campaign_bad_hosts(engine, cell.campaign_id) == {"local-1"}, "node 0's host is not blamed"
    facts = home / "artifacts" / "badworker" / KEY / str(last.number) / "artifacts" / "facts"
    replay = cli_here("preflight", "--replay", str(facts), "--format", "json", home=home)
    report = json.loads(replay.stdout)
    assert (replay.returncode, report["nodes"]) == (0, 2), replay.stdout
    assert {"intra_node_busbw", "inter_node_busbw", "cluster_falloff"} <= {c["name"] for c in report["checks"]}
    no_live_nodes(home)


# -- the engine against scripted in-memory nodes (fast) ------------------------------------------

PREFLIGHT_START = {"t": 1.0, "kind": "phase_start", "phase": "preflight"}
PREFLIGHT_END = {"t": 1.0, "kind": "phase_end", "phase": "preflight", "elapsed_s": 1.0, "summary": {}}


def _bad_worker_run(tmp_path: Path, head: Any, worker: Any) -> Any:
    from tests.fakes.memory_provider import MemoryProvider, Script
    from tests.memory_campaign import memory_run
    from tests.memory_campaign import offer as any_offer

    offers = [any_offer(host, price, count=1) for host, price in (("host-a", 1.0), ("host-b", 2.0), ("host-c", 3.0))]
    provider = MemoryProvider(offers, [head, worker, Script(), Script()])
    run = memory_run(tmp_path, provider, matrix="  - {provider: local, gpu: cpu, count: 1, nodes: 2, "
                     "price_usd_per_hour: 2.0}\n", max_attempts=2, budget_usd=500.0)
    return run, provider


def _hosts_and_bad_hosts(run: Any, provider: Any) -> tuple[list[str | None], set[str]]:
    from benchctl.engine.bad_hosts import campaign_bad_hosts
    from benchctl.engine.scheduler import run_campaign

    assert run_campaign(run.ctx, concurrency=1).complete, [(a.outcome, a.detail) for a in run.attempts(MEMORY_KEY)]
    return [n.node.host for n in provider.launched()], campaign_bad_hosts(run.engine, run.ctx.campaign_id)


MEMORY_KEY = "local:cpux1:on-demand:nodes=2"


def test_a_workers_own_bad_verdict_ends_the_attempt_bad_node_naming_its_host(tmp_path: Path) -> None:
    from tests.fakes.memory_provider import Script

    run, provider = _bad_worker_run(tmp_path, Script(events=[[PREFLIGHT_START]], exit_code=None),
                                    Script(events=[[]], exit_code=EXIT_BAD_NODE, log="preflight failed on node 1\n"))
    hosts, bad = _hosts_and_bad_hosts(run, provider)
    first, second = run.attempts(MEMORY_KEY)
    assert first.outcome == "bad_node", first.detail  # was: error, and no host named
    assert first.detail == "node 1: payload exit 3: preflight failed on node 1 (node 1 of 2: host-b)"
    assert hosts == ["host-a", "host-b", "host-a", "host-c"] and second.outcome == "done"
    assert bad == {"host-b"}, "read back from the attempt: node 0's events do not name the worker"


def test_node_0_failing_after_a_worker_left_bad_is_still_the_workers_bad_node(tmp_path: Path) -> None:
    from tests.fakes.memory_provider import Script

    gone = {"t": 2.0, "kind": "error", "phase": "preflight", "message": "ClusterProbeFailed: a peer node is gone"}
    run, provider = _bad_worker_run(tmp_path, Script(events=[[PREFLIGHT_START], [gone]], exit_code=EXIT_ERROR),
                                    Script(events=[[], []], exit_code=EXIT_BAD_NODE, log="bad\n"))
    hosts, bad = _hosts_and_bad_hosts(run, provider)
    first, _ = run.attempts(MEMORY_KEY)
    assert (first.outcome, bad) == ("bad_node", {"host-b"}), first.detail  # was: error (node 0's exit 1)
    assert hosts[2:] == ["host-a", "host-c"]


def test_node_0_failing_before_the_bad_worker_exits_is_that_workers_bad_node_by_its_error_event(
        tmp_path: Path) -> None:
    # A worker's ranks leave once its preflight failed: node 0's collectives fail at once, often
    # before the worker's exit_code is written. Its error event is already there.
    from tests.fakes.memory_provider import Script

    gone = {"t": 2.0, "kind": "error", "phase": "collectives", "message": "RanksFailed: rank 0 exited"}
    verdict = {"t": 1.0, "kind": "error", "phase": "preflight", "message": "preflight failed on node 1: nccl_env",
               "bad_node": True, "bad_node_rank": 1}
    run, provider = _bad_worker_run(tmp_path, Script(events=[[PREFLIGHT_START], [gone]], exit_code=EXIT_ERROR),
                                    Script(events=[[], [], [verdict]], exit_code=None))
    hosts, bad = _hosts_and_bad_hosts(run, provider)
    first, _ = run.attempts(MEMORY_KEY)
    assert first.outcome == "bad_node", first.detail  # was: error (node 0's exit 1)
    assert first.detail == ("node 1: preflight found a bad node: preflight failed on node 1: nccl_env "
                            "(node 1 of 2: host-b)")
    assert (hosts[2:], bad) == (["host-a", "host-c"], {"host-b"})


FABRIC = {"t": 1.5, "kind": "error", "phase": "preflight", "bad_node": True,
          "message": "preflight failed across nodes, the fabric between the nodes is bad (no one node named): "
                     "inter_node_busbw: node pair at 150 GB/s"}


@pytest.mark.parametrize("who", ["node 0", "worker"])
def test_a_fabric_verdict_that_names_no_node_blames_no_host_and_is_no_bad_node(tmp_path: Path, who: str) -> None:
    """Every node's preflight says the fabric (no ``bad_node_rank``): the attempt is an error, not
    ``bad_node``; no host is excluded (node 0's host was), the next cluster may take the same hosts."""
    from tests.fakes.memory_provider import Script

    if who == "node 0":
        head = Script(events=[[PREFLIGHT_START, FABRIC]], exit_code=EXIT_BAD_NODE, log="bad fabric\n")
        worker = Script(events=[[]], exit_code=None)
    else:  # node 0 failed first (its ranks lost the worker's); the worker's verdict names no node
        gone = {"t": 2.0, "kind": "error", "phase": "preflight", "message": "ClusterProbeFailed: a peer node is gone"}
        head = Script(events=[[PREFLIGHT_START], [gone]], exit_code=EXIT_ERROR)
        worker = Script(events=[[], [], [FABRIC]], exit_code=None)
    run, provider = _bad_worker_run(tmp_path, head, worker)
    hosts, bad = _hosts_and_bad_hosts(run, provider)
    first, second = run.attempts(MEMORY_KEY)
    assert first.outcome == "error", first.detail  # was: bad_node, node 0's host excluded
    assert "no node named" in (first.detail or "") and "no host excluded" in (first.detail or ""), first.detail
    assert bad == set() and hosts == ["host-a", "host-b", "host-a", "host-b"] and second.outcome == "done"
    assert "bad_node" not in run.states(MEMORY_KEY)


def test_a_worker_that_cannot_reach_the_rendezvous_ends_the_attempt_as_an_error_naming_it(tmp_path: Path) -> None:
    """The worker's payload exits EXIT_RENDEZVOUS (5) before any phase: an error whose detail says
    which node could not reach node 0, no host excluded, no bad node."""
    from benchctl.payload.job import EXIT_RENDEZVOUS
    from tests.fakes.memory_provider import Script

    why = "rendezvous unreachable from node 1: no TCP connection to node 0 at 10.0.0.1:29500 within 10 s\n"
    run, provider = _bad_worker_run(tmp_path, Script(events=[[PREFLIGHT_START]], exit_code=None),
                                    Script(events=[[]], exit_code=EXIT_RENDEZVOUS, log=why))
    hosts, bad = _hosts_and_bad_hosts(run, provider)
    first, second = run.attempts(MEMORY_KEY)
    assert first.outcome == "error" and "payload exit 5: rendezvous unreachable from node 1" in (first.detail or "")
    assert bad == set() and hosts[2:] == ["host-a", "host-b"] and second.outcome == "done"


def test_the_cell_is_not_running_before_every_worker_passed_its_preflight(tmp_path: Path) -> None:
    from tests.fakes.memory_provider import Script

    later = {"t": 2.0, "kind": "phase_start", "phase": "collectives"}
    run, provider = _bad_worker_run(tmp_path, Script(events=[[PREFLIGHT_START], [PREFLIGHT_END], [later]],
                                                     exit_code=None),
                                    Script(events=[[], [], []], exit_code=EXIT_BAD_NODE, log="bad\n"))
    _, bad = _hosts_and_bad_hosts(run, provider)  # was: "cell cannot go from running to bad_node"
    assert run.states(MEMORY_KEY)[:3] == ["provisioning", "preflight", "bad_node"]
    assert bad == {"host-b"}


@pytest.mark.parametrize(("errors", "rank"), [
    ([], 1), ([{"message": "x"}], 1), ([{"bad_node": True, "bad_node_rank": 0}], 0),
    ([{"bad_node": True, "bad_node_rank": 2}], 2), ([{"bad_node": True}], None)])
def test_a_workers_bad_exit_names_what_its_error_names_else_itself(errors: list[dict[str, Any]],
                                                                   rank: int | None) -> None:
    from benchctl.engine.bad_hosts import worker_bad_rank

    assert worker_bad_rank(errors, 1) == rank


def test_only_a_worker_of_the_attempts_own_cluster_is_read_back_from_its_detail() -> None:
    from benchctl.engine.bad_hosts import named_in, naming
    from benchctl.provisioners.base import Offer

    def member(host: str) -> Node:
        offer = Offer(provider="p", offer_id=host, gpu="cpu", count=1, vcpus=1, region="r", hourly_usd=1.0,
                      market="on-demand", host=host)
        return Node(provider="p", node_id=host, token=host, campaign_tag="c", offer=offer)

    head, worker = member("host-a"), member("host-b")
    cluster = Node(**{**head.__dict__, "peers": [worker]})
    assert named_in(f"node 1: payload exit 3: … {naming(1, 2, 'host-b')}; terminating failed", cluster) == "host-b"
    for forged in ("(node 1 of 2: host-z)", "(node 0 of 2: host-a)", "(node 1 of 3: host-b)", "", None):
        assert named_in(forged, cluster) is None, forged


@pytest.mark.slow
def test_a_cpu_node_with_a_cuda_fault_still_joins_the_cluster_probe(tmp_path: Path) -> None:
    # The fault made node 1 skip the probe yet pass (its cuda_init check skips on CPU): node 0
    # waited out the 90 s budget and failed, naming no one.
    import os
    import time

    from tests.payload.test_multi_node_runner import _job, finish, free_port, start

    port, began = free_port(), time.monotonic()
    head = start(tmp_path / "n0", _job(0, port, phases=["preflight"], count=1))
    os.environ["BENCHCTL_FAULTS"] = json.dumps({"cuda_init": "error"})
    try:
        worker = start(tmp_path / "n1", _job(1, port, phases=["preflight"], count=1))
    finally:
        del os.environ["BENCHCTL_FAULTS"]
    assert finish([head, worker], timeout=80) == [0, 0]
    assert time.monotonic() - began < 60
    probes = json.loads((tmp_path / "n1" / "artifacts" / "facts" / "probes.json").read_text())
    assert "error" in probes["cuda_init"] and probes["cluster"]["nodes"] == 2


# -- the fault itself: which host gets it, and which cells may ask for it -------------------------

def test_node_ranks_put_the_faults_on_the_hosts_those_ranks_take(tmp_path: Path) -> None:
    from benchctl.provisioners.base import OfferRequest
    from benchctl.provisioners.local.provider import LocalProvider

    faults = {"cuda_init": "error", "node_ranks": [1], "hosts": 1, "env": {}, "preemptions": 1}
    provider = LocalProvider(tmp_path / "nodes")

    def request(*exclude: str) -> OfferRequest:
        return OfferRequest(gpu="cpu", count=1, market="on-demand", price_usd_per_hour=1.0, label="c",
                            exclude_hosts=exclude, extra={"faults": faults, "nodes": 2})

    head = provider.offers(request())[0]
    assert head.host == "local-0" and "faults" not in head.details, "node 0's host is healthy"
    assert head.details["peers"]["local-1"]["faults"] == {"cuda_init": "error", "env": {}, "preemptions": 1}
    assert [h for h, d in head.details["peers"].items() if d] == ["local-1"]
    assert all(not d for d in provider.offers(request("local-1"))[0].details["peers"].values()), \
        "once local-1 is excluded, the next cluster has no faulty host"


@pytest.mark.parametrize(("cell", "fragment"), [
    ("nodes: 1, faults: {cuda_init: error, node_ranks: [1]}", "the cell has one node: use faults.hosts"),
    ("nodes: 2, faults: {cuda_init: error, node_ranks: [2]}", "name node ranks of this cell's cluster (0 … 1"),
    ("nodes: 2, faults: {preempt_at_step: 3, node_ranks: [1]}", "preemption already hits node rank 1"),
    ("nodes: 2, faults: {cuda_init: error, node_ranks: []}", "node_ranks"),
    ("nodes: 2, faults: {cuda_init: error, node_ranks: [-1]}", "node_ranks"),
])
def test_node_ranks_outside_the_cells_cluster_are_a_clear_error(home: Path, tmp_path: Path, cell: str,
                                                                fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    faulty = 'nodes: 2, price_usd_per_hour: 0.5,\n     faults: {env: {NCCL_SHM_DISABLE: "1"}, node_ranks: [1]}'
    path.write_text(CAMPAIGN.replace(faulty, f"price_usd_per_hour: 0.5, {cell}"))
    assert "NCCL_SHM_DISABLE" not in path.read_text(), "the cell was replaced"
    result = cli_here("plan", str(path), home=home)
    assert result.returncode == 2 and fragment in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_node_recorded_before_for_a_verdict_naming_no_node_excludes_no_host(tmp_path: Path) -> None:
    """A store written before (a cluster's attempt closed ``bad_node`` on a fabric verdict) does not
    keep node 0's host excluded from the campaign's later clusters."""
    from benchctl.engine.bad_hosts import campaign_bad_hosts
    from benchctl.provisioners.base import Offer
    from benchctl.store import queries as q
    from benchctl.store.database import open_store

    engine = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    cell = q.NewCell(key="k", provider="local", gpu="cpu", count=1, market="on-demand", config_json="{}")
    campaign_id, _ = q.upsert_campaign(engine, "c", "{}", "/tmp/c.yaml", 10.0, [cell])
    (row,) = q.cells(engine, campaign_id)

    def member(host: str) -> Node:
        offer = Offer(provider="p", offer_id=host, gpu="cpu", count=1, vcpus=1, region="r", hourly_usd=1.0,
                      market="on-demand", host=host)
        return Node(provider="p", node_id=host, token=host, campaign_tag="c", offer=offer, host=host)

    for token, verdict in (("fabric", dict(FABRIC)), ("named", {**FABRIC, "bad_node_rank": 0})):
        attempt = q.new_attempt(engine, row.id or 0, token=token, provider="p", market="on-demand", remote_dir="x",
                                hourly_usd=1.0, host=f"host-{token}")
        head = member(f"host-{token}")
        q.attach_node(engine, attempt.id or 0, Node(**{**head.__dict__, "peers": (member("host-w"),)}).to_dict())
        q.record_events(engine, attempt.id or 0, [verdict], 0, 100)
        q.close_attempt(engine, attempt.id or 0, "bad_node", "payload exit 3")
    assert campaign_bad_hosts(engine, campaign_id) == {"host-named"}  # was: host-fabric too
