"""What the report of one campaign shows, gathered from the store (no rendering here).

Per cell: timed step times, the step split (``benchctl.results.step_split``), busbw against message size per
collective, cost-to-train, preflight verdicts per attempt. Per campaign: cumulative spend over time
(each attempt accrues its hourly price from ``launched_at`` to ``terminated_at``, an open one until
``now``), spend per provider and attempt outcome, the leaderboard rows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine

from benchctl.payload.stats import median
from benchctl.results.cell_evidence import whole_cluster
from benchctl.results.cell_result import timed_profile_events
from benchctl.results.leaderboard import leaderboard_rows
from benchctl.results.step_split import StepSplit, step_split
from benchctl.store import queries as q
from benchctl.store.models import Attempt, Result

PUBLISHED_STEP_MS = {("nanochat-d26", 524_288): (702.0, "8×H100 SXM, all GPUs on one NUMA node: 702 ms")}
"""Step times measured on real nodes (8×H100 SXM, GPUs on one NUMA node), by (model, tokens per step)."""


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    observed: Any
    expected: Any
    hint: str


@dataclass(frozen=True)
class PreflightRun:
    """The checks one attempt (one node) ran."""

    attempt: int
    host: str | None
    outcome: str | None
    checks: dict[str, Check]


@dataclass
class CellData:
    key: str
    provider: str
    state: str
    ranks: int
    step_times_ms: list[float] = field(default_factory=list)
    step_summary_ms: tuple[float, float, float] | None = None
    """(p10, median, p90) from the cell's Result: all an imported cell has."""
    split: StepSplit | None = None
    busbw: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    """op → [(bytes, busbw GB/s)], out-of-place where measured, by size."""
    busbw_in_place: set[str] = field(default_factory=set)
    """The ops of ``busbw`` with at least one size measured only in place (so plotted in place)."""
    cost_usd: float | None = None
    hourly_usd: float | None = None
    preflight: list[PreflightRun] = field(default_factory=list)


@dataclass
class CampaignData:
    name: str
    budget_usd: float
    spent_usd: float
    model: str
    tokens_per_step: int
    cells: list[CellData]
    spend_curve: list[tuple[float, float]]
    """(unix time, cumulative USD) at every launch and termination, and at ``now`` if an attempt is open."""
    spend_by_provider: dict[str, dict[str, float]]
    """provider → outcome (``open`` while running) → USD."""
    leaderboard: list[dict[str, Any]]
    reference: tuple[float, str] | None
    now: float
    phases: tuple[str, ...] | None = None
    """The payload phases the campaign's file runs; None where it does not say (an imported campaign)."""


def rank_key(cell: CellData) -> tuple[bool, float, bool, float, str]:
    """Rank order: cheapest cost-to-train first, then the cells without a result by median step time
    (none last), then by key; the leaderboard's order for the cells it ranks."""
    step = median_step_ms(cell)
    return (cell.cost_usd is None, cell.cost_usd or 0.0, step is None, step or 0.0, cell.key)


def median_step_ms(cell: CellData) -> float | None:
    """The cell's median timed step time (its samples', else its result's), or None."""
    if cell.step_times_ms:
        return median(cell.step_times_ms)
    return cell.step_summary_ms[1] if cell.step_summary_ms else None


def campaign_data(engine: Engine, name: str, now: float | None = None) -> CampaignData:
    """Everything the report shows for campaign ``name`` (which must exist)."""
    now = time.time() if now is None else now
    (camp,) = q.campaigns(engine, name)
    assert camp.id is not None
    spec = json.loads(camp.spec_json).get("spec", {})
    target = spec.get("target", {})
    phases = spec.get("payload", {}).get("phases")
    model, tokens_per_step = str(target.get("model", "?")), int(target.get("total_batch_size", 0))
    results = {cell.id: result for result, cell, _ in q.results(engine, camp.id)}
    cells = []
    for cell in q.cells(engine, camp.id):
        cell_id = cell.id or 0
        result = results.get(cell.id)
        timed = [data for _, data in timed_profile_events(engine, cell_id)]
        series, in_place = busbw_series(engine, cell_id)
        cells.append(CellData(key=cell.key, provider=cell.provider, state=cell.state, ranks=cell.count,
                              step_times_ms=[float(data["step_time_s"]) * 1000 for data in timed],
                              step_summary_ms=(result.step_time_p10_ms, result.step_time_ms,
                                               result.step_time_p90_ms) if result else None,
                              split=step_split(timed) or _recorded_split(result),
                              busbw=series, busbw_in_place=in_place,
                              cost_usd=result.cost_to_train_usd if result else None,
                              hourly_usd=result.hourly_usd if result else None,
                              preflight=preflight_runs(engine, cell_id)))
    if model == "?":  # an imported campaign: its records say what they were priced for
        model = next((str(r.model) for r in results.values() if r.model), "?")
        targets = [json.loads(c.config_json or "{}").get("target") or {} for c in q.cells(engine, camp.id)]
        tokens_per_step = next((int(t["total_batch_size"]) for t in targets
                                if t.get("model") == model and t.get("total_batch_size")), 0)
    cells.sort(key=rank_key)
    attempts = q.campaign_attempts(engine, camp.id)
    curve = spend_curve(attempts, now)
    return CampaignData(name=camp.name, budget_usd=camp.budget_usd, spent_usd=curve[-1][1] if curve else 0.0,
                        model=model, tokens_per_step=tokens_per_step, cells=cells,
                        spend_curve=curve, spend_by_provider=spend_by_provider(attempts, now),
                        leaderboard=leaderboard_rows(engine, camp.name),
                        reference=PUBLISHED_STEP_MS.get((model, tokens_per_step)), now=now,
                        phases=tuple(phases) if isinstance(phases, list) else None)


