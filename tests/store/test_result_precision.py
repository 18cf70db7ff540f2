"""How a result's steps were computed (precision, compiled, attention): from the samples into the
result, through the v7 migration of an existing database, onto every leaderboard format and back
through import, so a bf16 step is never read as the fp8 record."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchctl.campaign.spec import parse_campaign
from benchctl.report.render import render
from benchctl.results.cell_result import compute_result
from benchctl.results.leaderboard import COLUMNS, TABLE_COLUMNS, display_row, leaderboard_rows
from benchctl.results.records import read_records
from benchctl.store import queries as q
from benchctl.store.database import create_db_engine, open_store
from benchctl.store.migrations import upgrade
from tests.store.profile_store import store_with_samples

CAMPAIGN = """\
name: prec
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
payload:
  phases: [profile]
  profile: {device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: 2}
matrix:
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}
"""


def test_the_result_says_how_its_steps_computed(tmp_path: Path) -> None:
    how = {"precision": "bf16", "compiled": True, "attention": "flash_attn3"}
    engine, cell_id = store_with_samples(f"sqlite:///{tmp_path / 's.db'}", [how, how], "prec")
    try:
        result = compute_result(engine, cell_id, parse_campaign(CAMPAIGN, "c.yaml").spec)
        assert result is not None
        assert (result.precision, result.compiled, result.attention) == ("bf16", True, "flash_attn3")
        q.save_result(engine, result)
        (row,) = leaderboard_rows(engine)
    finally:
        engine.dispose()
    assert (row["precision"], row["compiled"], row["attention"]) == ("bf16", True, "flash_attn3")
    assert "precision" in TABLE_COLUMNS and display_row(row)["precision"] == "bf16"
    for fmt in ("table", "md"):
        assert "bf16" in render([display_row(row)], TABLE_COLUMNS, fmt)
    (exported,) = json.loads(render([row], COLUMNS, "json"))
    assert exported["precision"] == "bf16" and exported["compiled"] is True
    (read,) = csv.DictReader(io.StringIO(render([row], COLUMNS, "csv")))
    assert (read["precision"], read["attention"]) == ("bf16", "flash_attn3")

    # export → import keeps it (the import schema accepts the new keys instead of refusing the row)
    exported_file = tmp_path / "rows.json"
    exported_file.write_text(json.dumps([exported]))
    (imported,), _ = read_records(exported_file)
    assert (imported.result["precision"], imported.result["compiled"], imported.result["attention"]) == (
        "bf16", True, "flash_attn3")


def test_mixed_or_missing_records_are_not_passed_off_as_one_precision(tmp_path: Path) -> None:
    engine, cell_id = store_with_samples(f"sqlite:///{tmp_path / 's.db'}", [
        {"precision": "bf16", "compiled": True, "attention": "sdpa"},
        {"precision": "fp8", "compiled": False, "attention": "sdpa"}, {}], "prec")
    try:  # three timed samples: a profile of three steps (more samples than steps is no result)
        result = compute_result(engine, cell_id, parse_campaign(CAMPAIGN.replace("steps: 2", "steps: 3"),
                                                                "c.yaml").spec)
    finally:
        engine.dispose()
    assert result is not None
    assert (result.precision, result.compiled, result.attention) == ("bf16+fp8", False, "sdpa")


def test_a_v6_database_upgrades_and_its_results_show_precision_unknown(db_url: str) -> None:
    old = create_db_engine(db_url)
    try:
        assert upgrade(old, target=6) == [1, 2, 3, 4, 5, 6]
        meta = sa.MetaData()
        meta.reflect(old, only=["campaign", "cell", "result"])
        assert "precision" not in meta.tables["result"].c
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
                computed_at=2.0, model="nanochat-d1", flags_json="[]"))
    finally:
        old.dispose()
    engine = open_store(db_url)
    try:
        (row,) = leaderboard_rows(engine)
        columns = {c["name"] for c in sa.inspect(engine).get_columns("result")}
    finally:
        engine.dispose()
    assert {"precision", "compiled", "attention"} <= columns
    assert (row["cost_to_train_usd"], row["precision"], row["compiled"], row["attention"]) == (2.0, None, None, None)
    assert display_row(row)["precision"] == "-"


@pytest.mark.parametrize("bad", ["fp8; rm -rf", "", "x" * 65])
def test_an_imported_precision_must_be_a_plain_name(tmp_path: Path, bad: str) -> None:
    record = {"provider": "lambda", "gpu": "H100_SXM", "count": 8, "market": "on-demand", "hourly_usd": 23.92,
              "step_time_ms": 702, "target_steps": 14889, "precision": bad}
    path = tmp_path / "r.json"
    path.write_text(json.dumps([record]))
    with pytest.raises(Exception, match="precision"):
        read_records(path)
