"""How a cell's optimizer step divides: forward/backward, optimizer, communication.

From the timed profile samples (``payload.workloads.profile``; seconds per step): forward/backward is
``fwd_bwd_s``; the optimizer is its three phases, ``opt_phase1_s + opt_phase2_s + opt_phase3_s``;
communication is phase 1 (launching the gradient reduce-scatters and all-reduces) plus phase 3
(waiting for the all-gathers). Phase 2 waits for the reductions and updates the owned shards: it
counts as optimizer, not communication, so the communication share is a lower bound on the
communication a step waits for. On GPU the phase times mark the compute stream (CUDA events
recorded on it), not the NCCL streams: a phase ends when the compute stream reaches its end. Each
time is the median over the timed steps; each share is of the median step time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from benchctl.payload.stats import median

OPTIMIZER_PHASES = ("opt_phase1_s", "opt_phase2_s", "opt_phase3_s")
COMM_PHASES = ("opt_phase1_s", "opt_phase3_s")


@dataclass(frozen=True)
class StepSplit:
    step_s: float
    fwd_bwd_s: float
    optimizer_s: float
    comm_s: float

    @property
    def optimizer_share(self) -> float:
        return self.optimizer_s / self.step_s if self.step_s > 0 else 0.0

    @property
    def comm_share(self) -> float:
        return self.comm_s / self.step_s if self.step_s > 0 else 0.0


def step_split(samples: Iterable[Mapping[str, Any]]) -> StepSplit | None:
    """The split of the timed (non-warmup) samples that carry every phase; None when there are none."""
    rows = [s for s in samples if not s.get("warmup")
            and all(isinstance(s.get(k), int | float) for k in ("step_time_s", "fwd_bwd_s", *OPTIMIZER_PHASES))]
    if not rows:
        return None
    return StepSplit(step_s=median([float(r["step_time_s"]) for r in rows]),
                     fwd_bwd_s=median([float(r["fwd_bwd_s"]) for r in rows]),
                     optimizer_s=median([sum(float(r[k]) for k in OPTIMIZER_PHASES) for r in rows]),
                     comm_s=median([sum(float(r[k]) for k in COMM_PHASES) for r in rows]))
