"""`benchctl import`: result records and nccl-tests logs join the ranking; bad files change nothing.

The nccl-tests log in tests/fixtures is synthetic (made for this test in nccl-tests' output
format, 8 ranks): its busbw at the largest size is 481.25 GB/s out-of-place, 476.49 in-place.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_here, copy_home, run_cli, run_once
from tests.local_campaign import REPORT_CAMPAIGN

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
    result = cli_here("leaderboard", "--format", "json", *args, home=home)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def imported(home: Path, tmp_path: Path, text: str, *args: str, name: str = "rows.yaml"):  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text(text)
    return cli_here("import", str(path), *args, home=home)


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
    table = cli_here("leaderboard", home=home).stdout
    assert "14,889" in table and "69.45" in table and "H100_NVL×8" in table


@pytest.mark.slow
def test_export_then_import_round_trips(home: Path, tmp_path: Path,
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    source, _, ran = run_once(tmp_path_factory, "rep", REPORT_CAMPAIGN)
    assert "local:cpux2:on-demand: done" in ran, ran
    copy_home(source, home)
    measured = leaderboard(home)
    two_ranks = next(r for r in measured if r["cell"] == "local:cpux2:on-demand")
    assert two_ranks["busbw_bytes"] == 32768 and two_ranks["busbw_gbps"] > 0, "collectives reach the leaderboard"
    export = tmp_path / "export.json"
    export.write_text(cli_here("leaderboard", "--format", "json", home=home).stdout)
    result = cli_here("import", str(export), "--campaign", "copy", home=home)
    assert result.returncode == 0, result.stderr
    with_result = [r for r in measured if r["step_time_ms"] is not None]
    assert f"imported {len(with_result)} results" in result.stdout and "skipped 1 rows without a result" in \
        result.stdout, "the cell whose node failed preflight has no result to carry"
    copies = {r["cell"]: r for r in leaderboard(home, "--campaign", "copy")}
    assert set(copies) == {r["cell"] for r in with_result}
    for row in with_result:
        copy = copies[row["cell"]]
        assert copy["campaign"] == "copy" and set(copy) == set(row)
        for key, value in row.items():
            if key != "campaign":
                assert copy[key] == (pytest.approx(value) if isinstance(value, float) else value), key

    clash = cli_here("import", str(export), "--campaign", "rep", home=home)
    assert clash.returncode == 2 and "was run by benchctl" in clash.stderr
    assert leaderboard(home, "--campaign", "rep") == measured, "imports left the run alone"
    named_like_import = tmp_path / "copy.yaml"
    named_like_import.write_text(REPORT_CAMPAIGN.replace("name: rep", "name: copy"))
    refused = cli_here("run", str(named_like_import), home=home)
    assert refused.returncode == 2 and "holds imported results" in refused.stderr


def test_an_export_of_several_campaigns_imports_back_into_them(home: Path, tmp_path: Path) -> None:
    assert imported(home, tmp_path, PUBLISHED, "--campaign", "a").returncode == 0
    assert imported(home, tmp_path, PUBLISHED.replace("23.92", "30.0"), "--campaign", "b").returncode == 0
    exported = leaderboard(home)
    assert len(exported) == 6, "the same three cells in two campaigns"
    export = tmp_path / "export.json"
    export.write_text(json.dumps(exported))
    elsewhere = tmp_path / "elsewhere"
    result = cli_here("import", str(export), home=elsewhere)
    assert result.returncode == 0, result.stderr
    assert "into campaign a, b" in result.stdout
    assert leaderboard(elsewhere) == exported, "every row back in its own campaign, ranked the same"
    merged = cli_here("import", str(export), "--campaign", "one", home=elsewhere)
    assert merged.returncode == 2 and "of campaign 'one' is also in" in merged.stderr, merged.stderr


def test_nccl_tests_log_gives_a_configuration_its_busbw(home: Path, tmp_path: Path) -> None:
    assert imported(home, tmp_path, PUBLISHED, "--campaign", "published").returncode == 0
    ambiguous = cli_here("import", str(NCCL_LOG), "--campaign", "published", home=home)
    assert ambiguous.returncode == 2 and "--config" in ambiguous.stderr
    result = cli_here("import", str(NCCL_LOG), "--campaign", "published", "--config", "lambda:H100_SXMx8:on-demand",
                     home=home)
    assert result.returncode == 0, result.stderr
    row = next(r for r in leaderboard(home) if r["cell"] == "lambda:H100_SXMx8:on-demand")
    assert row["busbw_bytes"] == 8_589_934_592
    assert row["busbw_gbps"] == pytest.approx((481.25 + 476.49) / 2)
    busbw = cli_here("leaderboard", "--columns", "cell,busbw", home=home).stdout
    assert "478.9 @8G" in busbw, "the median of both placements, at its size"
    again = imported(home, tmp_path, PUBLISHED.replace("23.92", "24.5"), "--campaign", "published")
    assert again.returncode == 0, again.stderr
    row = next(r for r in leaderboard(home) if r["cell"] == "lambda:H100_SXMx8:on-demand")
    assert (row["hourly_usd"], row["busbw_bytes"]) == (24.5, 8_589_934_592), "a new record keeps the log's busbw"


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
    spot_only = {r["cell"]: r for r in leaderboard(home, "--market", "spot")}
    assert {r["market"] for r in spot_only.values()} == {"spot"}
    filtered = spot_only["lambda:H100_SXMx8:spot"]
    assert (filtered["spot_usd_per_hour"], filtered["on_demand_usd_per_hour"]) == (12.0, 23.92), \
        "a market filter does not hide the other market's price"
    assert filtered["cost_on_demand_usd"] == pytest.approx(spot["cost_on_demand_usd"])
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
    # Plain JSON (an export) is read by the json module; a bad record still names its line.
    ('[{"provider": "x", "gpu": "H100_SXM", "count": 8, "market": "spot", "hourly_usd": 1,\n'
     '  "step_time_ms": 700, "target_steps": 10},\n'
     ' {"provider": "x", "gpu": "H100_SXM", "count": 8, "market": "spot",\n'
     '  "hourly_usd": -1, "step_time_ms": 700, "target_steps": 10}]\n', 4, "hourly_usd"),
    ('[{"provider": "x", "gpu": "H100_SXM", "count": 8, "market": "spot", "hourly_usd": 1,\n'
     '  "step_time_ms": 700, "target_steps": 10, "count": 4}]\n', 2, "count"),
]


@pytest.mark.parametrize(("text", "line", "words"), BAD_RECORDS)
def test_bad_records_name_file_and_line_and_import_nothing(home: Path, tmp_path: Path, text: str, line: int,
                                                           words: str) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(PUBLISHED)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = cli_here("import", str(good), str(bad), str(NCCL_LOG), "--config", "lambda:H100_SXMx8:on-demand",
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
    result = cli_here("import", str(good), str(garbled), "--config", "lambda:H100_SXMx8:on-demand", home=home)
    assert result.returncode == 2 and f"{garbled}:{broken_at + 1}" in result.stderr, result.stderr
    notes = tmp_path / "notes.txt"
    notes.write_text("step time was fine\n")
    result = cli_here("import", str(notes), home=home)
    assert result.returncode == 2 and "nccl-tests log" in result.stderr
    assert leaderboard(home) == []
    unknown = cli_here("import", str(good), str(NCCL_LOG), "--config", "nope", home=home)
    assert unknown.returncode == 2 and "no cell 'nope'" in unknown.stderr and leaderboard(home) == []


@pytest.mark.slow
def test_report_of_imported_results_draws_their_step_times(home: Path, tmp_path: Path) -> None:
    stated = PUBLISHED.replace("step_time_ms: 702,", "step_time_ms: 702, optimizer_share: 0.25, comm_share: 0.1,")
    assert imported(home, tmp_path, stated, "--campaign", "published").returncode == 0
    result = run_cli("report", "published", "--out", str(tmp_path / "report"), home=home)
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "report" / "index.html").read_text()
    figure = page[page.index('id="c0-step_time"'):]
    figure = figure[:figure.index("</svg>")]
    assert "no timed profile steps yet" not in figure
    for label in ("702.0 ms", "1,295.0 ms", "980.0 ms"):
        assert label in figure, label
    assert "8×H100 SXM, all GPUs on one NUMA node: 702 ms" in figure, "the record's target gives the reference"
    split = page[page.index('id="c0-split"'):]
    split = split[:split.index("</svg>")]
    assert "optimizer 25% of the step, its communication 10% of the step" in split
    assert split.count("no phase timings") == 2
    assert "nanochat-d26" in page


@pytest.mark.parametrize(("content", "words"), [
    (b"\xff\xfe- {provider: x}\n", "not UTF-8 text (byte 0)"),
    (b"", "the file is empty; a records file holds a list of result records"),
    (b"- {provider: x\x07}\n", "not readable as YAML"),
])
def test_unreadable_records_files_are_spec_errors(tmp_path: Path, content: bytes, words: str) -> None:
    from benchctl.errors import SpecError
    from benchctl.results.records import read_records

    path = tmp_path / "rows.yaml"
    path.write_bytes(content)
    with pytest.raises(SpecError) as caught:
        read_records(path)
    assert str(path) in str(caught.value) and words in str(caught.value), caught.value


def test_one_cell_in_two_files_names_both_and_imports_nothing(tmp_path: Path) -> None:
    from benchctl.errors import SpecError
    from benchctl.results.importer import import_files
    from benchctl.store.database import open_store

    engine = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(PUBLISHED)
    second.write_text(PUBLISHED.splitlines()[0] + "\n" + "\n".join(PUBLISHED.splitlines()[3:5]) + "\n")
    with pytest.raises(SpecError) as caught:
        import_files(engine, [first, second], "c", None)
    assert str(caught.value).startswith(f"{second}: the cell 'runpod:H100_SXMx8:spot' of campaign 'c' is also "
                                        f"in {first}")
    from benchctl.store import queries as q

    assert q.campaigns(engine) == [], "nothing half-imported"


def test_a_log_of_several_nccl_tests_labels_each_run(tmp_path: Path) -> None:
    from benchctl.results.nccl_log import read_nccl_log

    text = NCCL_LOG.read_text()
    lines = text.replace("all_reduce_perf", "all_gather_perf").splitlines()
    assert lines[0].startswith("# nThread") and lines[3].startswith("#  Rank  0") and lines[11] == "#"
    two_ranks = [*lines[:3], "#  Rank  0 Group  0 Pid  1 on b device  0 [0x00] NVIDIA H100",
                 "#  Rank  1 Group  0 Pid  2 on b device  1 [0x01] NVIDIA H100", *lines[11:]]
    path = tmp_path / "sweep.log"
    path.write_text(text + "\n".join(two_ranks) + "\n")
    rows = read_nccl_log(path)
    assert {(r["op"], r["ranks"]) for r in rows} == {("all_reduce", 8), ("all_gather", 2)}
    assert len(rows) == 2 * 2 * 14, "14 sizes, out-of-place and in-place, in each run"


def test_a_log_from_another_gpu_count_is_refused(tmp_path: Path) -> None:
    from benchctl.errors import SpecError
    from benchctl.results.importer import import_files
    from benchctl.store import queries as q
    from benchctl.store.database import open_store

    engine = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    records = tmp_path / "two.yaml"
    records.write_text(PUBLISHED.replace("gpu: H100_NVL, count: 8", "gpu: H100_NVL, count: 2"))
    with pytest.raises(SpecError) as caught:
        import_files(engine, [records, NCCL_LOG], "c", "runpod:H100_NVLx2:on-demand")
    assert str(caught.value) == (f"{NCCL_LOG}: this log ran on 8 ranks but the cell 'runpod:H100_NVLx2:on-demand' "
                                 "has 2 GPUs; name the cell it measured with --config")
    assert q.campaigns(engine) == [], "nothing half-imported"
    assert import_files(engine, [records, NCCL_LOG], "c", "runpod:H100_SXMx8:spot").collectives == 1
