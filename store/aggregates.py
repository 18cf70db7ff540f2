"""Reads whose cost follows what a command shows, not what the store holds (``status``, ``report``).

Each function is a fixed number of statements however many cells a campaign has: counts and sums
are the database's, and a list is bounded by a ``limit`` or by the ids the caller shows. Rows come
back as plain tuples and small dataclasses, never as ORM objects per cell; an empty list of ids
is still one statement, so the count never depends on what a campaign happens to hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchctl.store.models import Attempt, Campaign, Cell, Event, Result


def _table(model: type) -> sa.Table:
    table = model.__table__  # type: ignore[attr-defined]
    assert isinstance(table, sa.Table)
    return table


CAMPAIGN, CELL, ATTEMPT, EVENT, RESULT = (_table(m) for m in (Campaign, Cell, Attempt, Event, Result))


def cell_state_counts(engine: Engine, campaign_id: int) -> dict[str, int]:
    """State → how many of the campaign's cells are in it (one GROUP BY)."""
    query = (sa.select(CELL.c.state, sa.func.count()).where(CELL.c.campaign_id == campaign_id)
             .group_by(CELL.c.state))
    with engine.connect() as conn:
        return {state: int(n) for state, n in conn.execute(query)}


@dataclass(frozen=True)
class CellLine:
    """What ``status`` shows of one cell."""

    id: int
    key: str
    state: str
    reason: str | None
    lease_owner: str | None
    lease_expires_at: float | None


def listed_cells(engine: Engine, campaign_id: int, states: Sequence[str] | None = None,
                 limit: int | None = None) -> list[CellLine]:
    """The campaign's cells (only those in ``states`` when given), the states' order first, then
    cell order; the first ``limit``."""
    query = sa.select(CELL.c.id, CELL.c.key, CELL.c.state, CELL.c.reason, CELL.c.lease_owner,
                      CELL.c.lease_expires_at).where(CELL.c.campaign_id == campaign_id)
    if states is not None:
        query = query.where(CELL.c.state.in_(list(states)))
        query = query.order_by(sa.case({s: i for i, s in enumerate(states)}, value=CELL.c.state))
    query = query.order_by(CELL.c.id).limit(limit)
    with engine.connect() as conn:
        return [CellLine(*row) for row in conn.execute(query)]


@dataclass(frozen=True)
class AttemptsOfCell:
    """How many attempts a cell had, and how its newest closed one ended."""

    count: int
    last_closed: tuple[int, str | None, str | None] | None
    """(number, outcome, detail) of the newest closed attempt; None when none closed."""


def attempts_by_cell(engine: Engine, campaign_id: int, cell_ids: Sequence[int] | None = None,
                     ) -> dict[int, AttemptsOfCell]:
    """Cell id → its attempts' count and newest closed attempt, for ``cell_ids`` (the caller shows
    them: a bounded list) or, None, every cell of the campaign; one statement, columns only."""
    query = (sa.select(ATTEMPT.c.cell_id, ATTEMPT.c.number, ATTEMPT.c.open, ATTEMPT.c.outcome, ATTEMPT.c.detail)
             .order_by(ATTEMPT.c.cell_id, ATTEMPT.c.number))
    if cell_ids is None:
        query = query.join(CELL, CELL.c.id == ATTEMPT.c.cell_id).where(CELL.c.campaign_id == campaign_id)
    else:
        query = query.where(ATTEMPT.c.cell_id.in_(list(cell_ids)))
    counts: dict[int, int] = {}
    closed: dict[int, tuple[int, str | None, str | None]] = {}
    with engine.connect() as conn:
        for cell_id, number, is_open, outcome, detail in conn.execute(query):
            counts[cell_id] = counts.get(cell_id, 0) + 1
            if not is_open:
                closed[cell_id] = (number, outcome, detail)
    return {cell_id: AttemptsOfCell(n, closed.get(cell_id)) for cell_id, n in counts.items()}


