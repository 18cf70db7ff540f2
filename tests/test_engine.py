"""The engine through the real CLI: preemption, a killed controller, Ctrl-C, orphan nodes, failures.

Each test drives ``benchctl`` in a subprocess against a private BENCHCTL_HOME and injects the
fault from outside, as it would happen for real. Tests that only read a finished run, or go on from
one, share the tiny two-cell campaign run once per test run (``run_once``, as ``test_cli.py``).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from benchctl.provisioners.base import Node, NodeState
from benchctl.provisioners.local.provider import LocalProvider
from benchctl.store import queries as q
from tests.conftest import FAST_POLLS, TINY_CAMPAIGN, TWO_LOCAL_CELLS, cli_here, copy_home, run_cli, run_once
from tests.local_campaign import home_store, no_live_nodes, only_cell, running_profile_node, start, wait_for

ONE_CELL = "  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 2.0}\n"
NO_OFFER = "  - {provider: local, gpu: H100_SXM, count: 2, price_usd_per_hour: 20.0}\n"


@pytest.fixture
def finished(home: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny two-cell campaign (``TWO_LOCAL_CELLS``, default ``--concurrency`` 4), run once per
    test run through the real CLI; ``home`` is a private copy of its store and nodes, and the
    returned campaign file a private copy the test may edit."""
    shared_home, path, output = run_once(tmp_path_factory, "tiny", TINY_CAMPAIGN.format(
        name="tiny", matrix=TWO_LOCAL_CELLS, steps=3, max_attempts=2))
    assert output.startswith("exit 0\n"), output
    copy_home(shared_home, home)
    mine = tmp_path / path.name
    mine.write_text(path.read_text())
    return mine


@pytest.mark.slow
def test_spot_preemption_mid_profile_relaunches_on_a_new_node(home: Path, write_campaign,
                                                              standin_python: Path, profile_hold: Path) -> None:
    # the stand-in's ranks (that the real profile starts at profile_steps_done: tests/payload/test_one_process)
    steps = 300  # the profile waits after its first timed step (profile_hold): the preemption lands mid-profile
    path = write_campaign(matrix=ONE_CELL, steps=steps, python=standin_python)
    proc = start(home, "run", str(path), "--poll-interval", "0.1", "--status-interval", "0.5")
    node = wait_for(lambda: running_profile_node(home))
    assert isinstance(node, Node)
    LocalProvider(home / "nodes").preempt(node)  # the node vanishes without our terminate
    profile_hold.unlink()
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    engine, cell = only_cell(home)
    assert cell.state == "done"
    first, second = q.attempts(engine, cell.id or 0)
    assert (first.outcome, second.outcome) == ("preempted", "done")
    assert first.cost_usd is not None and first.cost_usd > 0
    started = q.events(engine, cell.id or 0, kind="phase_start")
    assert [e.phase for e in started if e.attempt_id == second.id] == ["preflight", "profile"], \
        "a new node proves itself healthy again"
    samples = [(e.attempt_id, json.loads(e.data_json)) for e in q.events(engine, cell.id or 0, kind="sample",
                                                                           phase="profile")]
    kept = [s["timed_index"] for a, s in samples if a == first.id and not s["warmup"]]
    assert kept == list(range(len(kept))) and kept, "timed steps measured before the preemption are kept"
    rest = [s["timed_index"] for a, s in samples if a == second.id and not s["warmup"]]
    assert rest == list(range(len(kept), steps)), "the new node measures only the steps not yet recorded"
    (result, _, _), = q.results(engine)
    assert result.timed_steps == steps
    assert "preempted" in err
    no_live_nodes(home)


@pytest.mark.slow
def test_killed_controller_resume_reattaches_and_loses_nothing(home: Path, write_campaign,
                                                             standin_python: Path, profile_hold: Path) -> None:
    path = write_campaign(matrix=ONE_CELL, steps=40, python=standin_python)
    proc = start(home, "run", str(path), "--poll-interval", "0.1")
    node = wait_for(lambda: running_profile_node(home))
    assert isinstance(node, Node)
    proc.kill()  # SIGKILL: no cleanup at all, the node keeps "billing"
    proc.wait()
    provider = LocalProvider(home / "nodes")
    assert provider.status(node) is NodeState.RUNNING, "the payload was started detached and must survive"
    profile_hold.unlink()
    resumed = run_cli("resume", "--poll-interval", "0.1", home=home)
    assert resumed.returncode == 0, resumed.stderr
    assert "re-attaching" in resumed.stderr
    engine, cell = only_cell(home)
    assert cell.state == "done"
    (attempt,) = q.attempts(engine, cell.id or 0)  # the same node finished the job
    assert attempt.outcome == "done" and not attempt.open
    samples = q.events(engine, cell.id or 0, kind="sample", phase="profile")
    steps = [json.loads(e.data_json)["step"] for e in samples]
    assert steps == list(range(41)), "every step recorded exactly once"
    assert provider.status(node) is NodeState.TERMINATED
    no_live_nodes(home)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_terminates_nodes_and_resume_finishes(home: Path, write_campaign, sig: signal.Signals,
                                                       standin_python: Path, profile_hold: Path) -> None:
    # one 1-rank cell, interrupted mid-profile (≥ 2 s of it left): its own node is the one to terminate
    path = write_campaign(matrix="  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}\n", steps=100,
                          python=standin_python)
    proc = start(home, "run", str(path), "--poll-interval", "0.1")
    wait_for(lambda: running_profile_node(home))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    profile_hold.unlink()
    assert proc.returncode == 130, err
    assert err.rstrip().endswith("interrupted: `benchctl resume` continues where this stopped")
    assert "Traceback" not in err
    no_live_nodes(home)
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    states = {c.state for c in q.cells(engine, campaign.id or 0)}
    assert states == {"cancelled"}
    assert all(not a.open for c in q.cells(engine, campaign.id or 0) for a in q.attempts(engine, c.id or 0))
    resumed = run_cli("resume", "tiny", *FAST_POLLS, home=home)
    assert resumed.returncode == 0, resumed.stderr
    assert {c.state for c in q.cells(engine, campaign.id or 0)} == {"done"}


