"""The fast chaos run (CI): the controller SIGKILLed at 6 seeded random moments, resumed after each.

The long run (20+ kills) is ``python -m tests.chaos.chaos --kills 25``; its figures are in
docs/measurements/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.chaos import chaos

pytestmark = pytest.mark.slow


def test_controller_killed_six_times_loses_nothing_and_leaks_nothing(tmp_path: Path, standin_python: Path) -> None:
    # the stand-in's 20 ms steps: 300 of them keep each of the three cells running for 6 s, so the
    # six kills (0.5 to 3 s apart) land before the campaign is done
    report = chaos(tmp_path / "home", kills=6, seed=11, steps=300, max_gap_s=3.0, python=standin_python)
    assert report["kills"] == 6
    assert report["problems"] == [], report
    assert report["lost_samples"] == 0
    assert report["nodes_left_running"] == 0 and report["open_attempts"] == 0
    assert report["preemptions"] >= 1, "the campaign's injected preemptions happened"
    assert abs(report["attempt_costs_usd"] - report["spent_usd"]) < 1e-9
    assert report["accounting_error_usd"] < 0.001, report
