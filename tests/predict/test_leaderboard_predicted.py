"""``leaderboard --predicted`` (issue 30 item 4): predicted vs measured step time per cell, each cell
predicted from a calibration that holds out its own measurement, and the geomean error."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from benchctl.predict.service import predict_for
from benchctl.store.database import open_store
from tests.conftest import cli_here

TARGET = {"target_param_data_ratio": 8.5, "total_batch_size": 524_288}


def _record(model: str, step_ms: float, campaign: str, cell: str, busbw: float | None = None) -> dict[str, object]:
    record: dict[str, object] = {
        "provider": "runpod", "gpu": "H100_SXM", "count": 8, "market": "on-demand", "hourly_usd": 24.0,
        "step_time_ms": step_ms, "precision": "bf16", "interconnect": "nvswitch_mesh NV18", "cell": cell,
        "campaign": campaign, "target": {"model": model, **TARGET}}
    if busbw is not None:
        record |= {"busbw_gbps": busbw, "busbw_bytes": 256 * 2**20}
    return record


def _home(tmp_path: Path, records: list[dict[str, object]]) -> Path:
    tmp_path.mkdir(exist_ok=True)
    home, path = tmp_path / "home", tmp_path / "records.json"
    path.write_text(json.dumps([*records, {"provider": "vastai", "gpu": "RTX_4090", "count": 1, "market": "spot",
                                           "hourly_usd": 0.4, "step_time_ms": 300.0, "model": "my-own",
                                           "target_steps": 100}]))
    assert cli_here("import", str(path), home=home).returncode == 0
    return home


def _rows(home: Path) -> dict[str, dict[str, object]]:
    shown = cli_here("leaderboard", "--predicted", "--format", "json", home=home)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return {str(row["cell"]): row for row in json.loads(shown.stdout)}


def test_a_lone_cell_is_predicted_from_the_published_defaults_only(tmp_path: Path) -> None:
    """Held out: the store's only H100 measurement never calibrates its own prediction, although
    ``predict`` (which reads the whole store) is moved by it."""
    home = _home(tmp_path, [_record("nanochat-d26", 800.0, "pub", "runpod:h100_sxmx8:on-demand", busbw=150.0)])
    row = _rows(home)["runpod:h100_sxmx8:on-demand"]
    published = predict_for(None, "H100_SXM", 8, 1, "bf16", model="nanochat-d26", interconnect="nvswitch_mesh")
    with_itself = predict_for(open_store(f"sqlite:///{home / 'benchctl.db'}"), "H100_SXM", 8, 1, "bf16",
                              model="nanochat-d26", interconnect="nvswitch_mesh")
    assert row["predicted_step_ms"] == pytest.approx(published.mid.step_ms, abs=0.05)
    assert with_itself.mid.step_ms != pytest.approx(published.mid.step_ms, abs=0.05)
    assert row["prediction_error"] == pytest.approx(published.mid.step_ms / 800.0 - 1, abs=1e-3)


def test_each_cell_is_calibrated_on_the_others(tmp_path: Path) -> None:
    home = _home(tmp_path, [_record("nanochat-d26", 800.0, "pub", "runpod:h100_sxmx8:on-demand"),
                            _record("nanochat-d20", 300.0, "pub2", "runpod:h100_sxmx8:on-demand:d20")])
    rows = _rows(home)
    alone = _rows(_home(tmp_path / "alone", [_record("nanochat-d26", 800.0, "pub", "runpod:h100_sxmx8:on-demand")]))
    d26 = rows["runpod:h100_sxmx8:on-demand"]
    # the d20 measurement calibrates d26's prediction (and moves it), d26's own never does
    assert d26["predicted_step_ms"] != alone["runpod:h100_sxmx8:on-demand"]["predicted_step_ms"]
    other = rows["vastai:RTX_4090x1:spot"]
    assert other["predicted_step_ms"] is None and other["prediction_error"] is None  # no nanochat model


def test_table_and_csv_say_held_out_and_the_geomean(tmp_path: Path) -> None:
    home = _home(tmp_path, [_record("nanochat-d26", 800.0, "pub", "runpod:h100_sxmx8:on-demand"),
                            _record("nanochat-d20", 300.0, "pub2", "runpod:h100_sxmx8:on-demand:d20")])
    rows = _rows(home)
    errors = [float(r["prediction_error"]) for r in rows.values() if r["prediction_error"] is not None]  # type: ignore[arg-type]
    geomean = math.exp(sum(abs(math.log1p(e)) for e in errors) / len(errors)) - 1
    table = cli_here("leaderboard", "--predicted", home=home)
    assert table.returncode == 0
    assert "predicted ms (held out)" in table.stdout and f"geomean error {geomean:.1%} over 2 cell(s)" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80, table.stdout
    plain = cli_here("leaderboard", "--format", "csv", home=home)
    assert "predicted_step_ms" not in plain.stdout  # only when asked
    asked = cli_here("leaderboard", "--predicted", "--format", "csv", home=home)
    header = next(csv.reader(io.StringIO(asked.stdout)))
    assert header[-2:] == ["predicted_step_ms", "prediction_error"]


def test_predicted_refuses_wide_and_columns(tmp_path: Path) -> None:
    home = _home(tmp_path, [])
    refused = cli_here("leaderboard", "--predicted", "--wide", home=home)
    assert refused.returncode == 2 and "--predicted shows its own columns" in refused.stderr
