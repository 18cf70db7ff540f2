from __future__ import annotations

import pytest

from benchctl.results.cost import cost_to_train, steps_for


def test_gpt2_grade_d26_target_steps() -> None:
    assert steps_for("nanochat-d26", 8.5, 524_288) == 14_889


def test_cost_arithmetic_a_reader_can_redo() -> None:
    # 702 ms per step (SXM, one NUMA node) × 14,889 steps at $24/h
    cost = cost_to_train(0.702, 14_889, 24.0)
    assert cost.train_hours == pytest.approx(0.702 * 14_889 / 3600)
    assert cost.train_hours == pytest.approx(2.9033, abs=1e-4)
    assert cost.cost_usd == pytest.approx(cost.train_hours * 24.0)
    assert cost.cost_usd == pytest.approx(69.68, abs=0.01)


def test_slower_but_cheaper_node_can_lose() -> None:
    split_numa = cost_to_train(1.295, 14_889, 16.0)
    healthy = cost_to_train(0.702, 14_889, 24.0)
    assert split_numa.cost_usd > healthy.cost_usd
