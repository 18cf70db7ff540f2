"""What a node writes is evidence, not truth (issue 31, items 2-4): samples that break the record
rules give the cell "no result: why" (status, leaderboard, report), never a rank; a line no command
could store or print is refused alone, the rest stored; a forged ``phase_end`` finishes nothing.

The nodes are ``MemoryProvider``'s: the real store, cell runner, attempt driver and event sync, with
the events a scripted node writes (the real payload's shapes, ``tests/fakes/memory_provider.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchctl.engine.event_sync import parse_line
from benchctl.payload.job import EXIT_ERROR
from benchctl.results.cell_result import compute_result
from benchctl.results.leaderboard import display_row, leaderboard_rows
from benchctl.store import queries as q
from benchctl.store.models import Result
from tests.fakes.memory_provider import MemoryProvider, Script, payload_events
from tests.memory_campaign import MemoryRun, memory_run, offer
from tests.test_engine_memory import _run_cell

T = 1_700_000_000.0


def _sample(index: int | None, step_time_s: Any = 0.5, **extra: Any) -> dict[str, Any]:
    return {"t": T, "kind": "sample", "phase": "profile", "warmup": index is None, "timed_index": index,
            "step_time_s": step_time_s, **extra}


def _profile(samples: list[dict[str, Any]], phase: str = "profile") -> Callable[[dict[str, Any]], list[list[dict]]]:
    """A node that passes preflight, then writes ``samples`` inside a ``phase`` it frames, and exits 0."""

    def events(job: dict[str, Any]) -> list[list[dict[str, Any]]]:
        healthy = payload_events({**job, "phases": ["preflight"]})[:-1]  # preflight, without its done
        return [*healthy, [{"t": T, "kind": "phase_start", "phase": phase}], samples,
                [{"t": T, "kind": "phase_end", "phase": phase, "elapsed_s": 1, "summary": {}}],
                [{"t": T, "kind": "done", "exit_code": 0}]]

    return events


def _run(tmp_path: Path, *scripts: Script, phases: str = "[preflight, profile]") -> MemoryRun:
    run = memory_run(tmp_path, MemoryProvider([offer()], list(scripts)), phases=phases)
    assert _run_cell(run) == "done"
    return run


def _no_result(run: MemoryRun) -> str:
    """The cell's reason, once it is plain that it has no result and no rank anywhere."""
    cell = run.cell()
    assert cell.state == "done"
    assert not q.results(run.engine, run.ctx.campaign_id), "no Result row"
    (row,) = leaderboard_rows(run.engine, "tiny")
    assert row["rank"] is None and row["cost_to_train_usd"] is None
    assert display_row(row)["cost-to-train $"] == cell.reason, "the leaderboard says why"
    assert cell.reason is not None and cell.reason.startswith("no result: ")
    return cell.reason


GOOD = [_sample(None), _sample(0), _sample(1), _sample(2)]
"""One warmup and the 3 timed steps the campaign's profile has (``memory_run``: steps 3)."""


@pytest.mark.parametrize(("samples", "why"), [
    ([_sample(None), _sample(0, -5), _sample(1, -5), _sample(2, -5)],
     "attempt 1 line 5: 'step_time_s' is -5 s, outside the plausible 1e-05 to 86400 s"),
    ([_sample(None), _sample(0, 1e-12), _sample(1, 1e-12), _sample(2, 1e-12)], "'step_time_s' is 1e-12 s, outside"),
    ([_sample(None), _sample(0, 1e12), _sample(1, 1e12), _sample(2, 1e12)], "'step_time_s' is 1e+12 s, outside"),
    ([*GOOD, _sample(7)], "'timed_index' 7 is outside the profile's 3 timed steps"),
    ([*GOOD, *(_sample(i % 3) for i in range(100))], "more timed samples in one attempt than the profile's 3"),
    ([_sample(None), _sample(None), *GOOD[1:]], "more warmup samples in one attempt than the profile's 1"),
    ([_sample(None), _sample(0), _sample(2)], "the profile measured 2 of its 3 timed steps"),
    ([*GOOD[:-1], _sample(2, 0.5, precision="<script>")], "precision '<script>'"),
], ids=["negative", "1e-12", "1e12", "index-outside", "too-many", "too-many-warmups", "missing-step",
        "precision-not-a-name"])
def test_samples_that_break_the_record_rules_give_no_result_never_a_rank(tmp_path: Path, samples: list[dict],
                                                                          why: str) -> None:
    run = _run(tmp_path, Script(events=_profile(samples)))
    assert why in _no_result(run)


def test_honest_samples_still_rank(tmp_path: Path) -> None:
    """A diverged step (``loss: NaN``, as ``payload.workloads.profile`` writes it) still took the time it took."""
    run = _run(tmp_path, Script(events=_profile([*GOOD[:-1], _sample(2, 0.5, loss=float("nan"))])))
    (row,) = leaderboard_rows(run.engine, "tiny")
    assert row["rank"] == 1 and row["step_time_ms"] == 500.0 and run.cell().reason is None


def test_profile_samples_in_a_campaign_that_runs_no_profile_give_no_result(tmp_path: Path) -> None:
    run = _run(tmp_path, Script(events=_profile(GOOD)), phases="[preflight]")
    assert "a profile sample, but the campaign runs no profile phase" in _no_result(run)


