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
    """From the timed steps of the last attempt that completed the profile phase (one node, one
    price: steps from different nodes are never mixed). None when no attempt completed it."""
    finished = [e.attempt_id for e in q.events(engine, cell_id, kind="phase_end", phase="profile")]
    if not finished:
        return None
    measuring = {a.id: a for a in q.attempts(engine, cell_id)}[finished[-1]]
    times = [float(json.loads(e.data_json)["step_time_s"])
             for e in q.events(engine, cell_id, kind="sample", phase="profile")
             if e.attempt_id == measuring.id and not json.loads(e.data_json).get("warmup")]
    if not times:
        return None
    cell = q.cell(engine, cell_id)
    target = spec.target
    cost = cost_to_train(median(times), steps_for(target.model, target.target_param_data_ratio,
                                                  target.total_batch_size, target.vocab_size),
                         measuring.hourly_usd or 0.0)
    return Result(cell_id=cell_id, step_time_ms=cost.step_time_s * 1000, step_time_p10_ms=percentile(times, 10) * 1000,
                  step_time_p90_ms=percentile(times, 90) * 1000, timed_steps=len(times), hourly_usd=cost.hourly_usd,
                  market=cell.market, target_steps=cost.target_steps, train_hours=cost.train_hours,
                  cost_to_train_usd=cost.cost_usd, computed_at=time.time())
