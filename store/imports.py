"""Write what ``benchctl import`` read, all of it in one transaction (nothing is half-imported).

An imported campaign has kind ``imported``: its cells are ``done`` with a Result each (replaced
when the same cell is imported again). Collectives results (nccl-tests logs) become ``sample``
events of phase ``collectives`` under an attempt with outcome ``imported``, which bills nothing.
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


@dataclass(frozen=True)
class CellCollectives:
    key: str
    source: str
    rows: list[dict[str, Any]]
    busbw: tuple[float, int] | None
    """(GB/s, bytes) of all_reduce at the largest size, for the cell's Result; None: keep it."""


def save_import(engine: Engine, campaign: str, sources: Sequence[str], results: Sequence[CellResult],
                collectives: Sequence[CellCollectives]) -> None:
    now = time.time()
    with Session(engine) as s:
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
            old = s.exec(select(Result).where(Result.cell_id == cell.id)).first()
            if old is not None:
                s.delete(old)
                s.flush()
            assert cell.id is not None
            s.add(Result(cell_id=cell.id, computed_at=now, **item.result))
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
        s.commit()
