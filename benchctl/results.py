"""A cell's Result from its stored events: median and p10–p90 of the timed profile steps, and
cost-to-train at the billed price of the attempt that measured them."""

from __future__ import annotations

import json
import time

from sqlalchemy.engine import Engine

from benchctl.cost import cost_to_train, steps_for
from benchctl.spec import CampaignSpec
from payload.stats import median, percentile
from store import queries as q
from store.models import Result


def compute_result(engine: Engine, cell_id: int, spec: CampaignSpec) -> Result | None:
    """None when the cell has no timed profile step recorded."""
    by_step: dict[int, tuple[float, int]] = {}
    for event in q.events(engine, cell_id, kind="sample", phase="profile"):
        data = json.loads(event.data_json)
        if not data.get("warmup"):
            by_step[int(data["step"])] = (float(data["step_time_s"]), event.attempt_id)
    if not by_step:
        return None
    times = [t for t, _ in by_step.values()]
    measuring = {a.id: a for a in q.attempts(engine, cell_id)}[max(by_step.values(), key=lambda v: v[1])[1]]
    cell = q.cell(engine, cell_id)
    target = spec.target
    cost = cost_to_train(median(times), steps_for(target.model, target.target_param_data_ratio,
                                                  target.total_batch_size, target.vocab_size),
                         measuring.hourly_usd or 0.0)
    return Result(cell_id=cell_id, step_time_ms=cost.step_time_s * 1000, step_time_p10_ms=percentile(times, 10) * 1000,
                  step_time_p90_ms=percentile(times, 90) * 1000, timed_steps=len(times), hourly_usd=cost.hourly_usd,
                  market=cell.market, target_steps=cost.target_steps, train_hours=cost.train_hours,
                  cost_to_train_usd=cost.cost_usd, computed_at=time.time())
