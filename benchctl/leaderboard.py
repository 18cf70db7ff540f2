"""Leaderboard rows: one per cell, cheapest cost-to-train first; cells without a result last."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.engine import Engine

from store import queries as q

COLUMNS = ("campaign", "cell", "provider", "gpu", "count", "market", "env", "hourly_usd", "step_time_ms",
           "step_time_p10_ms", "step_time_p90_ms", "target_steps", "train_hours", "cost_to_train_usd", "flags",
           "status")
TABLE_COLUMNS = ("rank", "campaign", "cell", "market", "env", "flags", "hourly_usd", "step_time_ms", "step_time_p10_ms",
                 "step_time_p90_ms", "target_steps", "train_hours", "cost_to_train_usd", "status")


FLAG_OF_CHECK = {"numa": "numa_split", "cpu": "few_cpus", "nccl_env": "nccl_env", "shm": "small_shm",
                 "gemm": "slow_gemm", "hbm": "slow_hbm", "nccl_allreduce": "slow_allreduce"}


def cell_flags(engine: Engine, cell_id: int) -> list[str]:
    """Preflight warnings on the node that produced the cell's numbers (its last attempt that ran
    preflight), nodes replaced after a failed preflight, and preemptions survived."""
    attempts = q.attempts(engine, cell_id)
    checks = q.events(engine, cell_id, kind="sample", phase="preflight")
    judged = [a.id for a in attempts if any(e.attempt_id == a.id for e in checks)]
    flags = set()
    for event in checks:
        data = json.loads(event.data_json)
        if judged and event.attempt_id == judged[-1] and data.get("status") == "warn":
            flags.add(FLAG_OF_CHECK.get(str(data.get("name")), str(data.get("name"))))
    for outcome, label in (("bad_node", "bad_nodes"), ("preempted", "preempted")):
        times = sum(a.outcome == outcome for a in attempts)
        if times:
            flags.add(f"{label}×{times}")
    return sorted(flags)


def leaderboard_rows(engine: Engine, campaign: str | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for camp in q.campaigns(engine, campaign):
        assert camp.id is not None
        results = {cell.id: result for result, cell, _ in q.results(engine, camp.id)}
        for cell in q.cells(engine, camp.id):
            result = results.get(cell.id)
            row: dict[str, Any] = {"campaign": camp.name, "cell": cell.key, "provider": cell.provider,
                                   "gpu": cell.gpu, "count": cell.count, "market": cell.market, "status": cell.state,
                                   "env": json.loads(cell.config_json).get("env", {}),
                                   "flags": cell_flags(engine, cell.id or 0)}
            for name in COLUMNS:
                if name not in row:
                    row[name] = getattr(result, name, None) if result is not None else None
            rows.append(row)
    rows.sort(key=lambda r: (r["cost_to_train_usd"] is None, r["cost_to_train_usd"] or 0.0, r["campaign"], r["cell"]))
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank if row["cost_to_train_usd"] is not None else None
    return rows
