"""What an edit of a measured campaign's file did to its results, said on ``run`` (never silent).

Two edits may change a finished campaign's numbers without a new measurement: the target ratio
(re-prices every done cell: its target steps change) and a cell's ``price_usd_per_hour`` (a done
cell keeps the price its attempts ran at: that is the price its cost was measured with). Workload
edits are refused elsewhere (``engine.same_measurement``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from benchctl.campaign.spec import Campaign, Target, WorkloadTarget


def results_by_key(engine: Engine, campaign_id: int) -> dict[str, tuple[int, float]]:
    """(target steps, cost-to-train) of each done cell that has a result, by cell key."""
    from benchctl.store import queries as q

    return {cell.key: (result.target_steps, result.cost_to_train_usd)
            for result, cell, _ in q.results(engine, campaign_id)}


def price_edits(old: Campaign, new: Campaign, done: set[str]) -> list[str]:
    """One line per done cell whose ``price_usd_per_hour`` the file changed: not applied to it."""
    before = {c.key: c.price_usd_per_hour for c in old.cells}
    return [f"{cell.key}: price_usd_per_hour {_usd(before[cell.key])} → {_usd(cell.price_usd_per_hour)} not "
            f"applied: the cell is done and its cost-to-train stays at the {_usd(before[cell.key])}/h it ran at "
            "(give the campaign a new name to measure it at the new price)"
            for cell in new.cells
            if cell.key in done and cell.key in before and before[cell.key] != cell.price_usd_per_hour]


def repriced(old: Campaign, new: Campaign, before: dict[str, tuple[int, float]],
             after: dict[str, tuple[int, float]]) -> list[str]:
    """Lines naming a target change and each done cell's cost-to-train it moved (old → new)."""
    lines = []
    if old.spec.target != new.spec.target:
        lines.append(_target_change(old.spec.target, new.spec.target))
    for key, (steps, cost) in after.items():
        if key in before and before[key] != (steps, cost):
            old_steps, old_cost = before[key]
            lines.append(f"{key}: target steps {old_steps:,} → {steps:,}, cost-to-train ${old_cost:,.2f} → "
                         f"${cost:,.2f}")
    return lines


def _usd(value: float | None) -> str:
    return "(unset)" if value is None else f"${value:,.2f}"


def _target_change(old: Target | WorkloadTarget, new: Target | WorkloadTarget) -> str:
    """The target edit, said: the ratio of a nanochat target, else the steps of a steps/tokens one."""
    if hasattr(old, "target_param_data_ratio") and hasattr(new, "target_param_data_ratio"):
        return (f"target.target_param_data_ratio {old.target_param_data_ratio:g} → {new.target_param_data_ratio:g}: "
                "done cells re-priced, nothing measured again")
    return (f"target steps {old.train_steps():,} → {new.train_steps():,}: done cells re-priced, nothing measured "
            "again")