@dataclass(frozen=True)
class AttemptSpend:
    """An attempt's columns that spend figures need."""

    provider: str
    open: bool
    outcome: str | None
    launched_at: float | None
    terminated_at: float | None
    hourly_usd: float | None
    cost_usd: float | None


def attempt_spends(engine: Engine, campaign_id: int) -> list[AttemptSpend]:
    """Every attempt of the campaign as its spend columns, in id order (one statement, no ORM objects)."""
    query = (sa.select(ATTEMPT.c.provider, ATTEMPT.c.open, ATTEMPT.c.outcome, ATTEMPT.c.launched_at,
                       ATTEMPT.c.terminated_at, ATTEMPT.c.hourly_usd, ATTEMPT.c.cost_usd)
             .join(CELL, CELL.c.id == ATTEMPT.c.cell_id).where(CELL.c.campaign_id == campaign_id)
             .order_by(ATTEMPT.c.id))
    with engine.connect() as conn:
        return [AttemptSpend(*row) for row in conn.execute(query)]


@dataclass(frozen=True)
class CellRow:
    """A cell and its result's numbers, as the report reads them."""

    id: int
    key: str
    provider: str
    state: str
    count: int
    config_json: str
    step_time_ms: float | None
    step_time_p10_ms: float | None
    step_time_p90_ms: float | None
    cost_to_train_usd: float | None
    hourly_usd: float | None
    model: str | None
    optimizer_ms: float | None
    optimizer_share: float | None
    comm_share: float | None


def best_cells(engine: Engine, campaign_id: int, limit: int) -> list[CellRow]:
    """The campaign's ``limit`` cells first in rank order as the database can sort it: those with a
    result, cheapest cost-to-train first (then key); then those without one, by key."""
    no_cost = sa.case((RESULT.c.cost_to_train_usd.is_(None), 1), else_=0)
    query = (sa.select(CELL.c.id, CELL.c.key, CELL.c.provider, CELL.c.state, CELL.c.count, CELL.c.config_json,
                       RESULT.c.step_time_ms, RESULT.c.step_time_p10_ms, RESULT.c.step_time_p90_ms,
                       RESULT.c.cost_to_train_usd, RESULT.c.hourly_usd, RESULT.c.model, RESULT.c.optimizer_ms,
                       RESULT.c.optimizer_share, RESULT.c.comm_share)
             .select_from(CELL).outerjoin(RESULT, RESULT.c.cell_id == CELL.c.id)
             .where(CELL.c.campaign_id == campaign_id)
             .order_by(no_cost, RESULT.c.cost_to_train_usd, CELL.c.key).limit(limit))
    with engine.connect() as conn:
        return [CellRow(**row._mapping) for row in conn.execute(query)]


def first_model(engine: Engine, campaign_id: int) -> str | None:
    """The target model of one of the campaign's results (an imported campaign's file names none)."""
    query = (sa.select(RESULT.c.model).join(CELL, CELL.c.id == RESULT.c.cell_id)
             .where(CELL.c.campaign_id == campaign_id).where(RESULT.c.model.is_not(None)).limit(1))
    with engine.connect() as conn:
        return conn.execute(query).scalar()


def cell_samples(engine: Engine, cell_ids: Sequence[int], phase: str,
                 ) -> dict[int, list[tuple[int, int, str]]]:
    """Cell id → its ``sample`` events of ``phase`` as (attempt id, line, data_json), in attempt and
    line order, for the cells the caller shows (one statement)."""
    found: dict[int, list[tuple[int, int, str]]] = {cell_id: [] for cell_id in cell_ids}
    query = (sa.select(EVENT.c.cell_id, EVENT.c.attempt_id, EVENT.c.line, EVENT.c.data_json)
             .where(EVENT.c.cell_id.in_(list(found))).where(EVENT.c.kind == "sample").where(EVENT.c.phase == phase)
             .order_by(EVENT.c.attempt_id, EVENT.c.line))
    with engine.connect() as conn:
        for cell_id, attempt_id, line, data in conn.execute(query):
            found[cell_id].append((attempt_id, line, data))
    return found


