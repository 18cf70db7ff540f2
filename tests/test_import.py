"""`benchctl import`: result records and nccl-tests logs join the ranking; bad files change nothing.

The nccl-tests log in tests/fixtures is synthetic (made for this test in nccl-tests' output
format, 8 ranks): its busbw at the largest size is 481.25 GB/s out-of-place, 476.49 in-place.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

NCCL_LOG = REPO / "tests" / "fixtures" / "all_reduce_perf_8xh100.log"
D26 = "{model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}"
PUBLISHED = f"""\
# three 8×H100 configurations, nanochat-d26 to GPT-2 grade
- {{provider: lambda, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 23.92, step_time_ms: 702,
   target: {D26}}}
- {{provider: runpod, gpu: H100_SXM, count: 8, market: spot, hourly_usd: 14.0, step_time_ms: 1295,
   flags: [numa_split], target: {D26}}}
- {{provider: runpod, gpu: H100_NVL, count: 8, market: on-demand, hourly_usd: 19.12, step_time_ms: 980,
   target: {D26}}}
"""


def leaderboard(home: Path, *args: str) -> list[dict]:
    result = run_cli("leaderboard", "--format", "json", *args, home=home)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def imported(home: Path, tmp_path: Path, text: str, *args: str, name: str = "rows.yaml"):  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text(text)
    return run_cli("import", str(path), *args, home=home)


def test_published_measurements_rank_by_arithmetic_a_reader_can_redo(home: Path, tmp_path: Path) -> None:
    result = imported(home, tmp_path, PUBLISHED, "--campaign", "published")
    assert result.returncode == 0, result.stderr
    assert "imported 3 results" in result.stdout
    rows = leaderboard(home)
    by_hand = {}
    for step_ms, price, cell in ((702, 23.92, "lambda:H100_SXMx8:on-demand"), (1295, 14.0, "runpod:H100_SXMx8:spot"),
                                 (980, 19.12, "runpod:H100_NVLx8:on-demand")):
        hours = step_ms / 1000 * 14_889 / 3600
        by_hand[cell] = (hours, hours * price)
    assert [r["cell"] for r in rows] == sorted(by_hand, key=lambda c: by_hand[c][1]), "cheapest first"
    for rank, row in enumerate(rows, start=1):
        assert row["rank"] == rank and row["target_steps"] == 14_889 and row["model"] == "nanochat-d26"
        assert row["train_hours"] == pytest.approx(by_hand[row["cell"]][0])
        assert row["cost_to_train_usd"] == pytest.approx(by_hand[row["cell"]][1])
        assert row["campaign"] == "published" and row["status"] == "done"
    assert rows[1]["flags"] == ["numa_split"]
    table = run_cli("leaderboard", home=home).stdout
    assert "14,889" in table and "69.45" in table and "H100_NVL×8" in table


def test_export_then_import_round_trips(home: Path, tmp_path: Path, write_campaign) -> None:
    campaign = write_campaign(matrix="  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5}\n")
    text = campaign.read_text().replace("phases: [preflight, profile]", "phases: [preflight, collectives, profile]")
    campaign.write_text(text.replace("  profile:", "  collectives: {ops: [all_reduce], min_bytes: 1024, "
                                                   "max_bytes: 65536, iters: 2, warmup_iters: 1}\n  profile:"))
    ran = run_cli("run", str(campaign), home=home)
    assert ran.returncode == 0, ran.stderr
    (measured,) = leaderboard(home)
    assert measured["busbw_bytes"] == 65536 and measured["busbw_gbps"] > 0, "collectives reach the leaderboard"
    export = tmp_path / "export.json"
    export.write_text(run_cli("leaderboard", "--format", "json", home=home).stdout)
    result = run_cli("import", str(export), "--campaign", "copy", home=home)
    assert result.returncode == 0, result.stderr
    (copy,) = leaderboard(home, "--campaign", "copy")
    assert copy["campaign"] == "copy" and set(copy) == set(measured)
    for key, value in measured.items():
        if key != "campaign":
            assert copy[key] == (pytest.approx(value) if isinstance(value, float) else value), key

    clash = run_cli("import", str(export), "--campaign", "tiny", home=home)
    assert clash.returncode == 2 and "was run by benchctl" in clash.stderr
    rerun = run_cli("run", str(campaign), home=home)
    assert rerun.returncode == 0 and "campaign tiny is complete" in rerun.stdout, "imports left the run alone"
    named_like_import = campaign.with_name("copy.yaml")
    named_like_import.write_text(campaign.read_text().replace("name: tiny", "name: copy"))
    refused = run_cli("run", str(named_like_import), home=home)
    assert refused.returncode == 2 and "holds imported results" in refused.stderr


def test_nccl_tests_log_gives_a_configuration_its_busbw(home: Path, tmp_path: Path) -> None:
    assert imported(home, tmp_path, PUBLISHED, "--campaign", "published").returncode == 0
    ambiguous = run_cli("import", str(NCCL_LOG), "--campaign", "published", home=home)
    assert ambiguous.returncode == 2 and "--config" in ambiguous.stderr
    result = run_cli("import", str(NCCL_LOG), "--campaign", "published", "--config", "lambda:H100_SXMx8:on-demand",
                     home=home)
    assert result.returncode == 0, result.stderr
    row = next(r for r in leaderboard(home) if r["cell"] == "lambda:H100_SXMx8:on-demand")
    assert row["busbw_bytes"] == 8_589_934_592
    assert row["busbw_gbps"] == pytest.approx((481.25 + 476.49) / 2)
    assert "481" in run_cli("leaderboard", home=home).stdout or "478.9" in run_cli("leaderboard", home=home).stdout


def test_both_markets_and_filters(home: Path, tmp_path: Path) -> None:
    extra = f"""\
