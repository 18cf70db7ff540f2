"""A cell of ``nodes: 2`` in this process against scripted in-memory nodes: the cluster is one
attempt, rented all or nothing, watched, started, collected and terminated member by member;
any member gone preempts it, a bad worker's host is left out of the next cluster, and a crashed
controller's, ``benchctl down``'s and the orphan sweep's clean-up reach every member."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from benchctl.engine.capacity import CapacityWait
from benchctl.engine.cell_runner import CellRunner
from benchctl.engine.cell_states import CellState
from benchctl.engine.cluster import RENDEZVOUS_PORTS
from benchctl.engine.scheduler import run_campaign, terminate_orphans
from benchctl.engine.teardown import down_campaign
from benchctl.payload.job import EXIT_BAD_NODE, EXIT_ERROR
from benchctl.provisioners.base import Node, NodeState, Offer
from tests.fakes.memory_provider import MemoryProvider, Script
from tests.memory_campaign import MemoryRun, memory_run
from tests.memory_campaign import offer as any_offer

CLUSTER_CELL = "  - {provider: local, gpu: cpu, count: 1, nodes: 2, price_usd_per_hour: 2.0}\n"
KEY = "local:cpux1:on-demand:nodes=2"


def offer(host: str, hourly_usd: float = 2.0) -> Offer:
    return any_offer(host, hourly_usd, count=1)


def cluster_run(tmp_path: Path, provider: MemoryProvider, steps: int = 3, max_attempts: int = 2) -> MemoryRun:
    return memory_run(tmp_path, provider, matrix=CLUSTER_CELL, steps=steps, max_attempts=max_attempts,
                      budget_usd=500.0)


def _timed(run: MemoryRun) -> list[int]:
    from benchctl.store import queries as q

    events = q.events(run.engine, run.cell(KEY).id or 0, kind="sample", phase="profile")
    return [json.loads(e.data_json)["timed_index"] for e in events if not json.loads(e.data_json)["warmup"]]


def _run_cell(run: MemoryRun) -> str:
    cell = run.cell(KEY)
    assert run.ctx.leases.take(cell.id or 0) is None
    try:
        return CellRunner(run.ctx, cell.id or 0).run().value
    finally:
        run.ctx.leases.give_back(cell.id or 0)


def test_a_healthy_cluster_is_one_attempt_on_every_member(tmp_path: Path) -> None:
    provider = MemoryProvider([offer("host-a"), offer("host-b")],
                              [Script(artifacts={"trace.json": b"{}"}), Script(starting_polls=4, log="worker ok\n")])
    run = cluster_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).complete
    (attempt,) = run.attempts(KEY)
    assert (attempt.outcome, attempt.open) == ("done", False)
    assert attempt.hourly_usd == 4.0, "the attempt bills every node"
    head, worker = provider.launched()
    assert head.status_calls > 1 and worker.status_calls > 4, "waited until every member ran"
    assert head.job is not None and worker.job is not None
    assert (head.job["nodes"], head.job["node_rank"], worker.job["node_rank"]) == (2, 0, 1)
    assert head.job["master_addr"] == worker.job["master_addr"] == "host-a", "node 0's rendezvous address"
    assert head.job["master_port"] == worker.job["master_port"] in RENDEZVOUS_PORTS
    assert len(head.started) == len(worker.started) == 1, "the payload runs on every member"
    assert {"job.json", "payload/__main__.py"} <= set(worker.shipped)
    assert head.gone is worker.gone is NodeState.TERMINATED
    assert attempt.terminated_at == max(head.ended_at or 0, worker.ended_at or 0), "billed until the last one ended"
    stored = Node.from_dict(json.loads(attempt.node_json or "{}"))
    assert [m.node_id for m in stored.members()] == [head.node.node_id, worker.node.node_id]
    assert [m.token for m in stored.members()] == [attempt.token, f"{attempt.token}-n1"]
    assert worker.heartbeats >= 1, "every member's dead-man switch is touched"
    local = tmp_path / "artifacts" / KEY / "1"
    assert (local / "artifacts" / "trace.json").read_bytes() == b"{}"
    assert (local / "node-1" / "payload.log").read_text() == "worker ok\n", "the worker's log is collected"
    assert _timed(run) == [0, 1, 2]
    assert provider.owned(run.ctx.campaign_tag) == []
    from benchctl.store import queries as q

    (result, _, _), = q.results(run.engine)
    assert result.hourly_usd == 4.0, "cost-to-train prices every node"


def test_a_failing_second_launch_terminates_the_first_and_closes_the_attempt_launch_failed(tmp_path: Path) -> None:
    provider = MemoryProvider([offer("host-a"), offer("host-b")], failing_launches=(2,))
    run = cluster_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).complete
    first, second = run.attempts(KEY)
    assert first.outcome == "launch_failed" and "launching" in (first.detail or "")
    assert first.node_json is None
    lone, *fresh = provider.launched()
    assert lone.gone is NodeState.TERMINATED and lone.terminate_calls == 1, "no part of a cluster left billing"
    assert second.outcome == "done" and len(fresh) == 2


def test_a_worker_preempted_mid_profile_preempts_the_attempt_and_a_new_cluster_measures_the_rest(
        tmp_path: Path) -> None:
    # node 0 finishes its batches while its worker, polled through its exit code, is gone at poll 6
    provider = MemoryProvider([offer("host-a"), offer("host-b")],
                              [Script(exit_code=None), Script(preempt_at_poll=7), Script(), Script()])
    run = cluster_run(tmp_path, provider, steps=6)
    assert run_campaign(run.ctx, concurrency=1).complete
    first, second = run.attempts(KEY)
    assert (first.outcome, second.outcome) == ("preempted", "done")
    assert "node 1 of 2 preempted" in (first.detail or "")
    head, worker, *fresh = provider.launched()
    assert worker.gone is NodeState.PREEMPTED and head.gone is NodeState.TERMINATED, "the rest was terminated"
    assert first.terminated_at == max(head.ended_at or 0, worker.ended_at or 0)
    assert len(fresh) == 2 and {n.node.node_id for n in fresh}.isdisjoint({head.node.node_id, worker.node.node_id})
    assert fresh[0].job is not None and fresh[0].job["profile_steps_done"] > 0, "a new cluster resumes the profile"
    assert sorted(_timed(run)) == list(range(6)) and len(_timed(run)) == 6, "every timed step exactly once"
    assert run.states(KEY).count("preempted") == 1


def test_a_worker_that_fails_ends_the_attempt_with_its_log_tail(tmp_path: Path) -> None:
    provider = MemoryProvider([offer("host-a"), offer("host-b")],
                              [Script(exit_code=None), Script(events=[[]], exit_code=EXIT_ERROR,
                                                              log="rank 2\nRuntimeError: gloo refused\n")])
    run = cluster_run(tmp_path, provider, max_attempts=1)
    assert run_campaign(run.ctx, concurrency=1).states == {KEY: "failed"}
    (attempt,) = run.attempts(KEY)
    assert attempt.outcome == "error"
    assert attempt.detail == "node 1: payload exit 1: rank 2 | RuntimeError: gloo refused"
    assert all(n.gone is NodeState.TERMINATED for n in provider.launched())


def test_every_member_is_terminated_even_when_one_terminate_raises(tmp_path: Path) -> None:
    provider = MemoryProvider([offer("host-a"), offer("host-b")])
    provider.terminate_raises["mem-1"] = RuntimeError("the API fell over")
    run = cluster_run(tmp_path, provider, max_attempts=1)
    run_campaign(run.ctx, concurrency=1)
    (attempt,) = run.attempts(KEY)
    head, worker = provider.launched()
    assert worker.gone is NodeState.TERMINATED, "node 1 terminated though node 0's terminate raised"
    assert head.terminate_calls >= 1 and not attempt.open
    assert "node 0 (mem-1): RuntimeError: the API fell over" in (attempt.detail or "")


def test_a_bad_worker_host_is_left_out_of_the_next_cluster_not_node_0s(tmp_path: Path) -> None:
    bad = Script(events=[[{"t": 1.0, "kind": "phase_start", "phase": "preflight"}],
                         [{"t": 1.0, "kind": "error", "phase": "preflight", "message": "node 1: NIC mlx5_3 down",
                           "bad_node": True, "bad_node_rank": 1}]], exit_code=EXIT_BAD_NODE)
    provider = MemoryProvider([offer("host-a", 1.0), offer("host-b", 2.0), offer("host-c", 3.0)],
                              [bad, Script(exit_code=None), Script(), Script()])
    run = cluster_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).complete
    first, second = run.attempts(KEY)
    assert first.outcome == "bad_node" and "(node 1 of 2: host-b)" in (first.detail or "")
    hosts = [n.node.host for n in provider.launched()]
    assert hosts == ["host-a", "host-b", "host-a", "host-c"], "node 0's host kept, the bad worker's replaced"
    assert second.outcome == "done"


def test_a_bad_node_rank_that_is_no_rank_blames_no_host(tmp_path: Path) -> None:
    # issue 27 item 6: a verdict that names no node (here a rank that is a bool, not an int) is not
    # node 0's fault: no host is excluded and the attempt is no bad_node
    bad = Script(events=[[{"t": 1.0, "kind": "error", "phase": "preflight", "message": "bad",
                           "bad_node": True, "bad_node_rank": True}]], exit_code=EXIT_BAD_NODE)
    provider = MemoryProvider([offer("host-a", 1.0), offer("host-b", 2.0), offer("host-c", 3.0)],
                              [bad, Script(exit_code=None), Script(), Script()])
    run = cluster_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).complete
    assert [n.node.host for n in provider.launched()][2] == "host-a", "node 0's host is not excluded"
    assert "bad_node" not in [a.outcome for a in run.attempts(KEY)]


def _rent_and_crash(run: MemoryRun, start: bool = True) -> tuple[Node, MemoryProvider]:
    """A controller rents the cluster, starts the payload, then dies (nothing closed)."""
    cell_id = run.cell(KEY).id or 0
    run.ctx.leases.take(cell_id)
    runner = CellRunner(run.ctx, cell_id)
    runner.transition(CellState.PROVISIONING)
    rented = runner._rent(set(), CapacityWait(run.ctx.capacity))
    assert rented.attempt is not None and rented.node is not None
    if start:
        runner.driver._start_payload(rented.attempt, rented.node, run.provider.transport(rented.node))
    run.ctx.leases.give_back(cell_id)
    return rented.node, run.provider


def test_a_crashed_controllers_cluster_is_reattached_while_every_member_runs(tmp_path: Path) -> None:
    provider = MemoryProvider([offer("host-a"), offer("host-b")], [Script(), Script()])
    run = cluster_run(tmp_path, provider)
    _rent_and_crash(run)
    assert _run_cell(run) == "done"
    (attempt,) = run.attempts(KEY)
    assert attempt.outcome == "done"
    assert [len(n.started) for n in provider.launched()] == [1, 1], "started once on each member"
    assert any("re-attaching to attempt 1" in line for line in run.logged)


def test_a_crash_between_starting_node_0_and_the_others_ends_that_attempt_and_runs_a_new_cluster(
        tmp_path: Path) -> None:
    provider = MemoryProvider([offer("host-a"), offer("host-b")], [Script(exit_code=None), Script(), Script()])
    run = cluster_run(tmp_path, provider)
    _rent_and_crash(run)
    provider.launched()[1].started.clear()  # node 1's start never happened
    assert _run_cell(run) == "done"
    first, second = run.attempts(KEY)
    assert first.outcome == "error" and "not started on node 1" in (first.detail or "")
    assert second.outcome == "done"
    assert all(n.gone is NodeState.TERMINATED for n in provider.launched())


def test_a_crashed_controllers_cluster_with_a_member_gone_is_ended_member_by_member(tmp_path: Path) -> None:
    provider = MemoryProvider([offer("host-a"), offer("host-b")], [Script(), Script(), Script(), Script()])
    run = cluster_run(tmp_path, provider)
    _rent_and_crash(run, start=False)
    provider.preempt("mem-2")
    assert _run_cell(run) == "done"
    first, second = run.attempts(KEY)
    assert first.outcome == "preempted" and "node 1 of 2 (preempted) gone" in (first.detail or "")
    assert second.outcome == "done"
    head, worker, *_ = provider.launched()
    assert head.gone is NodeState.TERMINATED and worker.gone is NodeState.PREEMPTED
    assert first.terminated_at == max(head.ended_at or 0, worker.ended_at or 0)


def test_a_cluster_launch_cut_short_by_a_crash_is_found_by_its_member_tokens(tmp_path: Path) -> None:
    from benchctl.store import queries as q

    provider = MemoryProvider([offer("host-a"), offer("host-b")])
    run = cluster_run(tmp_path, provider)
    cell_id = run.cell(KEY).id or 0
    attempt = q.new_attempt(run.engine, cell_id, "bc-crashed0000000", "memory", "on-demand", "d/{number}", 4.0,
                            "host-a")
    provider.offers(CellRunner(run.ctx, cell_id)._request())
    provider.launch(offer("host-a"), "bc-crashed0000000", run.ctx.campaign_tag)  # node 0 …
    provider.launch(offer("host-a"), "bc-crashed0000000-n1", run.ctx.campaign_tag)  # … and node 1, then the crash
    assert _run_cell(run) == "done"
    closed = q.attempts(run.engine, cell_id)[0]
    assert closed.id == attempt.id and closed.outcome == "lost"
    assert [n.gone for n in provider.launched()[:2]] == [NodeState.TERMINATED, NodeState.TERMINATED]


def test_down_terminates_every_member_and_closes_the_attempt_at_the_last_end(tmp_path: Path) -> None:
    provider = MemoryProvider([offer("host-a"), offer("host-b")], [Script(exit_code=None)])
    run = cluster_run(tmp_path, provider)
    _rent_and_crash(run)
    provider.owned = lambda tag: []  # type: ignore[method-assign]  # only the store knows the cluster
    run.ctx.providers.fakes["memory"] = provider  # type: ignore[attr-defined]  # the nodes' own name
    report = down_campaign(run.engine, run.ctx.campaign_id, run.ctx.campaign_tag, {"local"}, run.ctx.providers,
                           lambda line: None)
    assert sorted(report.terminated) == ["mem-1", "mem-2"] and report.closed_attempts == 1
    head, worker = provider.launched()
    assert head.gone is worker.gone is NodeState.TERMINATED
    (attempt,) = run.attempts(KEY)
    assert (attempt.open, attempt.outcome) == (False, "down")
    assert attempt.terminated_at == max(head.ended_at or 0, worker.ended_at or 0)


def test_the_orphan_sweep_keeps_every_member_of_an_open_attempt(tmp_path: Path) -> None:
    provider = MemoryProvider([offer("host-a"), offer("host-b")], [Script(exit_code=None)])
    run = cluster_run(tmp_path, provider)
    _rent_and_crash(run)
    stray = provider.launch(offer("host-c"), "bc-nobody000000000-n1", run.ctx.campaign_tag)
    assert terminate_orphans(run.ctx) == [stray.node_id]
    head, worker, orphan = provider.launched()
    assert head.gone is None and worker.gone is None and orphan.gone is NodeState.TERMINATED


def test_the_batch_check_counts_every_rank_of_every_node(tmp_path: Path) -> None:
    import pytest

    from benchctl.campaign.spec import parse_campaign
    from benchctl.errors import SpecError
    from tests.conftest import TINY_CAMPAIGN

    def cell(nodes: int) -> str:
        return f"  - {{provider: local, gpu: cpu, count: 1, nodes: {nodes}, price_usd_per_hour: 1.0}}\n"

    # total_batch_size 128 = 2 × 32 × 1 rank × 2 nodes: one step; × 4 nodes it is half a step
    text = TINY_CAMPAIGN.format(name="b", matrix=cell(2), steps=3, max_attempts=1)
    assert parse_campaign(text, "b.yaml").cells[0].nodes == 2
    with pytest.raises(SpecError, match=r"device_batch_size × sequence_len × count × nodes = 2 × 32 × 1 × 4 = 256"):
        parse_campaign(TINY_CAMPAIGN.format(name="b", matrix=cell(4), steps=3, max_attempts=1), "b.yaml")


def test_an_interrupt_while_terminating_one_member_still_terminates_the_others() -> None:
    import pytest

    from benchctl.engine.cluster import terminate_all

    head = Node(provider="memory", node_id="a", token="t", campaign_tag="c", offer=offer("host-a"))
    cluster = replace(head, peers=(replace(head, node_id="b", token="t-n1"), replace(head, node_id="c", token="t-n2")))
    asked: list[str] = []

    def terminate(member: Node) -> None:
        asked.append(member.node_id)
        if member.node_id == "a":
            raise KeyboardInterrupt
        if member.node_id == "b":
            raise RuntimeError("b failed")

    with pytest.raises(KeyboardInterrupt):
        terminate_all(terminate, cluster)
    assert asked == ["a", "b", "c"]
    assert terminate_all(lambda member: None, cluster) == []
