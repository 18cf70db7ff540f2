from __future__ import annotations

import itertools

import pytest

from benchctl.engine.cell_states import ALLOWED, FINISHED, CellState, IllegalTransition, check_transition

HAPPY_PATH = ["pending", "provisioning", "preflight", "running", "collecting", "done"]


def test_happy_path_is_allowed() -> None:
    for current, new in itertools.pairwise(HAPPY_PATH):
        check_transition(CellState(current), CellState(new))


@pytest.mark.parametrize("source", ["preempted", "bad_node", "failed", "cancelled"])
def test_every_setback_goes_back_to_provisioning(source: str) -> None:
    check_transition(CellState(source), CellState.PROVISIONING)


@pytest.mark.parametrize("target", list(CellState))
def test_nothing_leaves_done(target: CellState) -> None:
    with pytest.raises(IllegalTransition, match="from done"):
        check_transition(CellState.DONE, target)


@pytest.mark.parametrize(("current", "new"), [("pending", "done"), ("pending", "running"), ("provisioning", "done"),
                                              ("preflight", "done"), ("running", "bad_node"), ("running", "preflight")])
def test_skipping_steps_is_illegal(current: str, new: str) -> None:
    with pytest.raises(IllegalTransition):
        check_transition(CellState(current), CellState(new))


def test_done_is_reached_only_from_collecting() -> None:
    assert [s for s, targets in ALLOWED.items() if CellState.DONE in targets] == [CellState.COLLECTING]
    assert {CellState.DONE, CellState.FAILED, CellState.CANCELLED} == FINISHED
    assert set(ALLOWED) == set(CellState)
