"""Write what ``benchctl import`` read, all of it in one transaction (nothing is half-imported).

An imported campaign has kind ``imported``: its cells are ``done`` with a Result each (replaced
when the same cell is imported again; a new result without busbw keeps the one the cell had, e.g.
from an nccl-tests log). Collectives results (nccl-tests logs) become ``sample`` events of phase
``collectives`` under an attempt with outcome ``imported``, which bills nothing. One import may
fill several campaigns (``CellResult.campaign``); all of them commit together or not at all.

The statements are SQLAlchemy Core on the tables' names and the columns they write (the tables are
``benchctl.store.models``'s; the ORM and its models are not loaded: ``import`` pays for what it uses),
a fixed number of them however many records: cells and results go in by one executemany each (one
COPY each on PostgreSQL with psycopg).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from benchctl.store.connections import reader

IMPORTED = "imported"


class NotAnImportCampaign(Exception):
    """The named campaign was run by benchctl: imports go to campaigns of their own."""


class UnknownCell(Exception):
    """Collectives were given for a cell the campaign does not have."""


@dataclass(frozen=True)
class CellResult:
    key: str
    provider: str
    gpu: str
    count: int
    market: str
    config_json: str
    """The cell's configuration (what the record states but its result), JSON text."""
    result: dict[str, Any]
    """Result columns (``models.Result``'s but ``id``, ``cell_id``, ``computed_at``); one left out is NULL."""
    campaign: str | None = None
    """The campaign it goes to; None: the import's default campaign."""


@dataclass(frozen=True)
class CellCollectives:
    key: str
    source: str
    rows: list[dict[str, Any]]
    busbw: tuple[float, int] | None
    """(GB/s, bytes) of all_reduce at the largest size, for the cell's Result; None: keep it."""


def _table(name: str, *columns: str) -> sa.TableClause:
    return sa.table(name, *(sa.column(c) for c in columns))


CAMPAIGN = _table("campaign", "id", "name", "uid", "kind", "budget_usd", "spec_json", "source_path", "created_at",
                  "updated_at")
CELL = _table("cell", "id", "campaign_id", "key", "provider", "gpu", "count", "market", "config_json", "state",
              "reason", "created_at", "updated_at")
ATTEMPT = _table("attempt", "id", "cell_id", "number", "token", "provider", "market", "remote_dir", "open",
                 "outcome", "detail", "cost_usd", "events_offset", "events_lines")
EVENT = _table("event", "attempt_id", "cell_id", "line", "t", "kind", "phase", "data_json")


def cell_counts(engine: Engine, campaign: str) -> dict[str, int]:
    """Cell key → GPU count of the cells ``campaign`` already has in the store (one statement)."""
    with reader(engine).connect() as conn:
        return {key: count for key, count in conn.execute(
            sa.select(CELL.c.key, CELL.c.count).join(CAMPAIGN, CAMPAIGN.c.id == CELL.c.campaign_id)
            .where(CAMPAIGN.c.name == campaign))}


def save_import(engine: Engine, campaign: str, sources: Sequence[str], results: Sequence[CellResult],
                collectives: Sequence[CellCollectives]) -> None:
    """``results`` into their campaigns (``campaign`` for those that name none), ``collectives``
    into ``campaign``'s cells; one transaction."""
    now = time.time()
    groups: dict[str, list[CellResult]] = {campaign: []}
    for item in results:
        groups.setdefault(item.campaign or campaign, []).append(item)
    with engine.begin() as conn:
        for name, items in groups.items():
            _save_campaign(conn, name, sources, items, collectives if name == campaign else (), now)


def _save_campaign(conn: Connection, campaign: str, sources: Sequence[str], results: Sequence[CellResult],
                   collectives: Sequence[CellCollectives], now: float) -> None:
    """Bulk statements (executemany), a fixed number however many records: no object per record."""
    if not results and not collectives:
        return
    camp_id = _campaign_id(conn, campaign, sources, now)
    ids = _cell_ids(conn, camp_id)
    latest = {item.key: item for item in results}  # the same cell twice: the last record counts
    new = [item for key, item in latest.items() if key not in ids]
    if new:
        _insert_many(conn, "cell", ("campaign_id", "key", "provider", "gpu", "count", "market", "config_json", "state",
                                    "created_at", "updated_at"),
                     [(camp_id, item.key, item.provider, item.gpu, item.count, item.market, item.config_json,
                       "done", now, now) for item in new])
        ids = _cell_ids(conn, camp_id)
    added = {item.key for item in new}
    known = [item for key, item in latest.items() if key not in added]
    if known:
        conn.execute(sa.update(CELL).where(CELL.c.id == sa.bindparam("cell")).values(
            config_json=sa.bindparam("config"), updated_at=now),
            [{"cell": ids[item.key], "config": item.config_json} for item in known])
    if latest:
        _save_results(conn, camp_id, ids, latest, now)
    for run in collectives:
        if run.key not in ids:
            raise UnknownCell(run.key)
        _save_collectives(conn, ids[run.key], run, now)


