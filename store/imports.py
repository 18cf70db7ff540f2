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

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from store.models import Attempt, Campaign, Cell, Event, Result

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


def _save_campaign(s: Session, campaign: str, sources: Sequence[str], results: Sequence[CellResult],
                   collectives: Sequence[CellCollectives], now: float) -> None:
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
    cells = {c.key: c for c in s.exec(select(Cell).where(Cell.campaign_id == camp.id))}
    for item in results:
        cell = cells.get(item.key)
        if cell is None:
            assert camp.id is not None
            cell = Cell(campaign_id=camp.id, key=item.key, provider=item.provider, gpu=item.gpu, count=item.count,
                        market=item.market, config_json="", state="done", created_at=now, updated_at=now)
            s.add(cell)
            s.flush()
            cells[item.key] = cell
        cell.config_json, cell.updated_at = json.dumps(item.config), now
        values = dict(item.result)
        old = s.exec(select(Result).where(Result.cell_id == cell.id)).first()
        if old is not None:
            if values.get("busbw_gbps") is None:  # keep what an earlier nccl-tests log gave the cell
                values["busbw_gbps"], values["busbw_bytes"] = old.busbw_gbps, old.busbw_bytes
            s.delete(old)
            s.flush()
        assert cell.id is not None
        s.add(Result(cell_id=cell.id, computed_at=now, **values))
    s.flush()
    for run in collectives:
        cell = cells.get(run.key)
        if cell is None:
            raise UnknownCell(run.key)
        assert cell.id is not None
        attempt = Attempt(cell_id=cell.id, number=0, token=f"import-{uuid.uuid4().hex[:12]}",
                          provider=cell.provider, market=cell.market, remote_dir="", open=False,
                          outcome=IMPORTED, detail=run.source, cost_usd=0.0)
        s.add(attempt)
        s.flush()
        assert attempt.id is not None
        for line, row in enumerate(run.rows, start=1):
            s.add(Event(attempt_id=attempt.id, cell_id=cell.id, line=line, t=now, kind="sample",
                        phase="collectives", data_json=json.dumps(row)))
        result = s.exec(select(Result).where(Result.cell_id == cell.id)).first()
        if result is not None and run.busbw is not None:
            result.busbw_gbps, result.busbw_bytes = run.busbw
