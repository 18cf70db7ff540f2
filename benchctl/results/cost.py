"""The cost model: cost_to_train = median step time × target steps / 3600 × hourly price.

The hourly price is that of everything the attempt rented: for a cell of ``nodes`` > 1, the
node's price × nodes (the attempt records it so; ``plan`` and the budget multiply the offer's)."""

from __future__ import annotations

from dataclasses import dataclass

from benchctl.payload.workloads.presets import target_steps


@dataclass(frozen=True)
class CostToTrain:
    step_time_s: float
    target_steps: int
    hourly_usd: float
    train_hours: float
    cost_usd: float


def cost_to_train(step_time_s: float, steps: int, hourly_usd: float) -> CostToTrain:
    hours = step_time_s * steps / 3600.0
    return CostToTrain(step_time_s, steps, hourly_usd, hours, hours * hourly_usd)


def steps_for(model: str, ratio: float, total_batch_size: int, vocab_size: int | None = None) -> int:
    """Target optimizer steps: floor(ratio × scaling params / tokens per step)."""
    return target_steps(model, ratio, total_batch_size, vocab_size)