def _campaign_id(conn: Connection, campaign: str, sources: Sequence[str], now: float) -> int:
    """The id of the import campaign ``campaign``, made when missing; NotAnImportCampaign when benchctl ran it."""
    found = conn.execute(sa.select(CAMPAIGN.c.id, CAMPAIGN.c.kind).where(CAMPAIGN.c.name == campaign)).first()
    if found is None:
        conn.execute(sa.insert(CAMPAIGN).values(name=campaign, uid=uuid.uuid4().hex[:12], kind=IMPORTED,
                                                 budget_usd=0.0, spec_json=json.dumps({"imported_from": list(sources)}),
                                                 source_path=sources[0], created_at=now, updated_at=now))
        return int(conn.execute(sa.select(CAMPAIGN.c.id).where(CAMPAIGN.c.name == campaign)).scalar_one())
    if found.kind != IMPORTED:
        raise NotAnImportCampaign(campaign)
    conn.execute(sa.update(CAMPAIGN).where(CAMPAIGN.c.id == found.id).values(updated_at=now))
    return int(found.id)


def _save_results(conn: Connection, camp_id: int, ids: dict[str, int], latest: dict[str, CellResult],
                  now: float) -> None:
    """Each cell's Result, replacing the one it had (whose busbw a result without one keeps)."""
    names = sorted({name for item in latest.values() for name in item.result} | {"busbw_gbps", "busbw_bytes"})
    result = _table("result", "cell_id", *names)
    busbw = {cell_id: (gbps, size) for cell_id, gbps, size in conn.execute(
        sa.select(result.c.cell_id, result.c.busbw_gbps, result.c.busbw_bytes)
        .join(CELL, CELL.c.id == result.c.cell_id).where(CELL.c.campaign_id == camp_id))}
    rows = []
    for key, item in latest.items():
        values = item.result
        cell_id = ids[key]
        if values.get("busbw_gbps") is None and cell_id in busbw:  # keep what an earlier nccl-tests log gave
            values = {**values, "busbw_gbps": busbw[cell_id][0], "busbw_bytes": busbw[cell_id][1]}
        rows.append((cell_id, now, *map(values.get, names)))
    replaced = [{"cell": ids[key]} for key in latest if ids[key] in busbw]
    if replaced:
        conn.execute(sa.delete(result).where(result.c.cell_id == sa.bindparam("cell")), replaced)
    _insert_many(conn, "result", ("cell_id", "computed_at", *names), rows)


def _insert_many(conn: Connection, table: str, names: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> None:
    """``rows`` (values in the order of ``names``) inserted in bulk: on psycopg (PostgreSQL) by one
    COPY, elsewhere by one executemany of the driver, the statement compiled once and the rows passed
    as they are. (SQLAlchemy's executemany builds every row's parameters anew, for the bind
    processing of typed columns: a third of the write; psycopg's executemany spends about 20 µs of
    Python on a row, its COPY about 5.)"""
    if conn.dialect.driver == "psycopg":
        driver = conn.connection.driver_connection  # in the transaction of ``conn``
        assert driver is not None
        columns = ", ".join(conn.dialect.identifier_preparer.quote(name) for name in names)
        with driver.cursor() as cursor, cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    statement = sa.insert(_table(table, *names)).values({name: sa.bindparam(name) for name in names})
    compiled = statement.compile(dialect=conn.dialect)
    if not compiled.positional:
        conn.exec_driver_sql(compiled.string, [dict(zip(names, row, strict=True)) for row in rows])
        return
    order = [names.index(name) for name in compiled.positiontup or ()]
    conn.exec_driver_sql(compiled.string, list(rows) if order == list(range(len(names))) else
                         [tuple(row[i] for i in order) for row in rows])


def _cell_ids(conn: Connection, campaign_id: int) -> dict[str, int]:
    """Cell key → id of the campaign's cells (one statement)."""
    return {key: cell_id for key, cell_id in conn.execute(sa.select(CELL.c.key, CELL.c.id)
                                                           .where(CELL.c.campaign_id == campaign_id))}


def _save_collectives(conn: Connection, cell_id: int, run: CellCollectives, now: float) -> None:
    """One nccl-tests log: an ``imported`` attempt (which bills nothing), its rows as events (one
    bulk insert), its largest all_reduce on the cell's result."""
    cell = conn.execute(sa.select(CELL.c.provider, CELL.c.market).where(CELL.c.id == cell_id)).one()
    token = f"import-{uuid.uuid4().hex[:12]}"
    conn.execute(sa.insert(ATTEMPT).values(
        cell_id=cell_id, number=0, token=token, provider=cell.provider, market=cell.market, remote_dir="",
        open=False, outcome=IMPORTED, detail=run.source, cost_usd=0.0, events_offset=0, events_lines=0))
    attempt_id = conn.execute(sa.select(ATTEMPT.c.id).where(ATTEMPT.c.token == token)).scalar_one()
    if run.rows:
        conn.execute(sa.insert(EVENT), [dict(attempt_id=attempt_id, cell_id=cell_id, line=line, t=now,
                                             kind="sample", phase="collectives", data_json=json.dumps(row))
                                        for line, row in enumerate(run.rows, start=1)])
    if run.busbw is not None:
        result = _table("result", "cell_id", "busbw_gbps", "busbw_bytes")
        conn.execute(sa.update(result).where(result.c.cell_id == cell_id).values(
            busbw_gbps=run.busbw[0], busbw_bytes=run.busbw[1]))
