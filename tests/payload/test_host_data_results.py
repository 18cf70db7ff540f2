"""``host_data`` from the profile's samples into the result, through the v8 migration, onto the
leaderboard (beside precision in ``table``/``md``, its own key in JSON/CSV) and back through import."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

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
name: hostload
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
payload:
  phases: [profile]
  profile: {device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: 2, host_data: tokenize}
matrix:
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}
"""


def _leaderboard_row(url: str, samples: list[dict[str, object]]) -> dict[str, object]:
    """The leaderboard row of a profile of ``len(samples)`` timed steps, one sample each (a profile
    with fewer or more samples than steps gets no result)."""
    engine, cell_id = store_with_samples(url, samples, "hostload")
    try:
        spec = parse_campaign(CAMPAIGN.replace("steps: 2", f"steps: {len(samples)}"), "c.yaml").spec
        result = compute_result(engine, cell_id, spec)
        assert result is not None
        q.save_result(engine, result)
        (row,) = leaderboard_rows(engine)
        return row
    finally:
        engine.dispose()


def test_a_tokenizing_result_says_so_beside_its_precision(tmp_path: Path) -> None:
    how = {"precision": "bf16", "compiled": True, "attention": "sdpa", "host_data": "tokenize"}
    row = _leaderboard_row(f"sqlite:///{tmp_path / 's.db'}", [how, how])
    assert row["host_data"] == "tokenize" and list(row) == list(COLUMNS)
    assert display_row(row)["precision"] == "bf16, tokenize"
    for fmt in ("table", "md"):
        assert "bf16, tokenize" in render([display_row(row)], TABLE_COLUMNS, fmt)
    (exported,) = json.loads(render([row], COLUMNS, "json"))
    assert exported["host_data"] == "tokenize"
    (read,) = csv.DictReader(io.StringIO(render([row], COLUMNS, "csv")))
    assert read["host_data"] == "tokenize"
    exported_file = tmp_path / "rows.json"
    exported_file.write_text(json.dumps([exported]))
    (imported,), _ = read_records(exported_file)
    assert imported.result["host_data"] == "tokenize"


def test_synthetic_batches_show_the_precision_alone(tmp_path: Path) -> None:
    how = {"precision": "bf16", "compiled": True, "attention": "sdpa", "host_data": "synthetic"}
    row = _leaderboard_row(f"sqlite:///{tmp_path / 's.db'}", [how])
    assert row["host_data"] == "synthetic" and display_row(row)["precision"] == "bf16"


def test_mixed_host_data_is_not_passed_off_as_one(tmp_path: Path) -> None:
    row = _leaderboard_row(f"sqlite:///{tmp_path / 's.db'}", [
        {"precision": "bf16", "host_data": "synthetic"}, {"precision": "bf16", "host_data": "tokenize"}, {}])
    assert row["host_data"] == "synthetic+tokenize"


def test_a_v7_database_upgrades_with_host_data_unknown(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    old = create_db_engine(url)
    try:
        assert upgrade(old, target=7) == [1, 2, 3, 4, 5, 6, 7]
        assert "host_data" not in {c["name"] for c in sa.inspect(old).get_columns("result")}
    finally:
        old.dispose()
    engine = open_store(url)
    try:
        assert "host_data" in {c["name"] for c in sa.inspect(engine).get_columns("result")}
    finally:
        engine.dispose()
