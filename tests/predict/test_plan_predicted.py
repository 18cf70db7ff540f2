"""`plan`'s predicted columns: the step time `predict` gives for the cell, its cost-to-train at the
row's price, and a rank among the cells that have both."""

from __future__ import annotations

import pytest

from benchctl.campaign.spec import load_campaign
from benchctl.engine.plan import COLUMNS, predicted_cost, rank_predicted
from benchctl.predict.service import predict_for
from tests.conftest import REPO


def test_predicted_cost_is_the_predicted_step_times_the_target_steps_at_the_price() -> None:
    campaign = load_campaign(str(REPO / "campaigns" / "h100-matrix.yaml"))
    cells = {c.key: c for c in campaign.cells}
    sxm = cells["runpod:H100_SXMx8:on-demand"]
    step = predict_for(None, "H100_SXM", 8, 1, "bf16", model="nanochat-d26", tokens_per_step=524_288).mid.step_ms
    row = predicted_cost(campaign, sxm, 20.0)
    assert row["predicted_step_ms"] == pytest.approx(step, abs=0.05)
    assert row["predicted_cost_usd"] == pytest.approx(step / 1000 * 14_889 / 3600 * 20.0, abs=0.01)
    assert predicted_cost(campaign, sxm, None)["predicted_cost_usd"] is None  # no price, no cost
    pcie = predicted_cost(campaign, cells["runpod:H100_PCIEx8:on-demand"], 20.0)
    assert pcie["predicted_step_ms"] > row["predicted_step_ms"]  # PCIe: lower peak, slower collectives
    assert {"predicted_step_ms", "predicted_cost_usd", "predicted_rank", "price_source"} <= set(COLUMNS)


def test_rank_predicted_orders_by_predicted_cost_and_skips_unpriced_rows() -> None:
    rows = [{"predicted_cost_usd": 90.0}, {"predicted_cost_usd": None}, {"predicted_cost_usd": 60.0}]
    for row in rows:
        row["predicted_rank"] = None
    rank_predicted(rows)
    assert [r["predicted_rank"] for r in rows] == [2, None, 1]


def test_an_aws_instance_type_cell_is_predicted_from_the_gpus_of_its_type() -> None:
    """The shipped matrix's `instance_type: p5.48xlarge` cell names no GPU: its table does (8× H100 SXM)."""
    campaign = load_campaign(str(REPO / "campaigns" / "h100-matrix.yaml"))
    (p5,) = [c for c in campaign.cells if c.instance_type == "p5.48xlarge"]
    assert p5.gpu is None
    sxm = next(c for c in campaign.cells if c.key == "runpod:H100_SXMx8:on-demand")
    assert predicted_cost(campaign, p5, 55.04)["predicted_step_ms"] == predicted_cost(campaign, sxm, 1.0)[
        "predicted_step_ms"]
    assert predicted_cost(campaign, p5, 55.04)["predicted_cost_usd"] is not None
