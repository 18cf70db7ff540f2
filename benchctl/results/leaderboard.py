"""Leaderboard rows: one per cell across campaigns, ranked cheapest cost-to-train first within each
rank group (the target model and its target steps: a ranking only compares like with like);
groups in model order, cells without a result last.

One query reads every cell with its result (the evidence columns are computed once, with the
result: ``benchctl.results.cell_result``), so ranking stays fast on large stores. Where a configuration (the
cell key without its market) has both a spot and an on-demand price somewhere in the store, each
of its rows also carries both costs: ``train_hours × spot_usd_per_hour`` and
``train_hours × on_demand_usd_per_hour`` (each price the median of that market's rows).
"""

from __future__ import annotations

import functools
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchctl.campaign.cell_key import CellKey, market_slot
from benchctl.payload.comm.collective_math import format_bytes
from benchctl.payload.stats import median
from benchctl.results.cell_evidence import flags_from
from benchctl.results.evidence_rules import NO_RESULT
from benchctl.store.aggregates import FlagEvidence, flag_evidence
from benchctl.store.models import Campaign, Cell, Result

COLUMNS = ("rank", "campaign", "cell", "provider", "gpu", "count", "nodes", "interconnect", "vcpus", "numa", "market",
           "env", "model", "precision", "compiled", "attention", "host_data", "hourly_usd", "step_time_ms",
           "step_time_p10_ms", "step_time_p90_ms", "timed_steps", "drift", "settle_steps", "settle_s", "optimizer_ms",
           "optimizer_share", "comm_share", "busbw_gbps", "busbw_bytes", "target_steps", "train_hours",
           "cost_to_train_usd", "spot_usd_per_hour",
           "on_demand_usd_per_hour", "cost_spot_usd", "cost_on_demand_usd", "flags", "status", "no_result")
"""Every row's keys, in order (JSON and CSV)."""

TABLE = (("rank", "rank"), ("model", "model"), ("campaign", "campaign"), ("provider", "provider"), ("cell", "cell"),
         ("configuration", "configuration"), ("node", "node"), ("precision", "precision"), ("market", "market"),
         ("price", "$/hr"), ("step", "step ms"), ("spread", "p10-p90 ms"), ("timed", "timed steps (drift)"),
         ("optimizer", "optimizer ms"),
         ("comm", "comm"), ("busbw", "busbw GB/s @size"), ("steps", "target steps"), ("hours", "train h"),
         ("cost", "cost-to-train $"), ("both", "spot / on-demand $"), ("flags", "flags"), ("status", "status"))
"""The columns ``table`` and ``md`` can show, (name for ``--columns``, header): the same numbers as
COLUMNS, composed for reading (``display_row``)."""
TABLE_COLUMNS = tuple(header for _, header in TABLE)
"""Every header, in order (``--wide``, the report)."""
NARROW_COLUMNS = ("rank", "model", "configuration", "provider", "market", "step ms", "cost-to-train $", "flags")
"""The default table when piped and in md."""
TERMINAL_PRIORITY = ("rank", "cost-to-train $", "configuration", "provider", "market", "step ms", "flags", "model",
                     "$/hr", "node", "p10-p90 ms", "precision", "target steps", "train h", "comm", "busbw GB/s @size",
                     "optimizer ms", "spot / on-demand $", "campaign", "status", "cell", "timed steps (drift)")
"""The default table on a terminal: as many of these as fit its width, most wanted first (``model``
moves up to the fourth when several models or targets are ranked), shown in TABLE_COLUMNS' order."""

_RESULT_COLUMNS = ("step_time_ms", "step_time_p10_ms", "step_time_p90_ms", "timed_steps", "drift", "settle_steps",
                   "settle_s", "hourly_usd", "target_steps",
                   "train_hours", "cost_to_train_usd", "model", "interconnect", "vcpus", "numa", "optimizer_ms",
                   "optimizer_share", "comm_share", "busbw_gbps", "busbw_bytes", "precision", "compiled",
                   "attention", "host_data", "flags_json")


@dataclass(frozen=True)
class Filters:
    campaigns: Sequence[str] = ()
    providers: Sequence[str] = ()
    markets: Sequence[str] = ()
    models: Sequence[str] = ()


