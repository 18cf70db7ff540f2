"""A campaign of any size, written straight into a store (Core bulk inserts, no engine, no node):
what ``scripts/bench_read_paths.py`` times and ``tests/test_read_paths.py`` counts statements on.

Most cells are ``done`` with an attempt, a Result and events (preflight checks, timed profile
steps, a collectives sweep); some failed (two attempts), bad_node, preempted, running (an open
attempt) and pending, in fixed shares (``STATES``). The same ``seed`` gives the same store.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

STATES = (("failed", 0.02), ("bad_node", 0.01), ("preempted", 0.005), ("running", 0.01), ("pending", 0.01))
"""Share of the cells in each state other than done (the default ``pattern``, in a fixed shuffled order)."""


def default_pattern(seed: int = 7) -> tuple[str, ...]:
    """200 states in ``STATES``' shares, the rest ``done``, shuffled by ``seed``."""
    states = [state for state, share in STATES for _ in range(round(share * 200))]
    states += ["done"] * (200 - len(states))
    random.Random(seed).shuffle(states)
    return tuple(states)
CHECKS = ("gpu_count", "numa", "nccl_env", "shm")


def fill(url: str, n_cells: int, samples: int = 8, seed: int = 7, pattern: tuple[str, ...] | None = None) -> None:
    """One campaign named ``bench`` of ``n_cells`` cells, written with Core bulk inserts; cell i is in
    state ``pattern[i % len(pattern)]`` (default: ``default_pattern``)."""
    import sqlalchemy as sa

    from benchctl.campaign.spec import load_campaign
    from benchctl.store.database import open_store
    from benchctl.store.models import Attempt, Campaign, Cell, Event, Result

    engine = open_store(url)
    rng = random.Random(seed)
    now = time.time()
    spec = load_campaign(str(REPO / "campaigns" / "h100-matrix.yaml"))
    spec_json = spec.model_copy(update={"spec": spec.spec.model_copy(update={"name": "bench"})}).model_dump_json()
    tables = {m: m.__table__ for m in (Campaign, Cell, Attempt, Event, Result)}  # type: ignore[attr-defined]
    with engine.begin() as conn:
        conn.execute(sa.insert(tables[Campaign]), [dict(
            id=1, name="bench", uid="bench0000000", spec_json=spec_json, source_path="bench.yaml", budget_usd=1e9,
            created_at=now - 86400, updated_at=now, kind="run")])
        cells, attempts, results, events = [], [], [], []
        pattern = pattern or default_pattern(seed)
        for i in range(n_cells):
            cell_id = i + 1
            provider = ("runpod", "vastai", "aws", "lambda", "local")[i % 5]
            market = ("spot", "on-demand")[(i // 5) % 2]
            gpu = ("H100_SXM", "H100_PCIE", "H100_NVL", "A100_SXM")[(i // 10) % 4]
            state = pattern[i % len(pattern)]
            cells.append(dict(id=cell_id, campaign_id=1, key=f"{provider}:{gpu}x8:{market}:env=RUN={i}",
                              provider=provider, gpu=gpu, count=8, market=market,
                              config_json=json.dumps({"env": {"RUN": str(i)}, "nodes": 1}), state=state,
                              reason="retries exhausted" if state == "failed" else None,
                              created_at=now - 86400, updated_at=now))
            if state == "pending":
                continue
            price = rng.uniform(8, 30)
            outcomes = {"done": ["done"], "failed": ["failed", "failed"], "bad_node": ["bad_node"],
                        "preempted": ["preempted"], "running": [None]}[state]
            for number, outcome in enumerate(outcomes, start=1):
                attempt_id = len(attempts) + 1
                launched = now - 86400 + i * 5 + number
                closed = outcome is not None
                attempts.append(dict(id=attempt_id, cell_id=cell_id, number=number, token=f"t{attempt_id}",
                                     provider=provider, hourly_usd=price, market=market, host=f"h{i % 997}",
                                     open=not closed, outcome=outcome, detail="exit 1" if outcome == "failed" else None,
                                     launched_at=launched, terminated_at=launched + 1800 if closed else None,
                                     cost_usd=price / 2 if closed else None, remote_dir="/r", events_offset=0,
                                     events_lines=0))
                line = 0
                for check in CHECKS:
                    status = "fail" if outcome == "bad_node" and check == "numa" else (
                        "warn" if check == "shm" and i % 7 == 0 else "pass")
                    events.append(dict(attempt_id=attempt_id, cell_id=cell_id, line=line, t=launched, kind="sample",
                                       phase="preflight", data_json=json.dumps(
                                           {"name": check, "status": status, "observed": 1, "expected": 1})))
                    line += 1
                if outcome != "done":
                    continue
                step_ms = rng.uniform(600, 1400)
                for k in range(samples):
                    step_s = step_ms / 1000 * rng.uniform(0.98, 1.03)
                    events.append(dict(attempt_id=attempt_id, cell_id=cell_id, line=line, t=launched, kind="sample",
                                       phase="profile", data_json=json.dumps(
                                           {"timed_index": k, "step_time_s": step_s, "fwd_bwd_s": step_s * 0.75,
                                            "optimizer_s": step_s * 0.2, "comm_s": step_s * 0.08})))
                    line += 1
                for size in (1 << 20, 1 << 26, 1 << 30):
                    events.append(dict(attempt_id=attempt_id, cell_id=cell_id, line=line, t=launched, kind="sample",
                                       phase="collectives", data_json=json.dumps(
                                           {"op": "all_reduce", "bytes": size, "busbw_gbps": 400 * rng.random()})))
                    line += 1
                hours = step_ms / 1000 * 14_889 / 3600
                results.append(dict(cell_id=cell_id, step_time_ms=step_ms, step_time_p10_ms=step_ms * 0.98,
                                    step_time_p90_ms=step_ms * 1.03, timed_steps=samples, hourly_usd=price,
                                    market=market, target_steps=14_889, train_hours=hours,
                                    cost_to_train_usd=hours * price, computed_at=now, model="nanochat-d26",
                                    interconnect="nvswitch_mesh NV18", vcpus=192, numa="1 node",
                                    optimizer_ms=step_ms * 0.2, optimizer_share=0.2, comm_share=0.08,
                                    busbw_gbps=470.0, busbw_bytes=1 << 30, flags_json="[]", precision="bf16",
                                    compiled=True, attention="flash_attn3", host_data="synthetic"))
        for model, rows in ((Cell, cells), (Attempt, attempts), (Result, results), (Event, events)):
            for start in range(0, len(rows), 20_000):
                conn.execute(sa.insert(tables[model]), rows[start:start + 20_000])
    engine.dispose()
