"""Preemption injected by the local provider, the budget, the dead-man switch and `benchctl down`,
all through the real CLI."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from sqlmodel import Session

from benchctl.provisioners.base import Node, NodeState
from benchctl.provisioners.local.provider import LocalProvider
from benchctl.store import queries as q
from benchctl.store.models import Attempt
from tests.conftest import TINY_CAMPAIGN, cli_here, run_cli
from tests.local_campaign import home_store, no_live_nodes, only_cell, running_profile_node, start, wait_for

PREEMPTED_CELLS = """\
  - {provider: local, gpu: cpu, count: 1, market: spot, price_usd_per_hour: 0.5,
     faults: {preempt_at_step: 4, preemptions: 2}}
  - {provider: local, gpu: cpu, count: 2, market: spot, price_usd_per_hour: 1.0, faults: {preempt_after_s: 3, seed: 3}}
"""


def _timed_indexes(engine, cell_id: int) -> list[int]:  # type: ignore[no-untyped-def]
    samples = [json.loads(e.data_json) for e in q.events(engine, cell_id, kind="sample", phase="profile")]
    return sorted(s["timed_index"] for s in samples if not s["warmup"])


@pytest.mark.slow
def test_injected_preemptions_lose_no_sample_and_measure_each_step_once(home: Path, write_campaign,
                                                                      standin_python: Path) -> None:
    steps = 250  # the 1-rank cell is preempted at its 4th step twice; the 2-rank one 3.54 s after launch (the
    # seed's draw), before the stand-in's ranks could have profiled 250 steps of 20 ms
    path = write_campaign(matrix=PREEMPTED_CELLS, steps=steps, max_attempts=4, python=standin_python)
    result = run_cli("run", str(path), "--poll-interval", "0.1", "--status-interval", "0.5", home=home, timeout=300)
    assert result.returncode == 0, result.stderr
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    nodes = home / "nodes"
    resumed_profiles = 0
    for cell in q.cells(engine, campaign.id or 0):
        assert cell.state == "done", (cell.key, cell.reason)
        attempts = q.attempts(engine, cell.id or 0)
        outcomes = [a.outcome for a in attempts]
        assert outcomes[-1] == "done" and "preempted" in outcomes, (cell.key, outcomes)
        assert _timed_indexes(engine, cell.id or 0) == list(range(steps)), "each timed step exactly once"
        result_row = next(r for r, c, _ in q.results(engine) if c.id == cell.id)
        assert result_row.timed_steps == steps
        for attempt in attempts:
            remote = nodes / attempt.token / "home" / attempt.remote_dir
            on_node = [json.loads(x) for x in (remote / "events.jsonl").read_text().splitlines()]
            stored = [e for e in q.events(engine, cell.id or 0) if e.attempt_id == attempt.id]
            assert len(stored) == len(on_node), "every event the node wrote before it vanished is in the store"
            assert attempt.cost_usd is not None and attempt.terminated_at is not None
            if attempt.outcome == "preempted":
                ended = float((nodes / attempt.token / "ended_at").read_text())
                assert attempt.terminated_at == ended, "billed until the provider's end, not until we noticed"
        for k, attempt in enumerate(attempts):
            job = json.loads((nodes / attempt.token / "home" / attempt.remote_dir / "job.json").read_text())
            earlier = {json.loads(e.data_json)["timed_index"]
                       for e in q.events(engine, cell.id or 0, kind="sample", phase="profile")
                       if e.attempt_id in {a.id for a in attempts[:k]} and not json.loads(e.data_json)["warmup"]}
            assert job["profile_steps_done"] == len(earlier), "a new node is told the timed steps already recorded"
            resumed_profiles += job["profile_steps_done"] > 0
    assert resumed_profiles >= 1, "some node continued a profile a preempted node had started"
    no_live_nodes(home)


@pytest.mark.slow
def test_launch_over_budget_ends_the_cell_with_reason_budget(home: Path, write_campaign) -> None:
    path = write_campaign(matrix="  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 400}\n")
    result = run_cli("run", str(path), "--yes", home=home)
    assert result.returncode == 1
    engine, cell = only_cell(home)
    assert cell.state == "failed" and cell.reason is not None and cell.reason.startswith("budget:"), cell.reason
    assert "budget_usd $5.00" in cell.reason
    assert q.attempts(engine, cell.id or 0) == [], "nothing was launched"


@pytest.mark.slow
def test_run_asks_before_a_large_worst_case_and_refuses_without_a_terminal(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(TINY_CAMPAIGN.format(name="big", steps=3, max_attempts=2,
                                         matrix="  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 1}\n")
                    .replace("budget_usd: 5", "budget_usd: 500"))
    refused = run_cli("run", str(path), "--confirm-above", "1", home=home)
    assert refused.returncode == 2
    assert "up to $4.83 may be spent, above $1.00: pass --yes" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (home / "benchctl.db").exists() or q.campaigns(home_store(home)) == [], "nothing was written"


@pytest.mark.slow
def test_spend_reaching_the_budget_stops_a_running_attempt(home: Path, write_campaign, standin_python: Path,
                                                           profile_hold: Path) -> None:
    path = write_campaign(matrix="  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 1.0}\n", steps=400,
                          python=standin_python)
    proc = start(home, "run", str(path), "--poll-interval", "0.1", "--status-interval", "0.3")
    node = wait_for(lambda: running_profile_node(home))
    assert isinstance(node, Node)
    engine, cell = only_cell(home)
    with Session(engine) as s:  # money another controller spent on this campaign meanwhile
        s.add(Attempt(cell_id=cell.id or 0, number=99, token="elsewhere", provider="local", market="on-demand",
                      remote_dir="-", hourly_usd=5.0, open=False, outcome="done", launched_at=time.time() - 3600,
                      terminated_at=time.time(), cost_usd=5.0))
        s.commit()
    stopped_at = time.time()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    engine, cell = only_cell(home)
    assert cell.state == "failed" and (cell.reason or "").startswith("budget:"), cell.reason
    ours = [a for a in q.attempts(engine, cell.id or 0) if a.token != "elsewhere"]
    assert len(ours) == 1 and ours[0].outcome == "budget"
    assert (ours[0].terminated_at or 0) - stopped_at < 10, "stopped within a few status polls (0.3 s each)"
    assert LocalProvider(home / "nodes").status(node) is NodeState.TERMINATED
    no_live_nodes(home)


@pytest.mark.slow
def test_dead_man_switch_stops_an_abandoned_node_and_resume_bills_until_then(home: Path, write_campaign,
                                                                            standin_python: Path,
                                                                            profile_hold: Path) -> None:
    path = write_campaign(name="idle", steps=300, python=standin_python,
                          matrix="  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 1}\n")
    # 12 s: a busy machine's controller can miss a few heartbeats (0.5 s apart) in a row; a switch of
    # 3 s fired before the kill on a loaded CI run, the controller saw the node gone and ended it itself
    path.write_text(path.read_text().replace("budget_usd: 5", "budget_usd: 5\nmax_idle_minutes: 0.2"))
    proc = start(home, "run", str(path), "--poll-interval", "0.1", "--status-interval", "0.5")
    node = wait_for(lambda: running_profile_node(home))
    assert isinstance(node, Node)
    proc.send_signal(signal.SIGKILL)  # the laptop closes: no more heartbeats
    proc.wait()
    killed = time.time()
    provider = LocalProvider(home / "nodes")
    wait_for(lambda: provider.status(node) is NodeState.PREEMPTED, timeout=60)  # it powered itself off
    ended = float((home / "nodes" / node.token / "ended_at").read_text())
    assert ended > killed, "the switch stopped the node after the controller died, not while it watched"
    profile_hold.unlink()
    time.sleep(1)
    resumed = run_cli("resume", "--poll-interval", "0.1", home=home, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    engine, cell = only_cell(home)
    first = q.attempts(engine, cell.id or 0)[0]
    assert first.outcome == "preempted" and first.terminated_at == ended
    stopped = [json.loads(e.data_json) for e in q.events(engine, cell.id or 0, kind="error")]
    assert any(e.get("idle") for e in stopped), "the payload said why it stopped"
    assert _timed_indexes(engine, cell.id or 0) == list(range(300))
    no_live_nodes(home)


@pytest.mark.slow
def test_down_stops_a_running_campaign_and_resume_finishes_it(home: Path, write_campaign, standin_python: Path,
                                                             profile_hold: Path) -> None:
    path = write_campaign(steps=80, python=standin_python)  # the first cell's profile waits (profile_hold):
    proc = start(home, "run", str(path), "--poll-interval", "0.1", "--status-interval", "0.5")
    node = wait_for(lambda: running_profile_node(home))
    assert isinstance(node, Node)
    down = cli_here("down", "tiny", home=home)  # in this process: starts nothing, no signal handler
    profile_hold.unlink()
    assert down.returncode == 0, down.stderr
    assert "terminated 1 node(s)" in down.stdout and "cancelled 2 cell(s)" in down.stdout
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "lost the cell's lease" in err
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    cells = q.cells(engine, campaign.id or 0)
    assert {c.state for c in cells} == {"cancelled"}
    attempts = q.campaign_attempts(engine, campaign.id or 0)
    assert [a.outcome for a in attempts] == ["down"], "the controller launched nothing after down"
    no_live_nodes(home)
    assert run_cli("resume", "--poll-interval", "0.1", home=home, timeout=300).returncode == 0
    assert {c.state for c in q.cells(engine, campaign.id or 0)} == {"done"}
    no_live_nodes(home)


def test_down_needs_a_name_or_all(home: Path) -> None:
    result = cli_here("down", home=home)
    assert result.returncode == 2 and "--all" in result.stderr
    missing = cli_here("down", "nope", home=home)
    assert missing.returncode == 2 and "no campaign named 'nope'" in missing.stderr
