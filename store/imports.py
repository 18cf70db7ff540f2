"""Write what ``benchctl import`` read, all of it in one transaction (nothing is half-imported).

An imported campaign has kind ``imported``: its cells are ``done`` with a Result each (replaced
when the same cell is imported again; a new result without busbw keeps the one the cell had, e.g.
from an nccl-tests log). Collectives results (nccl-tests logs) become ``sample`` events of phase
``collectives`` under an attempt with outcome ``imported``, which bills nothing. One import may
fill several campaigns (``CellResult.campaign``); all of them commit together or not at all.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from benchctl.store.models import Attempt, Campaign, Cell, Event, Result

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
    config: dict[str, Any]
    result: dict[str, Any]
    campaign: str | None = None
    """The campaign it goes to; None: the import's default campaign."""


@dataclass(frozen=True)
class CellCollectives:
    key: str
    source: str
    rows: list[dict[str, Any]]
    busbw: tuple[float, int] | None
    """(GB/s, bytes) of all_reduce at the largest size, for the cell's Result; None: keep it."""


def save_import(engine: Engine, campaign: str, sources: Sequence[str], results: Sequence[CellResult],
                collectives: Sequence[CellCollectives]) -> None:
    """``results`` into their campaigns (``campaign`` for those that name none), ``collectives``
    into ``campaign``'s cells; one transaction."""
    now = time.time()
    groups: dict[str, list[CellResult]] = {campaign: []}
    for item in results:
        groups.setdefault(item.campaign or campaign, []).append(item)
    with Session(engine) as s:
        for name, items in groups.items():
            _save_campaign(s, name, sources, items, collectives if name == campaign else (), now)
        s.commit()


def _table(model: type) -> sa.Table:
    table = model.__table__  # type: ignore[attr-defined]
    assert isinstance(table, sa.Table)
    return table


CELL, RESULT, ATTEMPT, EVENT = (_table(m) for m in (Cell, Result, Attempt, Event))
RESULT_COLUMNS = tuple(c.name for c in RESULT.columns if c.name not in ("id", "cell_id", "computed_at"))


def _save_campaign(s: Session, campaign: str, sources: Sequence[str], results: Sequence[CellResult],
                   collectives: Sequence[CellCollectives], now: float) -> None:
    """Bulk statements (executemany), a fixed number however many records: no ORM object per record."""
    if not results and not collectives:
        return
    camp = s.exec(select(Campaign).where(Campaign.name == campaign)).first()
    if camp is None:
        camp = Campaign(name=campaign, uid=uuid.uuid4().hex[:12], kind=IMPORTED, budget_usd=0.0,
                        spec_json=json.dumps({"imported_from": list(sources)}), source_path=sources[0],
                        created_at=now, updated_at=now)
        s.add(camp)
        s.flush()
    elif camp.kind != IMPORTED:
        raise NotAnImportCampaign(campaign)
    camp.updated_at = now
    assert camp.id is not None
    ids = _cell_ids(s, camp.id)
    latest = {item.key: item for item in results}  # the same cell twice: the last record counts
    new = [item for key, item in latest.items() if key not in ids]
    if new:
        s.execute(sa.insert(CELL), [dict(campaign_id=camp.id, key=item.key, provider=item.provider, gpu=item.gpu,
                                         count=item.count, market=item.market, config_json=json.dumps(item.config),
                                         state="done", reason=None, created_at=now, updated_at=now)
                                    for item in new])
        ids = _cell_ids(s, camp.id)
    added = {item.key for item in new}
    known = [item for key, item in latest.items() if key not in added]
    if known:
        s.execute(sa.update(CELL).where(CELL.c.id == sa.bindparam("cell")).values(
            config_json=sa.bindparam("config"), updated_at=now),
            [{"cell": ids[item.key], "config": json.dumps(item.config)} for item in known])
    if latest:
        busbw = {cell_id: (gbps, size) for cell_id, gbps, size in s.execute(
            sa.select(RESULT.c.cell_id, RESULT.c.busbw_gbps, RESULT.c.busbw_bytes)
            .join(CELL, CELL.c.id == RESULT.c.cell_id).where(CELL.c.campaign_id == camp.id))}
        rows = []
        for key, item in latest.items():
            values = dict(item.result)
            if values.get("busbw_gbps") is None and ids[key] in busbw:  # keep what an earlier nccl-tests log gave
                values["busbw_gbps"], values["busbw_bytes"] = busbw[ids[key]]
            rows.append({name: values.get(name) for name in RESULT_COLUMNS} | {"cell_id": ids[key], "computed_at": now})
        replaced = [{"cell": ids[key]} for key in latest if ids[key] in busbw]
        if replaced:
            s.execute(sa.delete(RESULT).where(RESULT.c.cell_id == sa.bindparam("cell")), replaced)
        s.execute(sa.insert(RESULT), rows)
    for run in collectives:
        if run.key not in ids:
            raise UnknownCell(run.key)
        _save_collectives(s, ids[run.key], run, now)


def _cell_ids(s: Session, campaign_id: int) -> dict[str, int]:
    """Cell key → id of the campaign's cells (one statement)."""
    return {key: cell_id for key, cell_id in s.execute(sa.select(CELL.c.key, CELL.c.id)
                                                        .where(CELL.c.campaign_id == campaign_id))}


def _save_collectives(s: Session, cell_id: int, run: CellCollectives, now: float) -> None:
    """One nccl-tests log: an ``imported`` attempt (which bills nothing), its rows as events (one
    bulk insert), its largest all_reduce on the cell's result."""
    cell = s.execute(sa.select(CELL.c.provider, CELL.c.market).where(CELL.c.id == cell_id)).one()
    inserted = s.connection().execute(sa.insert(ATTEMPT).values(
        cell_id=cell_id, number=0, token=f"import-{uuid.uuid4().hex[:12]}", provider=cell.provider,
        market=cell.market, remote_dir="", open=False, outcome=IMPORTED, detail=run.source, cost_usd=0.0,
        events_offset=0, events_lines=0)).inserted_primary_key
    assert inserted is not None
    attempt_id = inserted[0]
    if run.rows:
        s.execute(sa.insert(EVENT), [dict(attempt_id=attempt_id, cell_id=cell_id, line=line, t=now, kind="sample",
                                          phase="collectives", data_json=json.dumps(row))
                                     for line, row in enumerate(run.rows, start=1)])
    if run.busbw is not None:
        s.execute(sa.update(RESULT).where(RESULT.c.cell_id == cell_id).values(
            busbw_gbps=run.busbw[0], busbw_bytes=run.busbw[1]))
