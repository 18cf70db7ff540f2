"""The step split: medians of the profile phases, as ``benchctl.results.step_split`` defines them."""

from __future__ import annotations

import pytest

from benchctl.results.step_split import step_split


def _step(step: float, fwd_bwd: float, p1: float, p2: float, p3: float, warmup: bool = False) -> dict[str, object]:
    return {"step_time_s": step, "fwd_bwd_s": fwd_bwd, "opt_phase1_s": p1, "opt_phase2_s": p2, "opt_phase3_s": p3,
            "warmup": warmup}


def test_parts_are_per_part_medians_and_shares_are_over_the_median_step() -> None:
    samples = [_step(1.0, 0.5, 0.1, 0.2, 0.1), _step(2.0, 0.7, 0.1, 0.4, 0.3), _step(9.0, 0.6, 0.3, 0.1, 0.2)]
    split = step_split(samples)
    assert split is not None
    assert split.step_s == pytest.approx(2.0)
    assert split.fwd_bwd_s == pytest.approx(0.6)
    assert split.optimizer_s == pytest.approx(0.6)  # all three phases per step: 0.4, 0.8, 0.6
    assert split.comm_s == pytest.approx(0.4)  # phases 1 + 3 per step: 0.2, 0.4, 0.5
    assert (split.optimizer_share, split.comm_share) == pytest.approx((0.3, 0.2))


def test_warmup_and_untimed_steps_are_ignored() -> None:
    split = step_split([_step(1.0, 0.8, 0.1, 0.05, 0.05), _step(50.0, 40.0, 1.0, 1.0, 1.0, warmup=True),
                        {"step_time_s": 5.0, "fwd_bwd_s": None}])
    assert split is not None
    assert (split.step_s, split.fwd_bwd_s) == pytest.approx((1.0, 0.8))


def test_no_phase_timings_means_no_split() -> None:
    assert step_split([]) is None
    assert step_split([{"step_time_s": 0.3}]) is None
