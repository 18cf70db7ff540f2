"""Hostile campaign files, records files, nccl-tests logs and database URLs (issue 13, items 4 and
11-13): each is refused through the real CLI with one line naming what is wrong, exit 2, no
traceback, quickly, and with nothing written to the store."""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_here

CAMPAIGN = """\
name: hostile
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
payload: {profile: {device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: 2}}
matrix:
  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5}
"""
RECORD = ("- {provider: lambda, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 23.92, step_time_ms: 702,\n"
          "   target: {model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}}\n")
NCCL_LOG = REPO / "tests" / "fixtures" / "all_reduce_perf_8xh100.log"
LAUGHS = "abcdefghi"


def billion_laughs() -> str:
    """Nine lists of nine aliases of the list before: 9^9 (387 million) values from 600 bytes."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{name}: &{name} [{','.join([f'*{before}'] * 9)}]" for before, name in itertools.pairwise(LAUGHS)]
    return "\n".join(lines) + "\n"


def refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one error line of a refused command (exit 2, no traceback), checked to contain ``words``."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    for word in words:
        assert word.lower() in lines[0].lower(), (word, lines[0])
    return lines[0]


def stored_campaigns(home: Path) -> list[str]:
    db = home / "benchctl.db"
    if not db.exists():
        return []
    with sqlite3.connect(db) as conn:
        return [name for (name,) in conn.execute("select name from campaign")]


def run_campaign_text(home: Path, path: Path, text: str | bytes) -> subprocess.CompletedProcess[str]:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return cli_here("run", str(path), home=home)


# --- item 4: YAML that expands, nests or weighs too much -------------------------------------------


@pytest.mark.parametrize(("name", "text", "words"), [
    ("alias-bomb", billion_laughs(), "expands to more than 100,000 values"),
    ("merge-bomb", "a: &a {x0: 1, x1: 1, x2: 1, x3: 1, x4: 1, x5: 1, x6: 1, x7: 1, x8: 1}\n" + "".join(
        f"{name}: &{name} {{<<: [{', '.join([f'*{before}'] * 9)}]}}\n"
        for before, name in zip(LAUGHS, "bcdefghij", strict=True)), "expands to more than 100,000 values"),
    ("deep-lists", "[" * 10_000 + "]" * 10_000, "nested deeper than 64 levels"),
    ("deep-mappings", "name: " + "{a: " * 10_000 + "1" + "}" * 10_000, "nested deeper than 64 levels"),
    ("alias-of-itself", "name: &x [*x]\n", "nested deeper than 64 levels"),
    ("merge-of-itself", "name: &x {<<: *x}\n", "nested deeper than 64 levels"),
])
def test_yaml_bombs_are_refused_quickly(home: Path, tmp_path: Path, name: str, text: str, words: str) -> None:
    path = tmp_path / f"{name}.yaml"
    started = time.monotonic()
    line = refused(run_campaign_text(home, path, text), str(path), words)
    assert time.monotonic() - started < 20, "refused while reading, not after expanding"
    assert line.startswith(f"error: {path}")
    assert not (home / "benchctl.db").exists(), "nothing was written"


def test_a_50_mb_campaign_file_is_refused_by_its_size(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as out:
        out.write(CAMPAIGN.encode())
        for _ in range(50):
            out.write(b"".join(b"k%07d: 1\n" % i for i in range(100_000)))  # 5 M keys, 50 MB
    started = time.monotonic()
    refused(cli_here("run", str(path), home=home), str(path), "over 1 MiB")
    assert time.monotonic() - started < 15, "refused by its size, before it is parsed"
    assert not (home / "benchctl.db").exists()


def test_a_huge_count_is_refused_as_out_of_range(home: Path, tmp_path: Path) -> None:
    text = CAMPAIGN.replace("count: 2,", f"count: {10**20},")
    refused(run_campaign_text(home, tmp_path / "c.yaml", text), "matrix[0].count", "out of range")
    assert not (home / "benchctl.db").exists()


@pytest.mark.parametrize(("old", "new", "words"), [
    ("target_param_data_ratio: 8.5", "target_param_data_ratio: 1.0e+300", "less than or equal to 1000000"),
    ("model: nanochat-d1,", "model: nanochat-d1000000000,", "deeper than the deepest preset"),
])
def test_targets_that_overflow_or_hang_are_refused(home: Path, tmp_path: Path, old: str, new: str,
                                                   words: str) -> None:
    started = time.monotonic()
    refused(run_campaign_text(home, tmp_path / "c.yaml", CAMPAIGN.replace(old, new)), "target", words)
    assert time.monotonic() - started < 20
    assert not (home / "benchctl.db").exists()


def test_a_matrix_over_10000_cells_is_refused_before_expanding(home: Path, tmp_path: Path) -> None:
    counts, prices = ",".join(map(str, range(1, 102))), ",".join(str(i / 100) for i in range(100))
    matrix = f"  - {{provider: local, gpu: cpu, count: [{counts}], price_usd_per_hour: [{prices}]}}\n"
    text = CAMPAIGN.split("matrix:\n")[0] + "matrix:\n" + matrix
    refused(run_campaign_text(home, tmp_path / "c.yaml", text), "matrix[0]", "expands to 10,100 cells")


# --- item 11: payload.command.upload ---------------------------------------------------------------


def command_campaign(upload: str) -> str:
    return CAMPAIGN.replace("payload: {", f'payload: {{phases: [command], command: {{run: "true", upload: {upload}}}, ')


def test_upload_must_stay_inside_the_campaign_folder_without_symlinks(home: Path, tmp_path: Path) -> None:
    folder = (tmp_path / "campaign").resolve()
    (folder / "work").mkdir(parents=True)
    (folder / "work" / "train.py").write_text("print('hi')\n")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "id_rsa").write_text("PRIVATE\n")
    path = folder / "c.yaml"
    path.write_text(command_campaign("work"))
    assert cli_here("plan", str(path), home=home).returncode == 0, "an honest upload still plans"

    refused(run_campaign_text(home, path, command_campaign(str(secrets))), "payload.command.upload",
            "is an absolute path")
    refused(run_campaign_text(home, path, command_campaign("../secrets")), "payload.command.upload",
            "outside the campaign file's folder")
    (folder / "linked").symlink_to(secrets)
    refused(run_campaign_text(home, path, command_campaign("linked")), "payload.command.upload",
            "outside the campaign file's folder")
    (folder / "inside").symlink_to(folder / "work")
    refused(run_campaign_text(home, path, command_campaign("inside")), "payload.command.upload",
            f"{folder / 'inside'} is a symlink")
    (folder / "work" / "key").symlink_to(secrets / "id_rsa")
    refused(run_campaign_text(home, path, command_campaign("work")), "payload.command.upload",
            f"{folder / 'work' / 'key'} is a symlink")
    assert not (home / "benchctl.db").exists()


# --- item 12: import -------------------------------------------------------------------------------


def import_text(home: Path, tmp_path: Path, text: str, *args: str, name: str = "rows.yaml"
                ) -> subprocess.CompletedProcess[str]:
    path = tmp_path / name
    path.write_text(text)
    return cli_here("import", str(path), *args, home=home)


@pytest.mark.parametrize(("old", "new", "words"), [
    ("step_time_ms: 702", "step_time_ms: .inf", "step_time_ms: input should be a finite number"),
    ("hourly_usd: 23.92", "hourly_usd: 1e400", "hourly_usd: input should be a finite number"),
    ("hourly_usd: 23.92", "hourly_usd: Infinity", "hourly_usd: input should be a finite number"),
    ("step_time_ms: 702", "step_time_ms: .nan", "step_time_ms: input should be a finite number"),
    ("count: 8", f"count: {2**64}", "[0].count: the integer is out of range"),
    ("step_time_ms: 702", f"step_time_ms: 702, busbw_bytes: {10**20}", "busbw_bytes: the integer is out of range"),
    ("step_time_ms: 702", "step_time_ms: 1e300", "step_time_ms: input should be less than or equal to"),
    ("count: 8", "count: 8, campaign: ../../etc", "is not a campaign name"),
    ("count: 8", "count: 8, campaign: '<img src=x onerror=alert(1)>'", "is not a campaign name"),
    ("count: 8", f"count: 8, campaign: {'x' * 100_000}", "is not a campaign name"),
    ("target_param_data_ratio: 8.5", "target_param_data_ratio: 1.0e+300", "less than or equal to 1000000"),
])
def test_records_with_impossible_numbers_or_names_import_nothing(home: Path, tmp_path: Path, old: str, new: str,
                                                                 words: str) -> None:
    assert old in RECORD
    refused(import_text(home, tmp_path, RECORD.replace(old, new)), "rows.yaml", words)
    assert stored_campaigns(home) == [], "nothing was imported"


@pytest.mark.parametrize("name", ["../../etc", "x" * 100_000, "<b>x</b>", "-rf"])
def test_import_campaign_option_is_checked_like_a_campaign_name(home: Path, tmp_path: Path, name: str) -> None:
    refused(import_text(home, tmp_path, RECORD, "--campaign", name), "--campaign", "is not a campaign name")
    assert stored_campaigns(home) == []


def test_records_files_are_capped(home: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    refused(import_text(home, tmp_path, "# padding\n" * 500_000, name="big.yaml"), "big.yaml", "over 4 MiB")
    many = "[" + ",".join(["{}"] * 10_001) + "]"
    refused(import_text(home, tmp_path, many, name="many.json"), "many.json", "10,001 records, over the 10,000")
    refused(import_text(home, tmp_path, billion_laughs(), name="bomb.yaml"), "bomb.yaml",
            "expands to more than 1,000,000 values")
    assert time.monotonic() - started < 60
    assert stored_campaigns(home) == []


def nccl_log(replace: tuple[str, str] | None = None, extra: str = "") -> str:
    text = NCCL_LOG.read_text()
    if replace:
        assert replace[0] in text
        text = text.replace(*replace)
    return text + extra


LAST_ROW = ("  8589934592    2147483648     float     sum      -1  31236.1  275.00  481.25      0  31548.5  272.28  "
            "476.49")


@pytest.mark.parametrize(("log", "words"), [
    (nccl_log((LAST_ROW, LAST_ROW.replace("481.25", "-481.25", 1))), "'-481.25' is not a time or bandwidth"),
    (nccl_log((LAST_ROW, LAST_ROW.replace("31236.1", "-1.0", 1))), "'-1.0' is not a time or bandwidth"),
    (nccl_log((LAST_ROW, LAST_ROW.replace("481.25", "inf", 1))), "'inf' is not a time or bandwidth"),
    (nccl_log((LAST_ROW, LAST_ROW.replace("481.25", "nan", 1))), "'nan' is not a time or bandwidth"),
    (nccl_log((LAST_ROW, LAST_ROW.replace("8589934592", "9" * 5000, 1))), "too large for a size or count"),
    (nccl_log((LAST_ROW, LAST_ROW.replace("8589934592", str(2**63), 1))), "too large for a size or count"),
])
def test_nccl_logs_with_impossible_numbers_import_nothing(home: Path, tmp_path: Path, log: str, words: str) -> None:
    records = tmp_path / "rows.yaml"
    records.write_text(RECORD)
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(log)
    refused(cli_here("import", str(records), str(path), home=home), "all_reduce_perf.log", words)
    assert stored_campaigns(home) == []


def test_a_million_line_nccl_log_is_refused_by_the_caps(home: Path, tmp_path: Path) -> None:
    row = ("     1048576        262144     float     sum      -1    163.5    6.41   11.22      0    165.2    6.35   "
           "11.11      0\n")
    header = nccl_log().split("     1048576")[0]
    records = tmp_path / "rows.yaml"
    records.write_text(RECORD)
    huge = tmp_path / "all_reduce_perf.log"
    huge.write_text(header + row * 1_000_000)  # 113 MB
    long = tmp_path / "all_reduce_perf_long.log"
    long.write_text(header + row * 20_000)  # 2 MB, but 20,000 result lines
    started = time.monotonic()
    refused(cli_here("import", str(records), str(huge), home=home), str(huge), "over 8 MiB")
    refused(cli_here("import", str(records), str(long), home=home), str(long), "more than 10,000 result lines")
    assert time.monotonic() - started < 30
    assert stored_campaigns(home) == []


def test_no_imported_cost_is_infinite_in_json(home: Path, tmp_path: Path) -> None:
    """Finite inputs whose cost overflows to inf are refused; those at the bounds give finite costs."""
    overflow = RECORD.replace("hourly_usd: 23.92, step_time_ms: 702", "hourly_usd: 1.0e+200, step_time_ms: 1.0e+200")
    refused(import_text(home, tmp_path, overflow, "--campaign", "overflow"), "less than or equal to")
    extreme = RECORD.replace("hourly_usd: 23.92, step_time_ms: 702",  # the bounds: $1M/hr, a step of a day
                             "hourly_usd: 1000000, step_time_ms: 86400000")
    extreme = extreme.replace("target_param_data_ratio: 8.5", "target_param_data_ratio: 1000000")
    result = import_text(home, tmp_path, extreme, "--campaign", "edge")
    assert result.returncode == 0, result.stderr
    board = cli_here("leaderboard", "--format", "json", home=home)

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} in the JSON output")

    (row,) = json.loads(board.stdout, parse_constant=no_constants)
    assert row["cost_to_train_usd"] > 1e16


# --- item 13: --db -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "words"), [
    ("postgresql://user:s3cret@db.example:notaport/benchctl", "invalid literal for int()"),
    ("postgresql://user:s3cret@[::1/benchctl", "postgresql://user:***@[::1/benchctl"),
    ("postgresql://user:s3cret@127.0.0.1:1/benchctl?connect_timeout=abc", "connect_timeout"),
    ("postgresql://user:s3cret@127.0.0.1:1/benchctl?no_such_option=1", "no_such_option"),
    ("sqlite:///{tmp}/b.db?timeout=abc", "could not convert string to float"),
])
def test_malformed_database_urls_are_one_line(home: Path, tmp_path: Path, url: str, words: str) -> None:
    url = url.format(tmp=tmp_path)
    line = refused(cli_here("--db", url, "status", home=home), "cannot use database URL", words)
    assert "s3cret" not in line, "the password is redacted"
    assert not (tmp_path / "b.db").exists()


def test_a_file_that_is_not_a_database_is_one_line_and_left_alone(home: Path) -> None:
    home.mkdir()
    (home / "benchctl.db").write_text("my notes, not a database\n")
    refused(cli_here("status", home=home), "is not an SQLite database", "move that file away")
    assert (home / "benchctl.db").read_text() == "my notes, not a database\n"