@pytest.mark.slow
def test_orphans_are_terminated_but_another_stores_nodes_are_not(home: Path, finished: Path) -> None:
    from benchctl.provisioners.base import OfferRequest

    path = finished
    (campaign,) = q.campaigns(home_store(home))
    assert len(campaign.uid) == 12
    provider = LocalProvider(home / "nodes")
    offer = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand", price_usd_per_hour=1.0))[0]
    orphan = provider.launch(offer, "bc-orphan", f"bc-tiny-{campaign.uid}")
    teammates = provider.launch(offer, "bc-teammate", "bc-tiny-0123456789ab")  # same name, another store
    result = run_cli("run", str(path), home=home)  # complete: reconciles all the same
    assert result.returncode == 0, result.stderr
    assert "bc-orphan" in result.stderr and "bc-teammate" not in result.stderr
    assert provider.status(orphan) is NodeState.TERMINATED
    assert provider.status(teammates) is NodeState.RUNNING
    provider.terminate(teammates)


@pytest.mark.slow
def test_cell_without_offer_fails_with_reason(home: Path, write_campaign) -> None:
    matrix = "  - {provider: local, gpu: H100_SXM, count: 2, price_usd_per_hour: 20.0}\n"
    result = run_cli("run", str(write_campaign(matrix=matrix)), home=home)
    assert result.returncode == 1
    assert "not complete" in result.stderr and "Traceback" not in result.stderr
    status = json.loads(cli_here("status", "--format", "json", home=home).stdout)
    (cell,) = status["campaigns"][0]["cells"]
    assert cell["state"] == "failed" and cell["attempts"] == 0


@pytest.mark.slow
def test_nothing_left_running_after_a_normal_run(home: Path, finished: Path) -> None:
    no_live_nodes(home)
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    assert LocalProvider(home / "nodes").owned(f"bc-tiny-{campaign.uid}") == []
    assert LocalProvider(home / "nodes").owned("bc-tiny") == []
    spent = q.spent_usd(engine, campaign.id or 0)
    costs = [a.cost_usd for c in q.cells(engine, campaign.id or 0) for a in q.attempts(engine, c.id or 0)]
    assert spent == pytest.approx(sum(c or 0 for c in costs)) and spent > 0


@pytest.mark.slow
def test_cell_removed_from_the_file_does_not_run_again(home: Path, finished: Path) -> None:
    both = finished.read_text()
    finished.write_text(both + NO_OFFER)
    first = run_cli("run", str(finished), *FAST_POLLS, home=home)
    assert first.returncode == 1 and "local:H100_SXMx2:on-demand: failed" in first.stderr
    finished.write_text(both)
    second = run_cli("run", str(finished), *FAST_POLLS, home=home)
    assert second.returncode == 0, second.stderr
    assert "H100_SXM" not in second.stderr and "campaign tiny is complete" in second.stdout
    status = json.loads(cli_here("status", "--format", "json", home=home).stdout)
    assert {c["key"]: (c["state"], c["attempts"]) for c in status["campaigns"][0]["cells"]} == {
        "local:cpux1:on-demand": ("done", 1), "local:cpux2:on-demand": ("done", 1),
        "local:H100_SXMx2:on-demand": ("failed", 0)}


@pytest.mark.slow
def test_local_nodes_never_run_side_by_side(home: Path, finished: Path) -> None:
    # ``finished`` ran with run's default --concurrency 4: both cells could have run at once
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    spans = sorted((a.launched_at or 0, a.terminated_at or 0) for c in q.cells(engine, campaign.id or 0)
                   for a in q.attempts(engine, c.id or 0))
    assert len(spans) == 2
    assert spans[0][1] <= spans[1][0], "the second local node started before the first was terminated"


@pytest.mark.slow
def test_resume_goes_through_every_campaign(home: Path, write_campaign) -> None:
    for name in ("first", "second"):
        assert run_cli("run", str(write_campaign(name=name, matrix=NO_OFFER)), home=home).returncode == 1
    resumed = run_cli("resume", home=home)
    assert resumed.returncode == 1
    assert "campaign first is not complete" in resumed.stderr and "campaign second is not complete" in resumed.stderr


@pytest.mark.slow
def test_changed_payload_is_refused_and_changed_target_recomputes(home: Path, finished: Path) -> None:
    path = finished
    before = json.loads(cli_here("leaderboard", "--format", "json", home=home).stdout)
    path.write_text(path.read_text().replace("steps: 3", "steps: 4"))
    refused = run_cli("run", str(path), home=home)
    assert refused.returncode == 2 and "different payload section" in refused.stderr
    path.write_text(path.read_text().replace("steps: 4", "steps: 3").replace("ratio: 8.5", "ratio: 17"))
    again = run_cli("run", str(path), *FAST_POLLS, home=home)
    assert again.returncode == 0, again.stderr
    after = json.loads(cli_here("leaderboard", "--format", "json", home=home).stdout)
    assert len(after) == len(before) == 2
    for old, new in zip(sorted(before, key=lambda r: r["cell"]), sorted(after, key=lambda r: r["cell"]), strict=True):
        assert new["step_time_ms"] == old["step_time_ms"]
        assert new["target_steps"] == 2 * old["target_steps"]
        assert new["cost_to_train_usd"] == pytest.approx(2 * old["cost_to_train_usd"], rel=1e-3)
