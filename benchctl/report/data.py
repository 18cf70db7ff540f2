"""What the report of one campaign shows, gathered from the store (no rendering here).

Per cell: timed step times, the step split (``benchctl.results.step_split``), busbw against message size per
collective, cost-to-train, preflight verdicts per attempt. Per campaign: cumulative spend over time
(each attempt accrues its hourly price from ``launched_at`` to ``terminated_at``, an open one until
``now``), spend per provider and attempt outcome, the leaderboard rows.

What it reads follows what the page shows, not what the store holds: a fixed number of
statements per campaign (``benchctl.store.aggregates``), the detail (samples, busbw, preflight) of
the ``PLOTTED_CELLS`` best cells only, the preflight runs of at most ``PREFLIGHT_CELLS`` cells
that had a bad node besides, and at most ``TABLE_ROWS`` leaderboard rows per rank group.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy.engine import Engine

from benchctl.payload.stats import median
from benchctl.results.cell_evidence import measured, whole_cluster
from benchctl.results.cell_result import first_timed
from benchctl.results.collective_names import Names
from benchctl.results.leaderboard import Filters, leaderboard_rows, ranking
from benchctl.results.step_split import StepSplit, step_split
from benchctl.store import aggregates as agg
from benchctl.store import queries as q

PLOTTED_CELLS = 30
"""Cells in each per-cell figure: the best in rank order (the leaderboard table lists more)."""
TABLE_ROWS = 200
"""Leaderboard rows on the page per rank group, and rows without a result at most (``leaderboard_omitted``)."""
PREFLIGHT_CELLS = 30
"""Cells outside the figures whose preflight runs the page tabulates: those with the newest bad nodes."""
BUSBW_CELLS = 8
"""Lines per busbw panel at most (the palette's colours): the first cells in rank order with
collectives measured on ≥ 2 ranks (``busbw_cells``)."""
SPEND_POINTS = 500
"""Points at most on the spend curve (a campaign of 10,000 attempts has 20,000 breakpoints)."""

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
    busbw_left_out: str = ""
    """One line naming the collectives the cell's samples name past those kept (``collective_names``), or ''."""
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
    cells_by_state: dict[str, int] | None = None
    """State → the campaign's cells in it (all of them, not only ``cells``); None: count ``cells``."""
    preflight_only: list[CellData] = field(default_factory=list)
    """Cells not in ``cells`` whose preflight runs the page also tabulates (the newest bad nodes)."""
    leaderboard_omitted: int = 0
    """Leaderboard rows of the campaign not in ``leaderboard`` (``TABLE_ROWS``)."""

    @property
    def cells_total(self) -> int:
        return sum(self.cells_by_state.values()) if self.cells_by_state is not None else len(self.cells)

    @property
    def cells_done(self) -> int:
        if self.cells_by_state is not None:
            return self.cells_by_state.get("done", 0)
        return sum(c.state == "done" for c in self.cells)


def rank_key(cell: CellData) -> tuple[bool, float, bool, float, str]:
    """Rank order: cheapest cost-to-train first, then the cells without a result by median step time
    (none last), then by key; the leaderboard's order for the cells it ranks."""
    step = median_step_ms(cell)
    return (cell.cost_usd is None, cell.cost_usd or 0.0, step is None, step or 0.0, cell.key)


def busbw_cells(data: CampaignData) -> list[int]:
    """Indexes (in ``data.cells``, which keep each cell's colour) of the cells the busbw figure draws."""
    return [i for i, c in enumerate(data.cells) if c.ranks > 1 and c.busbw][:BUSBW_CELLS]


def median_step_ms(cell: CellData) -> float | None:
    """The cell's median timed step time (its samples', else its result's), or None."""
    if cell.step_times_ms:
        return median(cell.step_times_ms)
    return cell.step_summary_ms[1] if cell.step_summary_ms else None


def campaign_data(engine: Engine, name: str, now: float | None = None) -> CampaignData:
    """Everything the report shows for campaign ``name`` (which must exist); the statements it
    runs do not grow with the campaign's cells."""
    now = time.time() if now is None else now
    (camp,) = q.campaigns(engine, name)
    assert camp.id is not None
    spec = json.loads(camp.spec_json).get("spec", {})
    target = spec.get("target", {})
    phases = spec.get("payload", {}).get("phases")
    model, tokens_per_step = str(target.get("model", "?")), int(target.get("total_batch_size", 0))
    best = agg.best_cells(engine, camp.id, PLOTTED_CELLS)
    bad = [i for i in agg.cells_with_outcome(engine, camp.id, "bad_node", PREFLIGHT_CELLS + len(best))
           if i not in {c.id for c in best}][:PREFLIGHT_CELLS]
    plotted = [c.id for c in best]
    profile = agg.cell_samples(engine, plotted, "profile")
    collectives = agg.cell_samples(engine, plotted, "collectives")
    preflight = preflight_runs_of(engine, plotted + bad)
    cells = []
    for row in best:
        timed = first_timed((attempt_id, _data(data)) for attempt_id, _, data in profile[row.id])
        names = Names()
        series, in_place = busbw_series_of([_data(data) for _, _, data in collectives[row.id]], names)
        cells.append(CellData(key=row.key, provider=row.provider, state=row.state, ranks=row.count,
                              step_times_ms=[float(data["step_time_s"]) * 1000 for _, data in timed],
                              step_summary_ms=_summary(row),
                              split=step_split([data for _, data in timed]) or _recorded_split(row),
                              busbw=series, busbw_in_place=in_place, busbw_left_out=names.left_out.line(),
                              cost_usd=row.cost_to_train_usd,
                              hourly_usd=row.hourly_usd, preflight=preflight.get(row.id, [])))
    keys = dict(agg.cell_keys(engine, bad))
    others = [CellData(key=keys.get(i, "?"), provider="", state="", ranks=0, preflight=preflight.get(i, []))
              for i in bad]
    if model == "?":  # an imported campaign: its records say what they were priced for
        model = agg.first_model(engine, camp.id) or "?"
        targets = [json.loads(c.config_json or "{}").get("target") or {} for c in best]
        tokens_per_step = next((int(t["total_batch_size"]) for t in targets
                                if t.get("model") == model and t.get("total_batch_size")), 0)
    cells.sort(key=rank_key)
    attempts = agg.attempt_spends(engine, camp.id)
    curve = spend_curve(attempts, now)
    kept, omitted = bounded_leaderboard(ranking(engine, Filters(campaigns=[camp.name])))  # a few columns of every row
    rows = leaderboard_rows(engine, camp.name, only=kept)  # the whole rows of those shown
    return CampaignData(name=camp.name, budget_usd=camp.budget_usd, spent_usd=curve[-1][1] if curve else 0.0,
                        model=model, tokens_per_step=tokens_per_step, cells=cells,
                        spend_curve=thinned(curve), spend_by_provider=spend_by_provider(attempts, now),
                        leaderboard=rows, leaderboard_omitted=omitted,
                        reference=PUBLISHED_STEP_MS.get((model, tokens_per_step)), now=now,
                        phases=tuple(phases) if isinstance(phases, list) else None,
                        cells_by_state=agg.cell_state_counts(engine, camp.id), preflight_only=others)


def _summary(row: agg.CellRow) -> tuple[float, float, float] | None:
    """(p10, median, p90) of the cell's result; None without one."""
    if row.step_time_ms is None:
        return None
    return (row.step_time_p10_ms or row.step_time_ms, row.step_time_ms, row.step_time_p90_ms or row.step_time_ms)


def _data(data_json: str) -> dict[str, Any]:
    """A stored event's data (a damaged row reads as nothing)."""
    try:
        data = json.loads(data_json)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def bounded_leaderboard(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The first ``TABLE_ROWS`` ranks of each rank group and the first ``TABLE_ROWS`` rows without a
    result, in the leaderboard's order; second, how many rows were left out."""
    kept: list[dict[str, Any]] = []
    unranked = 0
    for row in rows:
        if row["rank"] is not None:
            if row["rank"] <= TABLE_ROWS:
                kept.append(row)
        elif unranked < TABLE_ROWS:
            kept.append(row)
            unranked += 1
    return kept, len(rows) - len(kept)


def _recorded_split(result: agg.CellRow | None) -> StepSplit | None:
    """The split an imported record states (optimizer time or share, communication share), where
    there are no timed samples to compute it from."""
    if result is None or result.step_time_ms is None:
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
    """``busbw_series_of`` the cell's stored collectives samples."""
    return busbw_series_of([_data(d) for _, _, d in agg.cell_samples(engine, [cell_id], "collectives")[cell_id]])


def busbw_series_of(samples: list[dict[str, Any]], names: Names | None = None,
                    ) -> tuple[dict[str, list[tuple[int, float]]], set[str]]:
    """Per collective, busbw by message size; the out-of-place figure where both placements were measured
    (nccl-tests' first column), the last recorded attempt's where several measured a size. Second: the
    ops with a size measured only in place. ``samples``: one cell's collectives samples, in order, of
    the type and reduction the campaign measures (``measured``: an import of nccl-tests ``-d all`` or
    ``-o all``); only
    the collectives ``names`` takes (nccl-tests' own and a few others: ``collective_names``; a new
    ``Names`` when not given, which then says what was left out)."""
    chosen: dict[tuple[str, int], tuple[bool, float]] = {}
    names = Names() if names is None else names
    for data in measured(samples):
        if data.get("busbw_gbps") is None or data.get("op") is None or not whole_cluster(data):
            continue  # across nodes: the whole cluster's sweep (each node's and rail's are in the artifacts)
        if not names.take(str(data["op"])):
            continue
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


def busbw_ops(data: CampaignData) -> tuple[list[str], str]:
    """The collectives the busbw figure has a panel for (of its cells': nccl-tests' own and a few
    others, ``collective_names``) and one line saying what was left out, by a cell or by the figure."""
    names = Names()
    ops = [op for op in sorted({op for i in busbw_cells(data) for op in data.cells[i].busbw}) if names.take(op)]
    lines = [f"{data.cells[i].key}: {data.cells[i].busbw_left_out}" for i in busbw_cells(data)
             if data.cells[i].busbw_left_out]
    return ops, " ".join([*lines, names.left_out.line()]).strip()


def preflight_runs(engine: Engine, cell_id: int) -> list[PreflightRun]:
    """One entry per attempt that reported preflight checks, in attempt order."""
    return preflight_runs_of(engine, [cell_id]).get(cell_id, [])


def preflight_runs_of(engine: Engine, cell_ids: list[int]) -> dict[int, list[PreflightRun]]:
    """``preflight_runs`` of each of ``cell_ids``, in two statements."""
    by_attempt: dict[int, dict[str, Check]] = {}
    for samples in agg.cell_samples(engine, cell_ids, "preflight").values():
        for attempt_id, _, data_json in samples:
            data = _data(data_json)
            name = str(data.get("name", "?"))
            by_attempt.setdefault(attempt_id, {})[name] = Check(
                name, str(data.get("status", "?")), data.get("observed"), data.get("expected"),
                str(data.get("hint") or ""))
    runs: dict[int, list[PreflightRun]] = {}
    for a in agg.attempts_of(engine, cell_ids):
        if a.id in by_attempt:
            runs.setdefault(a.cell_id, []).append(PreflightRun(a.number, a.host, a.outcome, by_attempt[a.id]))
    return runs


class _Spend(Protocol):
    """An attempt's spend columns (a stored Attempt, or ``benchctl.store.aggregates.AttemptSpend``)."""

    @property
    def provider(self) -> str: ...
    @property
    def open(self) -> bool: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def launched_at(self) -> float | None: ...
    @property
    def terminated_at(self) -> float | None: ...
    @property
    def hourly_usd(self) -> float | None: ...
    @property
    def cost_usd(self) -> float | None: ...


def _accrued(attempt: _Spend, until: float) -> float:
    """USD an attempt had cost by ``until``: its price × the part of [launched, terminated or now] before it."""
    if attempt.launched_at is None or attempt.hourly_usd is None:
        return 0.0
    end = min(until, attempt.terminated_at if attempt.terminated_at is not None else until)
    return max(0.0, end - attempt.launched_at) / 3600.0 * attempt.hourly_usd


def spend_curve(attempts: Sequence[_Spend], now: float) -> list[tuple[float, float]]:
    """Cumulative spend at each launch and termination (and ``now`` while one is open); it is linear
    between these points. Closed attempts count their recorded cost at their termination. One sweep
    over the sorted points (each attempt starts accruing at its launch, stops at its termination,
    where a closed one's accrual is replaced by its recorded cost)."""
    points = {t for a in attempts for t in (a.launched_at, a.terminated_at) if t is not None}
    if any(a.open for a in attempts):
        points.add(now)
    changes: dict[float, list[tuple[float, float]]] = {}  # time → [(rate change $/s, jump $)]
    for a in attempts:
        rate = (a.hourly_usd or 0.0) / 3600.0 if a.launched_at is not None else 0.0
        if rate and a.terminated_at is not None and a.terminated_at < a.launched_at:  # type: ignore[operator]
            rate = 0.0  # ended before it started: it never accrued
        if rate:
            changes.setdefault(a.launched_at, []).append((rate, 0.0))  # type: ignore[arg-type]
        if a.terminated_at is not None:
            accrued = _accrued(a, a.terminated_at) if rate else 0.0
            jump = (a.cost_usd or 0.0) - accrued if not a.open else 0.0
            changes.setdefault(a.terminated_at, []).append((-rate, jump))
    curve: list[tuple[float, float]] = []
    rate = total = 0.0
    previous: float | None = None
    for t in sorted(points):
        if previous is not None:
            total += rate * (t - previous)
        for delta, jump in changes.get(t, ()):
            rate += delta
            total += jump
        curve.append((t, total))
        previous = t
    return curve


def thinned(curve: list[tuple[float, float]], most: int = SPEND_POINTS) -> list[tuple[float, float]]:
    """At most ``most`` points of ``curve``, evenly spaced by index, the first and last kept."""
    if len(curve) <= most:
        return curve
    step = (len(curve) - 1) / (most - 1)
    return [curve[round(i * step)] for i in range(most)]


def spend_by_provider(attempts: Sequence[_Spend], now: float) -> dict[str, dict[str, float]]:
    totals: dict[str, dict[str, float]] = {}
    for a in attempts:
        outcome = "open" if a.open else (a.outcome or "unknown")
        spent = _accrued(a, now) if a.open else (a.cost_usd or 0.0)
        per = totals.setdefault(a.provider, {})
        per[outcome] = per.get(outcome, 0.0) + spent
    return totals