def leaderboard_rows(engine: Engine, campaign: str | None = None, filters: Filters | None = None,
                     only: Sequence[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Rows with the keys of COLUMNS, ranked; ``campaign`` is a shorthand for ``filters.campaigns``.
    ``only``: rows of ``ranking`` (ranked among every row), of which to read the whole row, in their order
    (by cell id, up to ``BY_ID`` of them; more: every row is read and those kept)."""
    filters = filters or Filters(campaigns=[campaign] if campaign else [])
    query = _query(filters)
    cell, result = _table(Cell), _table(Result)
    if only is not None and len(only) <= BY_ID:
        query = query.where(cell.c.id.in_([r["cell_id"] for r in only]))
    prices = (sa.select(cell.c.key, cell.c.market, result.c.hourly_usd)
              .select_from(cell).join(result, result.c.cell_id == cell.c.id))
    with engine.connect() as conn:
        records = conn.execute(query).all()
        shown = {configuration_key(record[2]) for record in records} if only is not None else None  # _query's
        listed: Sequence[Any]
        if shown is not None and len(shown) <= MAX_PRICED_CONFIGS:  # the prices of the shown configurations only
            near = prices.where(cell.c.id.in_(  # ids by key alone: SQLite scans its (campaign, key) index, not the rows
                sa.select(cell.c.id).where(_may_be_configuration(cell.c.key, shown))))
            listed = [price for price in conn.execute(near) if configuration_key(price[0]) in shown]
        else:
            listed = conn.execute(prices).all()
    unflagged = query.with_only_columns(cell.c.id).where(sa.or_(result.c.cell_id.is_(None),
                                                                result.c.flags_json.is_(None)))
    evidence = flag_evidence(engine, unflagged) if any(record.flags_json is None for record in records) else None
    rows = [_row(record, evidence) for record in records]
    _add_both_markets(rows, listed)
    if only is None:
        return _ranked(rows)
    place = {(r["campaign"], r["cell"]): (k, r["rank"]) for k, r in enumerate(only)}  # key: unique per campaign
    rows = [row for row in rows if (row["campaign"], row["cell"]) in place]
    for row in rows:
        row["rank"] = place[(row["campaign"], row["cell"])][1]
    return sorted(rows, key=lambda row: place[(row["campaign"], row["cell"])][0])


BY_ID = 5_000
"""``leaderboard_rows(only=…)`` reads up to this many rows by cell id (one IN list), more by reading every row."""


def ranking(engine: Engine, filters: Filters) -> list[dict[str, Any]]:
    """Every row's place, ranked as ``leaderboard_rows`` ranks them, from the columns ranking needs
    only (``cell_id``, ``model``, ``target_steps``, ``cost_to_train_usd``, ``campaign``, ``cell``,
    ``precision``, ``rank``): what a command that shows a part of the leaderboard reads for every row."""
    cell, result, camp = _table(Cell), _table(Result), _table(Campaign)
    query = _query(filters).with_only_columns(cell.c.id, result.c.model, result.c.target_steps,
                                              result.c.cost_to_train_usd, camp.c.name, cell.c.key, result.c.precision)
    with engine.connect() as conn:
        rows = [_rank_row(record) for record in conn.execute(query)]
    return _ranked(rows)


@dataclass(frozen=True)
class Part:
    """What a command that shows a part of the leaderboard shows: ``rows`` (``ranking``'s rows, in
    rank order), ``more`` (the rows of the part not shown: past ``limit``) and ``groups`` (every rank
    group of the filtered rows with a cost: the title names them)."""

    rows: list[dict[str, Any]]
    more: int
    groups: set[tuple[str | None, int | None, str | None]]


def ranked_part(engine: Engine, filters: Filters, top: int | None, limit: int | None) -> Part:
    """``ranking(engine, filters)`` less the rows of a rank above ``top``, cut to ``limit`` rows, as
    ``Part``: the same rows and ranks, read without every row. SQL counts the rank groups and
    fetches, per group, the rows whose cost is at most its ``top``-th (else ``limit``-th) cheapest
    (ties kept: a prefix of the group's order); Python orders and ranks those as ``_ranked`` does.
    Rows without a cost are read only when the costed rows do not fill ``limit``. Where two groups
    share a place in the order (models that differ only in case, say), every row is ranked
    (``ranking``)."""
    cell, result, camp = _table(Cell), _table(Result), _table(Campaign)
    query = _query(filters)
    costed = query.where(result.c.cost_to_train_usd.is_not(None))
    group_columns = (result.c.model, result.c.target_steps, result.c.precision)
    with engine.connect() as conn:
        sizes = {(m, t, p): n for m, t, p, n in conn.execute(
            costed.with_only_columns(*group_columns, sa.func.count()).group_by(*group_columns))}
        total = (conn.execute(query.with_only_columns(sa.func.count())).scalar() or 0) if top is None else 0
    places = {_group_place(group) for group in sizes}
    if len(places) < len(sizes):  # two groups interleave in the order: rank every row as ranking() does
        order = ranking(engine, filters)
        if top is not None:
            order = [r for r in order if r["rank"] is not None and r["rank"] <= top]
        more = max(0, len(order) - limit) if limit is not None else 0
        return Part(order[:limit] if more else order, more, {rank_group(r) for r in order if r["rank"] is not None})
    wanted = top if top is not None else limit
    if wanted is None:
        raise ValueError("ranked_part needs top or limit")
    count = sum(min(top, size) for size in sizes.values()) if top is not None else total
    cost = result.c.cost_to_train_usd
    columns = (cell.c.id, result.c.model, result.c.target_steps, cost, camp.c.name, cell.c.key, result.c.precision)
    with engine.connect() as conn:
        if len(sizes) <= GROUPS_ONE_BY_ONE:  # per group: its wanted-th cost (a sort kept to N rows), then those
            records: list[Any] = []
            for group, size in sizes.items():
                in_group = costed.where(*(c.is_not_distinct_from(v) for c, v in zip(group_columns, group, strict=True)))
                if size > wanted:
                    nth = in_group.with_only_columns(cost).order_by(cost).limit(1).offset(wanted - 1).scalar_subquery()
                    in_group = in_group.where(cost <= nth)
                records += conn.execute(in_group.with_only_columns(*columns)).all()
        else:  # every group at once: a window RANK over the cost (ties share a place)
            place = sa.func.rank().over(partition_by=group_columns, order_by=cost).label("place")
            cheapest = costed.with_only_columns(*columns, place).subquery()
            records = [*conn.execute(sa.select(*(cheapest.c[c.name] for c in columns))
                                   .where(cheapest.c.place <= wanted))]
    rows = _ranked([_rank_row(record) for record in records])
    rows = [row for row in rows if row["rank"] <= wanted]
    if top is None and limit is not None and len(rows) < limit:  # the costed rows do not fill the view
        with engine.connect() as conn:
            uncosted = [_rank_row(record) for record in conn.execute(
                query.where(result.c.cost_to_train_usd.is_(None)).with_only_columns(*columns))]
        rows += sorted(uncosted, key=_rank_order)
    more = max(0, count - limit) if limit is not None else 0
    return Part(rows[:limit] if limit is not None else rows, more, set(sizes))


GROUPS_ONE_BY_ONE = 8
"""``ranked_part`` reads up to this many rank groups one statement each (the N cheapest of a group by
a sort SQL keeps to N rows), more with one window RANK over every row (a full sort)."""


def _rank_row(record: Any) -> dict[str, Any]:
    i, model, steps, cost, name, key, precision = record
    return {"cell_id": i, "model": model, "target_steps": steps, "cost_to_train_usd": cost, "campaign": name,
            "cell": key, "precision": precision, "rank": None}


def _group_place(group: tuple[str | None, int | None, str | None]) -> tuple[Any, ...]:
    """Where ``_rank_order`` puts a rank group's rows (rows of groups with one place interleave)."""
    model, steps, precision = group
    return _natural(model), steps or 0, precision or ""


def _ranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` in rank order, each with its ``rank`` within its rank group (None without a cost)."""
    rows.sort(key=_rank_order)
    rank, group = 0, None
    for row in rows:
        if row["cost_to_train_usd"] is None:
            continue
        rank = rank + 1 if rank_group(row) == group else 1
        row["rank"], group = rank, rank_group(row)
    return rows


def _query(filters: Filters) -> sa.Select[Any]:
    """Every cell with its campaign and result, as ``_row`` reads them, filtered."""
    camp, cell, result = (_table(m) for m in (Campaign, Cell, Result))
    query = (sa.select(camp.c.name, cell.c.id, cell.c.key, cell.c.provider, cell.c.gpu, cell.c.count, cell.c.market,
                       cell.c.state, cell.c.config_json, cell.c.reason, *(result.c[c] for c in _RESULT_COLUMNS))
             .select_from(cell).join(camp, camp.c.id == cell.c.campaign_id)
             .outerjoin(result, result.c.cell_id == cell.c.id))
    for column, wanted in _filtered_columns(filters):
        if wanted:
            query = query.where(sa.func.lower(column).in_([w.lower() for w in wanted]))
    return query


def rank_group(row: dict[str, Any]) -> tuple[str | None, int | None, str | None]:
    """What a row is ranked among: rows pricing the same model over the same target steps with
    matmuls of the same precision (an fp8 step is not a bf16 one: the record's fp8 is ≈ 15 % faster)."""
    return row["model"], row["target_steps"], row.get("precision")


@functools.lru_cache(maxsize=256)
def _natural(text: str | None) -> tuple[Any, ...]:
    """``nanochat-d2`` before ``nanochat-d12``; no model last."""
    if text is None:
        return (1,)
    return (0, *(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text.lower())))


def _rank_order(row: dict[str, Any]) -> tuple[Any, ...]:
    cost = row["cost_to_train_usd"]
    return (cost is None, _natural(row["model"]) if cost is not None else (), row["target_steps"] or 0,
            row.get("precision") or "", cost or 0.0, row["campaign"], row["cell"])


_FILTER_FLAGS = ("--campaign", "--provider", "--market", "--model")


def _filtered_columns(filters: Filters) -> list[tuple[Any, Sequence[str]]]:
    camp, cell, result = (_table(m) for m in (Campaign, Cell, Result))
    return [(camp.c.name, filters.campaigns), (cell.c.provider, filters.providers), (cell.c.market, filters.markets),
            (result.c.model, filters.models)]


def unmatched_filter(engine: Engine, filters: Filters) -> str | None:
    """The first filter value (case-insensitive) that matches nothing in the store, said with the
    values known: ``no results match --provider X; known: a, b``. None when each value matches."""
    for flag, (column, wanted) in zip(_FILTER_FLAGS, _filtered_columns(filters), strict=True):
        if not wanted:
            continue
        with engine.connect() as conn:
            known = sorted({v for (v,) in conn.execute(sa.select(column).distinct()) if v is not None})
        folded = {k.lower() for k in known}
        for value in wanted:
            if value.lower() not in folded:
                shown = ", ".join(known[:12]) + (f", … ({len(known)} in all)" if len(known) > 12 else "")
                return f"no results match {flag} {value}; known: {shown or 'none'}"
    return None


def filters_text(filters: Filters) -> str:
    """The filters as the command line gave them (``--provider runpod --market spot``)."""
    given = zip(_FILTER_FLAGS, (filters.campaigns, filters.providers, filters.markets, filters.models), strict=True)
    return " ".join(f"{flag} {value}" for flag, values in given for value in values)


def _table(model: type) -> sa.Table:
    table = model.__table__  # type: ignore[attr-defined]
    assert isinstance(table, sa.Table)
    return table


def _row(record: Any, evidence: FlagEvidence | None) -> dict[str, Any]:
    """One row; the flags of a cell whose result does not carry them (no result, or one computed
    before schema v6) from ``evidence``, read for all such cells at once."""
    (campaign, cell_id, key, provider, gpu, count, market, state, config_json, reason, *result) = record
    values = dict(zip(_RESULT_COLUMNS, result, strict=True))
    flags_json = values.pop("flags_json")
    row: dict[str, Any] = {name: None for name in COLUMNS}
    row.update(values)
    row["timed_steps"] = row["timed_steps"] or None  # 0: an imported record that did not say
    config = json.loads(config_json)
    flags = list(_flags(flags_json)) if flags_json is not None else _evidence_flags(evidence, cell_id)
    row.update(campaign=campaign, cell=key, provider=provider, gpu=gpu, count=count, market=market, status=state,
               env=config.get("env", {}), nodes=config.get("nodes", 1),  # cells stored before nodes existed: 1
               flags=_with_drift(flags, row["drift"]))
    row["no_result"] = reason if reason and reason.startswith(NO_RESULT) else None  # why its evidence was refused
    return row


DRIFT_FLAG_ABOVE = 0.02
"""The ``drift`` flag: the timed steps' last quarter more than 2 % slower (or faster) than their
first: the median may not be the steady state a long run would see."""


def _with_drift(flags: list[str], drift: float | None) -> list[str]:
    """``flags`` with ``drift +3.1%`` where the row's drift exceeds ``DRIFT_FLAG_ABOVE`` (a flag a
    re-imported row already carries is recomputed from its ``drift``, never doubled)."""
    if drift is None:
        return flags
    kept = [f for f in flags if not f.startswith("drift ")]
    return sorted([*kept, f"drift {drift:+.1%}"]) if abs(drift) > DRIFT_FLAG_ABOVE else kept


def _evidence_flags(evidence: FlagEvidence | None, cell_id: int) -> list[str]:
    if evidence is None:
        return []
    preflight = [_json_or_none(data) for data in evidence.preflight.get(cell_id, [])]
    return flags_from([c for c in preflight if isinstance(c, dict)], evidence.outcomes.get(cell_id, {}))


def _json_or_none(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1024)
def _flags(flags_json: str) -> tuple[str, ...]:
    return tuple(json.loads(flags_json))  # most cells share a few flag sets


def configuration_key(cell_key: str) -> str:
    """The cell key without its market (``provider:shape:market:...``): what spot and on-demand share."""
    return CellKey.parse(cell_key).without_market()


MAX_PRICED_CONFIGS = 200
"""``leaderboard_rows(only=…)`` reads the prices of the shown rows' configurations (at most one OR
each: SQLite parses expressions at most 1,000 deep) up to this many of them, more by reading every price."""


def _may_be_configuration(key: Any, configs: set[str]) -> Any:
    """An SQL condition on a cell ``key`` column that holds for every key whose ``configuration_key``
    is in ``configs`` (and for a few more, which the caller drops): one of ``configs`` itself (a key
    of two parts or fewer), or ``provider:shape:<any market>[:the rest]`` of one of them, told by a
    prefix and a suffix looked up in sets, per pair of their lengths (a few IN tests per row)."""
    ends: dict[tuple[int, int], tuple[set[str], set[str]]] = defaultdict(lambda: (set(), set()))
    for config in configs:
        slot = market_slot(config)
        if slot is not None:
            prefix, suffix = slot
            prefixes, suffixes = ends[(len(prefix), len(suffix))]
            prefixes.add(prefix)
            suffixes.add(suffix)
    length = sa.func.length(key)
    terms = [key.in_(sorted(configs))]
    for (p, s), (prefixes, suffixes) in sorted(ends.items()):
        term = sa.and_(length >= p + s, sa.func.substr(key, 1, p).in_(sorted(prefixes)))
        terms.append(sa.and_(term, sa.func.substr(key, length - s + 1, s).in_(sorted(suffixes))) if s else term)
    return sa.or_(*terms)


def _add_both_markets(rows: list[dict[str, Any]], listed: Sequence[Any]) -> None:
    """Both costs on ``rows`` from ``listed`` (cell key, market, $/hr of every result in the store:
    a filter on market or campaign must not hide the other market's price)."""
    by_market: dict[tuple[str, str], list[float]] = defaultdict(list)
    for key, market, hourly in listed:
        if hourly is not None:
            by_market[(configuration_key(key), market)].append(float(hourly))
    prices = {config: (median(values), median(by_market[(config, "on-demand")]))
              for (config, market), values in by_market.items()
              if market == "spot" and (config, "on-demand") in by_market}
    if not prices:
        return
    for row in rows:
        both = prices.get(configuration_key(row["cell"]))
        if both is None:
            continue
        spot, on_demand = both
        row["spot_usd_per_hour"], row["on_demand_usd_per_hour"] = spot, on_demand
        if row["train_hours"] is not None:
            row["cost_spot_usd"] = row["train_hours"] * spot
            row["cost_on_demand_usd"] = row["train_hours"] * on_demand


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _how(row: dict[str, Any]) -> str:
    """The precision, ``eager`` where GPU steps ran without torch.compile (not comparable with compiled
    rows), and the host data load where the batches were not synthetic (``bf16 eager, tokenize``)."""
    precision = row["precision"] or "-"
    if row.get("compiled") is False and precision != "f32":  # f32: CPU, where nothing compiles
        precision += " eager"
    host = row.get("host_data")
    return f"{precision}, {host}" if host and host != "synthetic" else precision


def _timed(row: dict[str, Any]) -> str:
    """``200 (+0.4%)``: the steps the median is of, and their drift where there were 4 or more."""
    if not row.get("timed_steps"):
        return "-"
    drift = row.get("drift")
    return f"{row['timed_steps']:,}" + ("" if drift is None else f" ({drift:+.1%})")


def display_row(row: dict[str, Any], with_steps: bool = False, with_precision: bool = False) -> dict[str, Any]:
    """The row composed for a person (TABLE_COLUMNS): configuration = gpu×count and env; node =
    interconnect, vCPUs and NUMA layout; step time as median, p10-p90 beside it. ``with_steps``:
    the model also says its target steps (when one model is ranked over several targets);
    ``with_precision``: its matmul precision (when one model is ranked at several precisions)."""
    node = [row["interconnect"], f"{row['vcpus']} vCPU" if row["vcpus"] else None,
            f"NUMA {row['numa']}" if row["numa"] else None]
    nodes = f"{row['nodes']} nodes × " if (row.get("nodes") or 1) > 1 else ""
    config = [f"{nodes}{row['gpu']}×{row['count']}",
              ",".join(f"{k}={v}" for k, v in sorted(row["env"].items())) or None]
    spread = ("-" if row["step_time_ms"] is None or row["step_time_p10_ms"] == row["step_time_p90_ms"]
              else f"{_num(row['step_time_p10_ms'], 1)}-{_num(row['step_time_p90_ms'], 1)}")
    both = ("-" if row["cost_spot_usd"] is None
            else f"{_num(row['cost_spot_usd'], 2)} / {_num(row['cost_on_demand_usd'], 2)}")
    model = row["model"] or "-"
    said = [f"{row['target_steps']:,} steps"] if with_steps and row["model"] and row["target_steps"] is not None else []
    if with_precision and row["model"]:
        said.append(row.get("precision") or "precision not recorded")
    if said:
        model += f" ({', '.join(said)})"
    return {"rank": row["rank"], "model": model, "campaign": row["campaign"], "provider": row["provider"],
            "cell": row["cell"], "configuration": ", ".join(c for c in config if c),
            "node": ", ".join(n for n in node if n) or "-", "precision": _how(row),
            "market": row["market"], "$/hr": _num(row["hourly_usd"], 2), "step ms": _num(row["step_time_ms"], 1),
            "p10-p90 ms": spread, "timed steps (drift)": _timed(row), "optimizer ms": _num(row["optimizer_ms"], 1),
            "comm": "-" if row["comm_share"] is None else f"{row['comm_share']:.0%}",
            "busbw GB/s @size": "-" if row["busbw_gbps"] is None else
            f"{_num(row['busbw_gbps'], 1)} @{format_bytes(row['busbw_bytes'] or 0)}",
            "target steps": _num(row["target_steps"]),
            "train h": _num(row["train_hours"], 2), "cost-to-train $": _num(row["cost_to_train_usd"], 2)
            if row["cost_to_train_usd"] is not None or row["step_time_ms"] is not None
            else row.get("no_result") or f"no result ({row['status']})",
            "spot / on-demand $": both, "flags": ", ".join(row["flags"]) or "-", "status": row["status"]}