@pytest.mark.parametrize(("observed", "why"), [
    ({"vcpus": "lots"}, "preflight 'cpu' observed 'vcpus' of the wrong type"),
    ({"vcpus": 10**18}, "vcpus 1000000000000000000: Input should be less than or equal to 1000000"),
    ({"vcpus": True}, "preflight 'cpu' observed 'vcpus' of the wrong type"),
])
def test_preflight_observations_of_the_wrong_type_give_no_result(tmp_path: Path, observed: Any, why: str) -> None:
    check = {"t": T, "kind": "sample", "phase": "preflight", "name": "cpu", "status": "pass", "observed": observed}
    events = _profile(GOOD)

    def with_check(job: dict[str, Any]) -> list[list[dict[str, Any]]]:
        batches = events(job)
        return [batches[0], [check], *batches[1:]]

    run = _run(tmp_path, Script(events=with_check))
    assert why in _no_result(run)


@pytest.mark.parametrize(("bad", "why"), [
    (_sample(1, 10**400), "'step_time_s' is an integer outside 64 bits"),
    (_sample(1, 0.5, note="\ud800"), "'note' holds text that is not UTF-8 (a lone surrogate)"),
    ({**_sample(1), "phase": "profile", "t": 1e308}, "'t' is not a unix time between 1970 and 9999"),
    ({**_sample(1), "phase": "\ud800"}, "'phase' holds text that is not UTF-8"),
], ids=["10**400", "surrogate-value", "t-1e308", "surrogate-phase"])
def test_a_line_no_command_could_store_or_print_is_refused_alone_and_named(tmp_path: Path, bad: dict,
                                                                             why: str) -> None:
    """Today 10**400 fails the attempt with a controller error (and `report` forever after), a lone
    surrogate aborts the attempt's insert and drops every event it read: here the line becomes an
    error event that names it, the others are stored, and the cell says why it has no result."""
    run = _run(tmp_path, Script(events=_profile([GOOD[0], GOOD[1], bad, GOOD[3]])))
    cell = run.cell()
    messages = [json.loads(e.data_json)["message"] for e in q.events(run.engine, cell.id or 0, kind="error")]
    assert len(messages) == 1 and why in messages[0]
    assert len(q.events(run.engine, cell.id or 0, kind="sample", phase="profile")) == 3, "the rest is stored"
    reason = _no_result(run)
    assert "the profile measured 2 of its 3 timed steps; attempt 1 line 6: unparseable event line" in reason
    assert why in reason and all(ord(c) < 0xD800 or ord(c) > 0xDFFF for c in reason), "printable"


def test_a_forged_phase_end_finishes_nothing(tmp_path: Path) -> None:
    """The first node writes ``phase_end`` of the profile it never ran, then fails: the next attempt
    must still run the profile (today it skips it, and the cell ends done with no result after two
    paid attempts)."""

    def forger(job: dict[str, Any]) -> list[list[dict[str, Any]]]:
        healthy = payload_events({**job, "phases": ["preflight"]})[:-1]
        return [*healthy, [{"t": T, "kind": "phase_end", "phase": "profile", "elapsed_s": 1, "summary": {}},
                           {"t": T, "kind": "phase_start", "phase": "collectives"},
                           {"t": T, "kind": "phase_end", "phase": "collectives"}]]

    run = _run(tmp_path, Script(events=forger, exit_code=EXIT_ERROR), Script(),
               phases="[preflight, collectives, profile]")
    nodes = run.provider.launched()
    assert [n.job["done_phases"] for n in nodes if n.job] == [[], []], "neither phase counts as done"
    assert len(q.results(run.engine, run.ctx.campaign_id)) == 1, "the second node measured the profile"


def test_an_honest_preempted_profile_continues_on_the_next_node(tmp_path: Path) -> None:
    """What counts as done is unchanged for an honest payload: the profile finished by the first node
    is skipped by none, and samples it measured before its preemption are kept."""
    run = _run(tmp_path, Script(preempt_at_poll=6), Script())
    _, second = run.provider.launched()
    assert second.job is not None and second.job["profile_steps_done"] == 1 and second.job["done_phases"] == []
    assert len(q.results(run.engine, run.ctx.campaign_id)) == 1


def test_stored_records_from_before_the_rules_degrade_to_one_line(tmp_path: Path) -> None:
    """A store written before these rules may hold a sample of 10**400 or a time of 1e308: computing
    the cell's result names the record instead of raising."""
    run = _run(tmp_path, Script(events=_profile(GOOD)))
    cell = run.cell()
    (event,) = [e for e in q.events(run.engine, cell.id or 0, kind="sample", phase="profile")
                if json.loads(e.data_json).get("timed_index") == 1]
    from sqlmodel import Session

    with Session(run.engine) as s:
        row = s.get(type(event), event.id)
        assert row is not None
        row.data_json = json.dumps({**json.loads(row.data_json), "step_time_s": 10**400})
        s.add(row)
        s.commit()
    outcome = compute_result(run.engine, cell.id or 0, run.ctx.campaign.spec)
    assert not isinstance(outcome, Result)
    assert outcome is not None and "attempt 1 line 6: 'step_time_s' is an integer outside 64 bits" in outcome.why


def test_parse_line_names_what_no_store_could_hold() -> None:
    assert "'t' is not a unix time" in parse_line(b'{"t": 1e308, "kind": "done", "exit_code": 0}')["message"]
    assert parse_line(b'{"t": 1700000000, "kind": "done", "exit_code": 0}')["kind"] == "done"
    assert "outside 64 bits" in parse_line(b'{"t": 1, "kind": "done", "exit_code": 0, "x": ' + b"9" * 400
                                           + b"}")["message"]
