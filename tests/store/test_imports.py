"""``save_import`` on SQLite and PostgreSQL (``store/imports.py``): what it writes reads back as given,
whichever parameter style the driver takes (SQLite's positional ``?``, psycopg's named ``%(x)s``):
new cells and results, a second import replacing results (and keeping the busbw an nccl-tests log
gave), an nccl-tests log's attempt and events, and the refusals, all in one transaction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from benchctl.store.database import open_store
from benchctl.store.imports import CellCollectives, CellResult, NotAnImportCampaign, UnknownCell, save_import

RESULT = {"step_time_ms": 702.5, "step_time_p10_ms": 700.0, "step_time_p90_ms": 710.0, "timed_steps": 8,
          "hourly_usd": 23.92, "market": "on-demand", "target_steps": 14_889, "train_hours": 2.9,
          "cost_to_train_usd": 69.4, "model": "nanochat-d26", "interconnect": "NVSwitch", "vcpus": 208,
          "numa": "2 nodes", "optimizer_ms": 120.0, "optimizer_share": 0.17, "comm_share": 0.05, "busbw_gbps": None,
          "busbw_bytes": None, "flags_json": "[]", "precision": "bf16", "compiled": True, "attention": "sdpa",
          "host_data": "synthetic", "drift": -0.01, "settle_steps": 0, "settle_s": 0.0}


def _record(i: int, **result: Any) -> CellResult:
    return CellResult(key=f"lambda:H100_SXMx8:on-demand:env=RUN={i}", provider="lambda", gpu="H100_SXM", count=8,
                      market="on-demand", config_json=json.dumps({"env": {"RUN": str(i)}, "note": "café"}),
                      result={**RESULT, "cost_to_train_usd": 60.0 + i, **result})


def _results(engine: sa.Engine, campaign: str) -> dict[str, dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text(
            "select cell.key, cell.state, cell.config_json, result.* from cell join campaign on campaign.id = "
            "cell.campaign_id join result on result.cell_id = cell.id where campaign.name = :name"),
            {"name": campaign}).mappings().all()
    return {row["key"]: dict(row) for row in rows}


def test_records_read_back_as_given_and_a_second_import_replaces_them(db_url: str) -> None:
    engine = open_store(db_url)
    try:
        save_import(engine, "imp", ["a.json"], [_record(i) for i in range(3)], [])
        stored = _results(engine, "imp")
        assert sorted(stored) == sorted(_record(i).key for i in range(3))
        for i in range(3):
            row = stored[_record(i).key]
            assert row["state"] == "done" and row["config_json"] == _record(i).config_json
            assert {name: row[name] for name in RESULT} == _record(i).result
            assert isinstance(row["timed_steps"], int) and bool(row["compiled"]) is True

        log = CellCollectives(key=_record(0).key, source="nccl.log", busbw=(481.25, 8 << 30),
                              rows=[{"op": "all_reduce", "bytes": 8 << 30, "busbw_gbps": 481.25}])
        save_import(engine, "imp", ["nccl.log"], [], [log])
        save_import(engine, "imp", ["b.json"], [_record(0, step_time_ms=650.0), _record(1, busbw_gbps=300.0,
                                                                                        busbw_bytes=1 << 20)], [])
        stored = _results(engine, "imp")
        assert len(stored) == 3
        first, second = stored[_record(0).key], stored[_record(1).key]
        assert first["step_time_ms"] == 650.0, "replaced"
        assert (first["busbw_gbps"], first["busbw_bytes"]) == (481.25, 8 << 30), "the log's busbw is kept"
        assert (second["busbw_gbps"], second["busbw_bytes"]) == (300.0, 1 << 20), "the record's own busbw wins"
        with engine.connect() as conn:
            attempt = conn.execute(sa.text("select id, outcome, detail, open from attempt")).one()
            events = conn.execute(sa.text("select line, phase, data_json from event where attempt_id = :a"),
                                  {"a": attempt.id}).all()
        assert (attempt.outcome, attempt.detail, bool(attempt.open)) == ("imported", "nccl.log", False)
        assert [(e.line, e.phase, json.loads(e.data_json)) for e in events] == [(1, "collectives", log.rows[0])]
    finally:
        engine.dispose()


def test_refusals_write_nothing(db_url: str) -> None:
    engine = open_store(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("insert into campaign (name, uid, kind, spec_json, source_path, budget_usd, "
                                 "created_at, updated_at) values ('ran', 'u', 'run', '{}', 'c.yaml', 1, 0, 0)"))
        with pytest.raises(NotAnImportCampaign):
            save_import(engine, "ran", ["a.json"], [_record(0)], [])
        unknown = CellCollectives(key="nope", source="nccl.log", busbw=None, rows=[])
        with pytest.raises(UnknownCell):
            save_import(engine, "imp", ["a.json", "nccl.log"], [_record(0)], [unknown])
        with engine.connect() as conn:
            assert conn.execute(sa.text("select count(*) from cell")).scalar_one() == 0
            assert conn.execute(sa.text("select name from campaign")).scalars().all() == ["ran"]
    finally:
        engine.dispose()


def test_on_postgresql_the_rows_go_in_by_copy(pg_url: str) -> None:
    """psycopg's executemany spends ~20 µs of Python on each row; the cells and results go in by one
    COPY each instead (no INSERT of them reaches SQLAlchemy), and read back as given."""
    engine = open_store(pg_url)
    sent: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *_: sent.append(statement))
    try:
        save_import(engine, "imp", ["a.json"], [_record(i) for i in range(50)], [])
        assert not [s for s in sent if s.lstrip().upper().startswith(("INSERT INTO CELL", "INSERT INTO RESULT"))]
        stored = _results(engine, "imp")
        assert len(stored) == 50 and stored[_record(7).key]["config_json"] == _record(7).config_json
        assert {name: stored[_record(7).key][name] for name in RESULT} == _record(7).result
    finally:
        engine.dispose()


def test_a_records_only_import_reads_no_gpu_counts(tmp_path: Path) -> None:
    """The stored cells' GPU counts are read only to match an nccl-tests log to its cell: an import of
    records alone sends its transaction's statements and no others."""
    from benchctl.results.importer import import_files

    engine = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    records = tmp_path / "rows.json"
    records.write_text(json.dumps([{"provider": "runpod", "gpu": "H100", "count": 8, "market": "spot",
                                    "hourly_usd": 2.0, "step_time_ms": 300.0, "target_steps": 1000}]))
    sent: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda _c, _cur, statement, *_: sent.append(statement))
    try:
        assert import_files(engine, [records], "imp", None).results == 1
        assert not [s for s in sent if "cell.count" in s], sent
    finally:
        engine.dispose()