def _recorded_split(result: Result | None) -> StepSplit | None:
    """The split an imported record states (optimizer time or share, communication share), where
    there are no timed samples to compute it from."""
    if result is None:
        return None
    step_s = result.step_time_ms / 1000
    if result.optimizer_ms is not None:
        optimizer_s = result.optimizer_ms / 1000
    elif result.optimizer_share is not None:
        optimizer_s = result.optimizer_share * step_s
    else:
        return None
    comm_s = (result.comm_share or 0.0) * step_s
    return StepSplit(step_s=step_s, fwd_bwd_s=max(0.0, step_s - optimizer_s), optimizer_s=optimizer_s, comm_s=comm_s)


def busbw_series(engine: Engine, cell_id: int) -> tuple[dict[str, list[tuple[int, float]]], set[str]]:
    """Per collective, busbw by message size; the out-of-place figure where both placements were measured
    (nccl-tests' first column), the last recorded attempt's where several measured a size. Second: the
    ops with a size measured only in place."""
    chosen: dict[tuple[str, int], tuple[bool, float]] = {}
    for event in q.events(engine, cell_id, kind="sample", phase="collectives"):
        data = json.loads(event.data_json)
        if data.get("busbw_gbps") is None or data.get("op") is None or not whole_cluster(data):
            continue  # across nodes: the whole cluster's sweep (each node's and rail's are in the artifacts)
        key, in_place = (str(data["op"]), int(data["bytes"])), bool(data.get("in_place"))
        if key not in chosen or in_place <= chosen[key][0]:
            chosen[key] = (in_place, float(data["busbw_gbps"]))
    series: dict[str, list[tuple[int, float]]] = {}
    in_place_ops = set()
    for (op, size), (in_place, busbw) in sorted(chosen.items()):
        series.setdefault(op, []).append((size, busbw))
        if in_place:
            in_place_ops.add(op)
    return series, in_place_ops


def preflight_runs(engine: Engine, cell_id: int) -> list[PreflightRun]:
    """One entry per attempt that reported preflight checks, in attempt order."""
    by_attempt: dict[int, dict[str, Check]] = {}
    for event in q.events(engine, cell_id, kind="sample", phase="preflight"):
        data = json.loads(event.data_json)
        name = str(data.get("name", "?"))
        by_attempt.setdefault(event.attempt_id, {})[name] = Check(
            name, str(data.get("status", "?")), data.get("observed"), data.get("expected"), str(data.get("hint") or ""))
    return [PreflightRun(a.number, a.host, a.outcome, by_attempt[a.id])
            for a in q.attempts(engine, cell_id) if a.id in by_attempt]


def _accrued(attempt: Attempt, until: float) -> float:
    """USD an attempt had cost by ``until``: its price × the part of [launched, terminated or now] before it."""
    if attempt.launched_at is None or attempt.hourly_usd is None:
        return 0.0
    end = min(until, attempt.terminated_at if attempt.terminated_at is not None else until)
    return max(0.0, end - attempt.launched_at) / 3600.0 * attempt.hourly_usd


def spend_curve(attempts: list[Attempt], now: float) -> list[tuple[float, float]]:
    """Cumulative spend at each launch and termination (and ``now`` while one is open); it is linear
    between these points. Closed attempts count their recorded cost at their termination."""
    points = {t for a in attempts for t in (a.launched_at, a.terminated_at) if t is not None}
    if any(a.open for a in attempts):
        points.add(now)
    curve = []
    for t in sorted(points):
        total = 0.0
        for a in attempts:
            closed_by_t = not a.open and a.terminated_at is not None and a.terminated_at <= t
            total += (a.cost_usd or 0.0) if closed_by_t else _accrued(a, t)
        curve.append((t, total))
    return curve


def spend_by_provider(attempts: list[Attempt], now: float) -> dict[str, dict[str, float]]:
    totals: dict[str, dict[str, float]] = {}
    for a in attempts:
        outcome = "open" if a.open else (a.outcome or "unknown")
        spent = _accrued(a, now) if a.open else (a.cost_usd or 0.0)
        per = totals.setdefault(a.provider, {})
        per[outcome] = per.get(outcome, 0.0) + spent
    return totals
