"""A cell's Result from its stored events: median and p10–p90 of the timed profile steps, and
cost-to-train at the billed price of the attempts that measured them.

A preempted cell's timed steps come from several nodes of the same configuration: each sample
carries ``timed_index`` (unique across the cell's attempts), the first recorded copy of an index
counts, and the price is the attempts' billed prices weighted by the samples each measured.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from benchctl.cost import cost_to_train, steps_for
from benchctl.spec import CampaignSpec
from payload.stats import median, percentile
from store import queries as q
from store.models import Result


@dataclass(frozen=True)
class TimedSample:
    attempt_id: int
    timed_index: int
    step_time_s: float


def timed_samples(engine: Engine, cell_id: int) -> list[TimedSample]:
    """The cell's timed profile steps, one per ``timed_index``, in index order."""
    seen: dict[int, TimedSample] = {}
    for event in q.events(engine, cell_id, kind="sample", phase="profile"):
        data = json.loads(event.data_json)
        if data.get("warmup") or data.get("timed_index") is None:
            continue
        index = int(data["timed_index"])
        seen.setdefault(index, TimedSample(event.attempt_id, index, float(data["step_time_s"])))
    return [seen[i] for i in sorted(seen)]


def compute_result(engine: Engine, cell_id: int, spec: CampaignSpec) -> Result | None:
    """None until some attempt completed the profile phase (its ``phase_end``) with timed steps."""
    if not q.events(engine, cell_id, kind="phase_end", phase="profile"):
        return None
    samples = timed_samples(engine, cell_id)
    if not samples:
        return None
    prices = {a.id: a.hourly_usd or 0.0 for a in q.attempts(engine, cell_id)}
    hourly = sum(prices[s.attempt_id] for s in samples) / len(samples)
    times = [s.step_time_s for s in samples]
    cell = q.cell(engine, cell_id)
    target = spec.target
    cost = cost_to_train(median(times), steps_for(target.model, target.target_param_data_ratio,
                                                  target.total_batch_size, target.vocab_size), hourly)
    return Result(cell_id=cell_id, step_time_ms=cost.step_time_s * 1000, step_time_p10_ms=percentile(times, 10) * 1000,
                  step_time_p90_ms=percentile(times, 90) * 1000, timed_steps=len(times), hourly_usd=cost.hourly_usd,
                  market=cell.market, target_steps=cost.target_steps, train_hours=cost.train_hours,
                  cost_to_train_usd=cost.cost_usd, computed_at=time.time())
