"""How steady a result's timed steps were (issue 28 item 4): how many were timed, their drift (last
quarter's median ÷ first quarter's − 1) and the settle steps run before them, from the samples into
the result, through the v9 migration of an existing database, onto every leaderboard format (the
table only as a ``drift`` flag above 2 %), the report's all-columns table, and back through import."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from benchctl.campaign.spec import parse_campaign
from benchctl.report.html import leaderboard_tables
from benchctl.report.render import render
from benchctl.results.cell_result import compute_result
from benchctl.results.leaderboard import COLUMNS, NARROW_COLUMNS, TABLE_COLUMNS, display_row, leaderboard_rows
from benchctl.results.records import read_records
from benchctl.store import queries as q
from benchctl.store.database import create_db_engine, open_store
from benchctl.store.imports import save_import
from benchctl.store.migrations import upgrade
from benchctl.store.models import Result
from tests.store.profile_store import store_with_samples

CAMPAIGN = """\
name: steady
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
payload:
  phases: [profile]
  profile: {device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: 8}
matrix:
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}
"""
SETTLED = {"settle_steps": 40, "settle_s": 12.5}


def _rows(tmp_path: Path, times: list[float]) -> list[dict[str, Any]]:
    """The leaderboard of one cell whose 8 timed steps took ``times`` seconds (in index order)."""
    engine, cell_id = store_with_samples(f"sqlite:///{tmp_path / 's.db'}",
                                         [{"step_time_s": t, **SETTLED} for t in times], "steady")
    try:
        result = compute_result(engine, cell_id, parse_campaign(CAMPAIGN, "c.yaml").spec)
        assert isinstance(result, Result), result
        q.save_result(engine, result)
        return leaderboard_rows(engine)
    finally:
        engine.dispose()


def test_the_result_says_how_many_steps_were_timed_and_the_drift_seen(tmp_path: Path) -> None:
    (row,) = _rows(tmp_path, [0.30, 0.30, 0.31, 0.31, 0.32, 0.32, 0.33, 0.33])  # the last quarter 10 % slower
    assert (row["timed_steps"], row["settle_steps"], row["settle_s"]) == (8, 40, 12.5)
    assert row["drift"] == pytest.approx(0.10)
    assert "drift +10.0%" in row["flags"]
    shown = display_row(row)
    assert shown["timed steps (drift)"] == "8 (+10.0%)" and "drift +10.0%" in shown["flags"]
    assert "timed steps (drift)" in TABLE_COLUMNS and "timed steps (drift)" not in NARROW_COLUMNS
    page = leaderboard_tables([row], "lb")
    assert "8 (+10.0%)" in page.split('id="lb-all"')[1]  # the all-columns table, not the first one

    (exported,) = json.loads(render([row], COLUMNS, "json"))
    assert (exported["timed_steps"], exported["settle_steps"], exported["settle_s"]) == (8, 40, 12.5)
    (read,) = csv.DictReader(io.StringIO(render([row], COLUMNS, "csv")))
    assert (read["timed_steps"], float(read["drift"])) == ("8", pytest.approx(0.10))

    # export → import keeps them, and the re-imported row's flag is not doubled
    exported_file = tmp_path / "rows.json"
    exported_file.write_text(json.dumps([exported]))
    (imported,), _ = read_records(exported_file)
    assert (imported.result["timed_steps"], imported.result["settle_steps"], imported.result["settle_s"]) == (
        8, 40, 12.5)
    engine = open_store(f"sqlite:///{tmp_path / 'imported.db'}")
    try:
        save_import(engine, "imported", [str(exported_file)], [imported], [])
        (again,) = leaderboard_rows(engine)
    finally:
        engine.dispose()
    assert again["drift"] == pytest.approx(0.10) and again["timed_steps"] == 8
    assert [f for f in again["flags"] if f.startswith("drift")] == ["drift +10.0%"]


def test_a_steady_run_carries_its_drift_without_a_flag(tmp_path: Path) -> None:
    (row,) = _rows(tmp_path, [0.300, 0.301, 0.302, 0.300, 0.301, 0.303, 0.304, 0.305])  # +1.3 %
    assert row["drift"] == pytest.approx(0.3045 / 0.3005 - 1)
    assert not [f for f in row["flags"] if f.startswith("drift")]
    assert display_row(row)["timed steps (drift)"] == "8 (+1.3%)"


def test_a_v8_database_upgrades_and_its_results_show_no_drift(db_url: str) -> None:
    old = create_db_engine(db_url)
    try:
        assert upgrade(old, target=8) == [1, 2, 3, 4, 5, 6, 7, 8]
        meta = sa.MetaData()
        meta.reflect(old, only=["campaign", "cell", "result"])
        assert "drift" not in meta.tables["result"].c
        with old.begin() as conn:
            conn.execute(meta.tables["campaign"].insert().values(
                id=1, name="old", spec_json="{}", source_path="/x.yaml", budget_usd=5.0, created_at=1.0,
                updated_at=1.0, uid="u", kind="run"))
            conn.execute(meta.tables["cell"].insert().values(
                id=1, campaign_id=1, key="local:cpux1:on-demand", provider="local", gpu="cpu", count=1,
                market="on-demand", config_json="{}", state="done", created_at=1.0, updated_at=1.0))
            conn.execute(meta.tables["result"].insert().values(
                id=1, cell_id=1, step_time_ms=500.0, step_time_p10_ms=450.0, step_time_p90_ms=550.0, timed_steps=3,
                hourly_usd=2.0, market="on-demand", target_steps=7200, train_hours=1.0, cost_to_train_usd=2.0,
                computed_at=2.0, model="nanochat-d1", flags_json="[]", precision="bf16"))
    finally:
        old.dispose()
    engine = open_store(db_url)
    try:
        (row,) = leaderboard_rows(engine)
        columns = {c["name"] for c in sa.inspect(engine).get_columns("result")}
    finally:
        engine.dispose()
    assert {"drift", "settle_steps", "settle_s"} <= columns
    assert (row["timed_steps"], row["drift"], row["settle_steps"], row["settle_s"]) == (3, None, None, None)
    assert row["flags"] == [] and display_row(row)["timed steps (drift)"] == "3"


@pytest.mark.parametrize(("key", "bad"), [("drift", -1.0), ("drift", "fast"), ("settle_steps", -1),
                                          ("settle_s", -0.5)])
def test_imported_steadiness_must_be_a_plausible_number(tmp_path: Path, key: str, bad: object) -> None:
    record = {"provider": "lambda", "gpu": "H100_SXM", "count": 8, "market": "on-demand", "hourly_usd": 23.92,
              "step_time_ms": 702, "target_steps": 14889, key: bad}
    path = tmp_path / "r.json"
    path.write_text(json.dumps([record]))
    with pytest.raises(Exception, match=key):
        read_records(path)
