"""The engine in this process against scripted in-memory nodes (``tests/fakes/memory_provider.py``):
the cell's state machine, preemption and resumption, bad nodes, the budget, leases, a crashed
controller's attempts and Ctrl-C, each in milliseconds. ``test_engine.py`` and ``test_resilience.py``
drive the same behaviours end to end through the CLI and real payload processes (marked slow)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from benchctl.engine.capacity import CapacityWait
from benchctl.engine.cell_runner import CellRunner
from benchctl.engine.cell_states import CellState
from benchctl.engine.event_sync import sync_events
from benchctl.engine.scheduler import run_campaign, terminate_orphans
from benchctl.payload.job import EXIT_BAD_NODE, EXIT_ERROR
from benchctl.provisioners.base import Node, NodeState
from benchctl.store import leases as store_leases
from benchctl.store import queries as q
from benchctl.store.models import Attempt
from tests.fakes.memory_provider import MemoryProvider, Script, payload_events
from tests.memory_campaign import KEY, MemoryRun, memory_run, offer


def _run_cell(run: MemoryRun, key: str = KEY) -> str:
    cell = run.cell(key)
    assert run.ctx.leases.take(cell.id or 0) is None
    try:
        return CellRunner(run.ctx, cell.id or 0).run().value
    finally:
        run.ctx.leases.give_back(cell.id or 0)


def _timed(run: MemoryRun) -> list[tuple[int, int]]:
    """(attempt id, timed index) of every timed profile sample stored, in store order."""
    events = q.events(run.engine, run.cell().id or 0, kind="sample", phase="profile")
    return [(e.attempt_id, json.loads(e.data_json)["timed_index"]) for e in events
            if not json.loads(e.data_json)["warmup"]]


def test_a_healthy_node_goes_through_every_state_and_leaves_nothing_billing(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()], [Script(starting_polls=3, artifacts={"trace.json": b"{}"})])
    run = memory_run(tmp_path, provider)
    summary = run_campaign(run.ctx, concurrency=2)
    assert summary.complete and summary.states == {KEY: "done"}
    assert run.states() == ["provisioning", "preflight", "running", "collecting", "done"]
    (attempt,) = run.attempts()
    assert (attempt.outcome, attempt.open) == ("done", False)
    (node,) = provider.launched()
    assert node.gone is NodeState.TERMINATED and attempt.terminated_at == node.ended_at
    assert node.status_calls > 3, "waited for the node to run before shipping the payload"
    assert {"job.json", "payload/__main__.py"} <= set(node.shipped)
    assert node.job is not None and node.job["done_phases"] == [] and node.job["profile_steps_done"] == 0
    assert node.heartbeats >= 1, "the dead-man switch was touched while the payload ran"
    stored = q.events(run.engine, run.cell().id or 0)
    assert len(stored) == len(node.events.splitlines()), "every event line the node wrote is in the store"
    (result, _, _), = q.results(run.engine)
    assert result.timed_steps == 3 and result.hourly_usd == 2.0
    assert (tmp_path / "artifacts" / KEY / "1" / "artifacts" / "trace.json").read_bytes() == b"{}"
    assert provider.owned(run.ctx.campaign_tag) == []


def test_preemption_mid_profile_relaunches_and_the_new_node_measures_only_what_is_missing(tmp_path: Path) -> None:
    # poll 1..4: preflight start/end, profile start, warmup; 5..: timed steps 0, 1, ... — gone at poll 8
    provider = MemoryProvider([offer()], [Script(preempt_at_poll=8), Script()])
    run = memory_run(tmp_path, provider, steps=6)
    assert run_campaign(run.ctx, concurrency=1).complete
    first, second = run.attempts()
    assert (first.outcome, second.outcome) == ("preempted", "done")
    assert run.states()[:5] == ["provisioning", "preflight", "running", "preempted", "provisioning"]
    gone, fresh = provider.launched()
    assert gone.gone is NodeState.PREEMPTED and gone.terminate_calls == 1, "terminated all the same (idempotent)"
    assert first.terminated_at == gone.ended_at, "billed until the provider's end, not until we noticed"
    assert first.cost_usd is not None and first.cost_usd > 0
    assert fresh.job is not None
    assert fresh.job["done_phases"] == [], "profile is not done; preflight is never carried over"
    assert fresh.job["profile_steps_done"] == 3, "the new node is told the timed steps already recorded"
    started = [e.phase for e in q.events(run.engine, run.cell().id or 0, kind="phase_start")
               if e.attempt_id == second.id]
    assert started == ["preflight", "profile"], "a new node proves itself healthy again"
    timed = _timed(run)
    assert [i for a, i in timed if a == first.id] == [0, 1, 2]
    assert [i for a, i in timed if a == second.id] == [3, 4, 5]
    (result, _, _), = q.results(run.engine)
    assert result.timed_steps == 6
    for attempt, node in ((first, gone), (second, fresh)):
        stored = [e for e in q.events(run.engine, run.cell().id or 0) if e.attempt_id == attempt.id]
        assert len(stored) == len(node.events.splitlines()), "every event a node wrote before it went is stored"


def test_a_finished_phase_is_not_run_again_on_the_next_node(tmp_path: Path) -> None:
    # collectives end at poll 4; the node is gone at poll 6 (inside profile)
    provider = MemoryProvider([offer()], [Script(preempt_at_poll=6), Script()])
    run = memory_run(tmp_path, provider, phases="[preflight, collectives, profile]")
    assert run_campaign(run.ctx, concurrency=1).complete
    _, fresh = provider.launched()
    assert fresh.job is not None and fresh.job["done_phases"] == ["collectives"]


def test_a_bad_node_is_left_for_the_next_offer_on_another_host(tmp_path: Path) -> None:
    bad = Script(events=[[{"t": 1.0, "kind": "phase_start", "phase": "preflight"}],
                         [{"t": 1.0, "kind": "error", "phase": "preflight", "message": "GPU 1 is slow",
                           "bad_node": True}]], exit_code=EXIT_BAD_NODE)
    provider = MemoryProvider([offer("host-a", 1.0), offer("host-b", 2.0)], [bad, Script()])
    run = memory_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).complete
    first, second = run.attempts()
    assert first.outcome == "bad_node" and "payload exit 3: GPU 1 is slow" in (first.detail or "")
    assert (first.host, second.host) == ("host-a", "host-b"), "the cheaper bad host is not taken again"
    assert "bad_node" in run.states()
    assert [n.gone for n in provider.launched()] == [NodeState.TERMINATED, NodeState.TERMINATED]


def test_a_failing_payload_is_retried_until_max_attempts_with_the_log_tail_as_reason(tmp_path: Path) -> None:
    failing = Script(events=[[{"t": 1.0, "kind": "phase_start", "phase": "preflight"}]], exit_code=EXIT_ERROR,
                     log="loading\nImportError: no torch\n")
    provider = MemoryProvider([offer()], [failing])
    run = memory_run(tmp_path, provider, max_attempts=2)
    summary = run_campaign(run.ctx, concurrency=1)
    assert summary.states == {KEY: "failed"}
    assert [a.outcome for a in run.attempts()] == ["error", "error"]
    reason = run.cell().reason or ""
    assert reason.startswith("2 attempts used (max_attempts)") and "ImportError: no torch" in reason


def test_a_launch_that_fails_is_an_attempt_and_the_next_one_runs(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()], launch_failures=1)
    run = memory_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).complete
    assert [a.outcome for a in run.attempts()] == ["launch_failed", "done"]


def test_a_cell_without_offer_fails_with_reason_and_no_attempt(tmp_path: Path) -> None:
    run = memory_run(tmp_path, MemoryProvider([offer(count=8)]))
    assert run_campaign(run.ctx, concurrency=1).states == {KEY: "failed"}
    assert "has no offer for this cell now" in (run.cell().reason or "")
    assert run.attempts() == []


def test_a_launch_over_the_budget_fails_the_cell_before_anything_is_rented(tmp_path: Path) -> None:
    provider = MemoryProvider([offer(hourly_usd=400)])
    run = memory_run(tmp_path, provider)
    assert run_campaign(run.ctx, concurrency=1).states == {KEY: "failed"}
    reason = run.cell().reason or ""
    assert reason.startswith("budget:") and "budget_usd $5.00" in reason
    assert run.attempts() == [] and provider.launched() == []


def test_spend_reaching_the_budget_stops_the_running_attempt(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()], [Script(exit_code=None)])  # a payload that never ends
    run = memory_run(tmp_path, provider)
    cell_id = run.cell().id or 0

    def spend_elsewhere() -> None:  # money another controller spent on this campaign meanwhile
        while not provider.launched() or provider.launched()[0].reads < 3:
            time.sleep(0.001)
        with Session(run.engine) as s:
            s.add(Attempt(cell_id=cell_id, number=99, token="elsewhere", provider="local", market="on-demand",
                          remote_dir="-", hourly_usd=5.0, open=False, outcome="done",
                          launched_at=time.time() - 3600, terminated_at=time.time(), cost_usd=5.0))
            s.commit()

    spender = threading.Thread(target=spend_elsewhere)
    spender.start()
    assert _run_cell(run) == "failed"
    spender.join()
    assert (run.cell().reason or "").startswith("budget:")
    ours = [a for a in run.attempts() if a.token != "elsewhere"]
    assert [a.outcome for a in ours] == ["budget"] and not ours[0].open
    assert provider.launched()[0].gone is NodeState.TERMINATED


def test_a_lost_lease_stops_the_attempt_and_leaves_the_cell_to_its_new_owner(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()], [Script(exit_code=None)])
    run = memory_run(tmp_path, provider)
    cell_id = run.cell().id or 0

    def take_over() -> None:  # `benchctl down` revokes the campaign's leases
        while q.cell(run.engine, cell_id).state != "running":
            time.sleep(0.001)
        store_leases.revoke_all(run.engine, run.ctx.campaign_id)

    thief = threading.Thread(target=take_over)
    thief.start()
    _run_cell(run)
    thief.join()
    (attempt,) = run.attempts()
    assert attempt.open, "the attempt is left to the cell's new owner"
    assert provider.launched()[0].gone is NodeState.TERMINATED
    assert run.cell().state == "running", "this controller wrote nothing to the cell after losing it"
    assert any("lost the cell's lease" in line for line in run.logged)
    assert run.ctx.leases.lost(cell_id)


def test_stop_flag_cancels_the_cell_and_terminates_its_node(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()], [Script(exit_code=None)])
    run = memory_run(tmp_path, provider)

    def interrupt() -> None:
        while not provider.launched() or provider.launched()[0].reads < 3:
            time.sleep(0.001)
        run.ctx.stop.set()

    ctrl_c = threading.Thread(target=interrupt)
    ctrl_c.start()
    assert run_campaign(run.ctx, concurrency=1).states == {KEY: "cancelled"}
    ctrl_c.join()
    (attempt,) = run.attempts()
    assert attempt.outcome == "cancelled" and not attempt.open
    assert provider.launched()[0].gone is NodeState.TERMINATED


def test_a_crashed_controllers_attempt_is_reattached_while_its_node_runs(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()], [Script(exit_code=None)])
    run = memory_run(tmp_path, provider, steps=4)
    cell_id = run.cell().id or 0
    # a controller rents, starts the payload and reads a few events, then dies (SIGKILL: nothing closed)
    run.ctx.leases.take(cell_id)
    runner = CellRunner(run.ctx, cell_id)
    runner.transition(CellState.PROVISIONING)
    rented = runner._rent(set(), CapacityWait(run.ctx.capacity))
    assert rented.attempt is not None and rented.node is not None
    transport = provider.transport(rented.node)
    runner.driver._start_payload(rented.attempt, rented.node, transport)
    node = provider.launched()[0]
    while node.reads < 6:
        sync_events(run.engine, rented.attempt, transport)
    run.ctx.leases.give_back(cell_id)
    node.script.exit_code = 0  # the detached payload finishes while nobody watches
    assert _run_cell(run) == "done"
    (attempt,) = run.attempts()
    assert attempt.outcome == "done" and not attempt.open, "the same node finished the job"
    assert len(node.started) == 1, "the payload was not started again"
    assert [i for _, i in _timed(run)] == [0, 1, 2, 3], "every step recorded exactly once"
    assert any("re-attaching to attempt 1" in line for line in run.logged)
    assert node.gone is NodeState.TERMINATED


def test_a_crashed_controllers_attempt_whose_node_is_gone_is_closed_at_the_providers_end(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()])
    run = memory_run(tmp_path, provider)
    cell_id = run.cell().id or 0
    run.ctx.leases.take(cell_id)
    runner = CellRunner(run.ctx, cell_id)
    runner.transition(CellState.PROVISIONING)
    rented = runner._rent(set(), CapacityWait(run.ctx.capacity))  # the controller died right after the launch
    run.ctx.leases.give_back(cell_id)
    assert rented.node is not None
    provider.preempt(rented.node.node_id)
    ended = provider.launched()[0].ended_at
    assert _run_cell(run) == "done"
    first, second = run.attempts()
    assert (first.outcome, first.terminated_at, first.detail) == (
        "preempted", ended, "node gone while the controller was away")
    assert second.outcome == "done"


def test_a_node_launched_by_a_controller_that_died_before_recording_it_is_terminated(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()])
    run = memory_run(tmp_path, provider)
    cell_id = run.cell().id or 0
    attempt = q.new_attempt(run.engine, cell_id, "bc-lost", "memory", "on-demand", "benchctl/x/{number}", 2.0, "h")
    lost = provider.launch(offer(), attempt.token, run.ctx.campaign_tag)  # launched; node never attached
    assert _run_cell(run) == "done"
    first, second = run.attempts()
    assert (first.outcome, first.detail) == ("lost", "controller stopped before the launch returned")
    assert provider.nodes[lost.node_id].gone is NodeState.TERMINATED
    assert second.outcome == "done"


def test_orphans_are_terminated_but_another_campaigns_nodes_are_not(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()])
    run = memory_run(tmp_path, provider)
    orphan = provider.launch(offer(), "bc-orphan", run.ctx.campaign_tag)
    other = provider.launch(offer(), "bc-teammate", "bc-tiny-0123456789ab")  # same name, another store
    assert terminate_orphans(run.ctx) == [orphan.node_id]
    assert provider.status(orphan) is NodeState.TERMINATED
    assert provider.status(other) is NodeState.RUNNING


def test_a_node_preempted_before_it_ran_is_a_preemption(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()], [Script(starting_polls=10**6), Script()])
    run = memory_run(tmp_path, provider)

    def reclaim() -> None:
        while not provider.launched():
            time.sleep(0.001)
        provider.preempt("mem-1")

    thread = threading.Thread(target=reclaim)
    thread.start()
    assert run_campaign(run.ctx, concurrency=1).complete
    thread.join()
    first, _ = run.attempts()
    assert first.outcome == "preempted" and "before it was ready" in (first.detail or "")
    assert provider.launched()[0].started == [], "no payload was started on it"


def test_a_provider_limited_to_one_node_never_runs_two_side_by_side(tmp_path: Path) -> None:
    matrix = ("  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}\n"
              "  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 1.0}\n")
    provider = MemoryProvider([offer(count=1, hourly_usd=0.5), offer(count=2, hourly_usd=1.0)], max_parallel=1)
    run = memory_run(tmp_path, provider, matrix=matrix)
    assert run_campaign(run.ctx, concurrency=4).complete
    spans = sorted((a.launched_at or 0, a.terminated_at or 0) for c in q.cells(run.engine, run.ctx.campaign_id)
                   for a in q.attempts(run.engine, c.id or 0))
    assert len(spans) == 2 and spans[0][1] <= spans[1][0], "the second node started before the first ended"


def test_a_malformed_exit_code_is_an_attempt_error(tmp_path: Path) -> None:
    provider = MemoryProvider([offer()], [Script(exit_code=None), Script()])
    run = memory_run(tmp_path, provider)
    real = provider.launch

    def launch_and_break(*args: Any, **kwargs: Any) -> Node:
        node = real(*args, **kwargs)
        if node.node_id == "mem-1":
            provider.nodes["mem-1"].exit_code = lambda: b"oops\n"  # type: ignore[method-assign]
        return node

    provider.launch = launch_and_break  # type: ignore[method-assign]
    assert run_campaign(run.ctx, concurrency=1).complete
    first, _ = run.attempts()
    assert first.outcome == "error" and "not an exit status" in (first.detail or "")


@pytest.mark.parametrize("steps", [1, 5])
def test_payload_events_resume_where_the_job_says(steps: int) -> None:
    job = {"phases": ["preflight", "profile"], "done_phases": [], "profile": {"steps": steps, "warmup_steps": 1},
           "profile_steps_done": steps - 1}
    timed = [e["timed_index"] for (e,) in payload_events(job) if e["kind"] == "sample" and not e["warmup"]]
    assert timed == [steps - 1]