- {{provider: lambda, gpu: H100_SXM, count: 8, market: spot, hourly_usd: 12.0, step_time_ms: 720, target: {D26}}}
- {{provider: vastai, gpu: H100_SXM, count: 8, market: spot, hourly_usd: 15.0, target_steps: 1000,
   step_time_ms: 700}}
"""
    assert imported(home, tmp_path, PUBLISHED + extra, "--campaign", "both").returncode == 0
    rows = {r["cell"]: r for r in leaderboard(home)}
    spot, on_demand = rows["lambda:H100_SXMx8:spot"], rows["lambda:H100_SXMx8:on-demand"]
    for row in (spot, on_demand):
        assert (row["spot_usd_per_hour"], row["on_demand_usd_per_hour"]) == (12.0, 23.92)
        assert row["cost_spot_usd"] == pytest.approx(row["train_hours"] * 12.0)
        assert row["cost_on_demand_usd"] == pytest.approx(row["train_hours"] * 23.92)
    assert rows["runpod:H100_NVLx8:on-demand"]["cost_spot_usd"] is None, "no spot price known for NVL"
    assert {r["provider"] for r in leaderboard(home, "--provider", "runpod")} == {"runpod"}
    assert {r["market"] for r in leaderboard(home, "--market", "spot")} == {"spot"}
    assert len(leaderboard(home, "--model", "nanochat-d26")) == 4, "the target_steps-only record has no model"
    (nvl,) = leaderboard(home, "--provider", "runpod", "--market", "on-demand")
    assert nvl["cell"] == "runpod:H100_NVLx8:on-demand"


BAD_RECORDS = [
    ("- {provider: x, gpu: H100_SXM, count: 8, market: spot, step_time_ms: 700, target_steps: 10}\n", 1, "hourly_usd"),
    ("- {provider: x, gpu: H100_SXM, count: 8, market: spot, hourly_usd: 1, step_time_ms: 700}\n", 1, "target"),
    (f"- {{provider: x, gpu: H100_SXM, count: 8, market: spot, hourly_usd: 1, step_time_ms: 700, target: {D26}}}\n"
     "- {provider: x, gpu: H100_SXM, count: 8, market: spot, hourly_usd: 1, step_time_ms: 700,\n"
     "   target: {model: gpt-5, target_param_data_ratio: 8.5, total_batch_size: 524288}}\n", 3, "gpt-5"),
    ("- {provider: x, gpu: H100_SXM, count: 8, market: sometimes, hourly_usd: 1, step_time_ms: 7, target_steps: 1}\n",
     1, "market"),
    ("[{\"provider\": \"x\",\n \"gpu\": \"H100_SXM\" \"count\": 8}]\n", 2, "syntax"),
]


@pytest.mark.parametrize(("text", "line", "words"), BAD_RECORDS)
def test_bad_records_name_file_and_line_and_import_nothing(home: Path, tmp_path: Path, text: str, line: int,
                                                           words: str) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(PUBLISHED)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = run_cli("import", str(good), str(bad), str(NCCL_LOG), "--config", "lambda:H100_SXMx8:on-demand",
                     home=home)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{bad}:{line}" in result.stderr and words in result.stderr and "Traceback" not in result.stderr
    assert leaderboard(home) == [], "nothing half-imported"


def test_bad_nccl_logs_import_nothing(home: Path, tmp_path: Path) -> None:
    lines = NCCL_LOG.read_text().splitlines()
    broken_at = next(i for i, text in enumerate(lines) if text.strip().startswith("4194304 "))
    lines[broken_at] = lines[broken_at].replace(" 0 ", " x ", 1).rsplit(" ", 3)[0]
    garbled = tmp_path / "all_reduce_perf.log"
    garbled.write_text("\n".join(lines) + "\n")
    good = tmp_path / "good.yaml"
    good.write_text(PUBLISHED)
    result = run_cli("import", str(good), str(garbled), "--config", "lambda:H100_SXMx8:on-demand", home=home)
    assert result.returncode == 2 and f"{garbled}:{broken_at + 1}" in result.stderr, result.stderr
    notes = tmp_path / "notes.txt"
    notes.write_text("step time was fine\n")
    result = run_cli("import", str(notes), home=home)
    assert result.returncode == 2 and "nccl-tests log" in result.stderr
    assert leaderboard(home) == []
    unknown = run_cli("import", str(good), str(NCCL_LOG), "--config", "nope", home=home)
    assert unknown.returncode == 2 and "no cell 'nope'" in unknown.stderr and leaderboard(home) == []


def test_report_of_imported_results_draws_their_step_times(home: Path, tmp_path: Path) -> None:
    assert imported(home, tmp_path, PUBLISHED, "--campaign", "published").returncode == 0
    result = run_cli("report", "published", "--out", str(tmp_path / "report"), home=home)
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "report" / "index.html").read_text()
    figure = page[page.index('id="c0-step_time"'):]
    figure = figure[:figure.index("</svg>")]
    assert "no timed profile steps yet" not in figure
    for label in ("702.0 ms", "1,295.0 ms", "980.0 ms"):
        assert label in figure, label
    assert "nanochat-d26" in page