@dataclass(frozen=True)
class AttemptOfCell:
    id: int
    cell_id: int
    number: int
    host: str | None
    outcome: str | None


def attempts_of(engine: Engine, cell_ids: Sequence[int]) -> list[AttemptOfCell]:
    """The attempts of ``cell_ids`` (cell, then number order): one statement."""
    query = (sa.select(ATTEMPT.c.id, ATTEMPT.c.cell_id, ATTEMPT.c.number, ATTEMPT.c.host, ATTEMPT.c.outcome)
             .where(ATTEMPT.c.cell_id.in_(list(cell_ids))).order_by(ATTEMPT.c.cell_id, ATTEMPT.c.number))
    with engine.connect() as conn:
        return [AttemptOfCell(*row) for row in conn.execute(query)]


def cells_with_outcome(engine: Engine, campaign_id: int, outcome: str, limit: int) -> list[int]:
    """Ids of the campaign's cells with an attempt that ended ``outcome``, newest such attempt first;
    the first ``limit``."""
    newest = sa.func.max(ATTEMPT.c.id)
    query = (sa.select(ATTEMPT.c.cell_id).join(CELL, CELL.c.id == ATTEMPT.c.cell_id)
             .where(CELL.c.campaign_id == campaign_id).where(ATTEMPT.c.outcome == outcome)
             .group_by(ATTEMPT.c.cell_id).order_by(newest.desc()).limit(limit))
    with engine.connect() as conn:
        return [cell_id for (cell_id,) in conn.execute(query)]


@dataclass(frozen=True)
class FlagEvidence:
    """What a cell's flags are made of (``benchctl.results.cell_evidence.flags_from``)."""

    preflight: dict[int, list[str]]
    """Cell id → the ``data_json`` of the preflight samples of its last attempt that recorded any."""
    outcomes: dict[int, dict[str, int]]
    """Cell id → attempt outcome → how many of its attempts ended so."""


def flag_evidence(engine: Engine, cell_ids: sa.Select[tuple[int]]) -> FlagEvidence:
    """The flag evidence of the cells ``cell_ids`` selects (a subquery, not a list: two statements
    however many cells it selects)."""
    samples = (sa.select(EVENT.c.cell_id, EVENT.c.attempt_id, EVENT.c.data_json)
               .where(EVENT.c.cell_id.in_(cell_ids)).where(EVENT.c.kind == "sample")
               .where(EVENT.c.phase == "preflight").order_by(EVENT.c.attempt_id, EVENT.c.line))
    ended = (sa.select(ATTEMPT.c.cell_id, ATTEMPT.c.outcome, sa.func.count()).where(ATTEMPT.c.cell_id.in_(cell_ids))
             .where(ATTEMPT.c.outcome.is_not(None)).group_by(ATTEMPT.c.cell_id, ATTEMPT.c.outcome))
    preflight: dict[int, list[str]] = {}
    last: dict[int, int] = {}
    outcomes: dict[int, dict[str, int]] = {}
    with engine.connect() as conn:
        for cell_id, attempt_id, data in conn.execute(samples):
            if last.get(cell_id) != attempt_id:  # a later attempt's samples replace an earlier one's
                last[cell_id], preflight[cell_id] = attempt_id, []
            preflight[cell_id].append(data)
        for cell_id, outcome, n in conn.execute(ended):
            outcomes.setdefault(cell_id, {})[outcome] = int(n)
    return FlagEvidence(preflight, outcomes)


def cell_keys(engine: Engine, cell_ids: Sequence[int]) -> list[tuple[int, str]]:
    """(id, key) of ``cell_ids`` (one statement)."""
    with engine.connect() as conn:
        return [(i, k) for i, k in conn.execute(sa.select(CELL.c.id, CELL.c.key).where(CELL.c.id.in_(list(cell_ids))))]
