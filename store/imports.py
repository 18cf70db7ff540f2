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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

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


def _chunks(ids: list[int | None], size: int = 500) -> Iterator[list[int | None]]:
    """``ids`` in slices small enough for any database's limit on bound parameters."""
    for start in range(0, len(ids), size):
        yield ids[start:start + size]


def _busbw(before: Result | dict[str, Any]) -> tuple[Any, Any]:
    """The (busbw_gbps, busbw_bytes) an earlier result of the cell had (a stored row or one just read)."""
    if isinstance(before, dict):
        return before.get("busbw_gbps"), before.get("busbw_bytes")
    return before.busbw_gbps, before.busbw_bytes


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
    for item in results:  # new cells first, all in one flush (one round trip, not one per record)
        if item.key not in cells:
            assert camp.id is not None
            cells[item.key] = Cell(campaign_id=camp.id, key=item.key, provider=item.provider, gpu=item.gpu,
                                   count=item.count, market=item.market, config_json="", state="done", created_at=now,
                                   updated_at=now)
            s.add(cells[item.key])
    s.flush()
    ids = list({cells[item.key].id for item in results})
    old = {r.cell_id: r for chunk in _chunks(ids) for r in s.exec(select(Result).where(col(Result.cell_id).in_(chunk)))}
    latest: dict[int, dict[str, Any]] = {}
    for item in results:
        known = cells[item.key]
        assert known.id is not None
        known.config_json, known.updated_at = json.dumps(item.config), now
        values = dict(item.result)
        if values.get("busbw_gbps") is None:  # keep what an earlier nccl-tests log gave the cell
            before: Any = latest.get(known.id) or old.get(known.id)
            if before is not None:
                values["busbw_gbps"], values["busbw_bytes"] = _busbw(before)
        latest[known.id] = values
    for replaced in old.values():
        s.delete(replaced)
    s.flush()
    s.add_all(Result(cell_id=cell_id, computed_at=now, **values) for cell_id, values in latest.items())
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
