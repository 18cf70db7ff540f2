"""Every default output of a real local campaign fits an 80-column terminal and uses a wider one
(issue 29 item 1), as ``sky status`` and ``dstack ps`` do: fewer columns at 80, more at 200, the
left-out ones named or counted on a last line; long lines wrap at the terminal's width. Piped
output keeps its stable one-line-per-row form; CSV carries no float noise and no placeholders."""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path

import pytest

from benchctl.report.render import render
from tests import terminal
from tests.conftest import run_cli, run_once
from tests.local_campaign import REPORT_CAMPAIGN

COMMANDS = (("plan", "{file}"), ("leaderboard",), ("status",), ("logs", "local:cpux2:on-demand"),
            ("logs", "local:cpux2:spot"), ("check", "local", "ssh", "runpod", "aws"),
            ("comm-volume", "--model", "nanochat-d26", "--world-size", "8"),
            ("predict", "--model", "nanochat-d26", "--gpu", "H100_SXM", "--count", "8"))


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(BENCHCTL_HOME, campaign file) of the local campaign the report tests run (once per test run)."""
    home, path, ran = run_once(tmp_path_factory, "rep", REPORT_CAMPAIGN)
    assert "local:cpux2:on-demand: done" in ran, ran
    return home, path


def on_terminal(home: Path, width: int, *args: str) -> str:
    """``benchctl ARGS`` on a pseudo-terminal ``width`` columns wide (stdout only), escapes removed."""
    return terminal.on_terminal(home, width, *args)[0]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_every_default_output_fits_80_columns(campaign: tuple[Path, Path], args: tuple[str, ...]) -> None:
    home, path = campaign
    text = on_terminal(home, 80, *(a.format(file=path) for a in args))
    lines = text.rstrip("\n").splitlines()
    assert len(lines) >= 2, text
    too_wide = [line for line in lines if len(line) > 80]
    assert not too_wide, text


@pytest.mark.parametrize("args", [("plan", "{file}"), ("leaderboard",)], ids=lambda a: a[0])
def test_a_wide_terminal_shows_more_columns(campaign: tuple[Path, Path], args: tuple[str, ...]) -> None:
    home, path = campaign
    argv = [a.format(file=path) for a in args]

    def left_out(width: int) -> int:
        """How many columns the last line says were left out (0: none)."""
        text = on_terminal(home, width, *argv)
        counted = re.search(r"^\((\d+) more columns on a wider terminal; --format json has every one\)$", text, re.M)
        named = re.search(r"^\(a wider terminal or --format json shows (.+)\)$", text, re.M)
        return int(counted[1]) if counted else len(named[1].split(", ")) if named else 0

    narrow, wide = left_out(80), left_out(200)
    assert narrow >= 3 and wide <= narrow - 3, (narrow, wide)


def test_logs_are_a_readable_table_and_raw_with_format_json(campaign: tuple[Path, Path]) -> None:
    home, _ = campaign
    table = run_cli("logs", "local:cpux2:on-demand", home=home).stdout
    events = table.split("events of attempt 1:\n")[1].splitlines()
    assert events[0].split() == ["time", "kind", "phase", "summary"]
    sample = next(line for line in events if re.match(r"  \S+  sample +collectives +op=all_reduce ", line))
    assert not re.search(r"\d\.\d{5,}", sample), sample  # rounded, not 1.009765377725173e-05
    assert "=null" not in table
    raw = run_cli("logs", "local:cpux2:on-demand", "--format", "json", home=home).stdout.splitlines()
    first = json.loads(raw[0])
    assert first["kind"] == "phase_start" and isinstance(first["t"], float)
    assert all(json.loads(line)["kind"] for line in raw)
    assert any(json.loads(line).get("op") == "all_reduce" for line in raw)


def test_csv_has_no_float_noise_and_empty_values_empty(campaign: tuple[Path, Path]) -> None:
    home, _ = campaign
    text = run_cli("leaderboard", "--format", "csv", home=home).stdout
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 3
    for row in rows:
        for name, value in row.items():
            assert value not in ("-", "'-"), (name, row)
            assert _significant_digits(value) <= 12, (name, value)  # 0.00675253647722 is 12, not noise
    assert rows[0]["env"] == "" and rows[0]["flags"] == ""
    price = render([{"hourly_usd": 0.1 + 0.3, "flags": [], "env": {}}], ["hourly_usd", "flags", "env"], "csv")
    assert price.splitlines()[1] == "0.4,,"


def _significant_digits(value: str) -> int:
    """How many significant digits a CSV number carries (0 for text): ``0.0067525`` has 5."""
    number = re.fullmatch(r"-?(\d+)(?:\.(\d+))?(?:e-?\d+)?", value)
    if number is None:
        return 0
    return len((number[1] + (number[2] or "")).lstrip("0"))


class _Terminal(io.StringIO):
    """stdout as ``render`` sees a terminal's (the width from COLUMNS)."""

    def isatty(self) -> bool:
        return True


LONG_KEYS = ("runpod:H100_SXMx8:spot:region=US-KS-2:env=NCCL_ALGO=Ring", "local:cpux2:on-demand:nodes=2:id=0123abcd")


def test_a_long_cell_key_folds_at_its_separators(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key longer than a name kept whole (30) wraps after its ``:`` separators, never inside a part
    (``region=`` / ``US-`` / ``KS-2``, ``on-`` / ``demand`` were)."""
    monkeypatch.setattr(sys, "stdout", _Terminal())
    monkeypatch.setenv("COLUMNS", "80")
    rows = [{"key": key, "state": "done", "attempts": 1, "controller": "vm pid 4242 since 2026-11-26 17:43:17 (alive)",
             "reason": "the node answered nothing for 300 s; terminated and retried"} for key in LONG_KEYS]
    text = re.sub(r"\x1b\[[0-9;]*m", "", render(rows, ["key", "state", "attempts", "controller", "reason"], "table"))
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    width = lines[0].index("state")
    pieces = [line[:width].strip() for line in lines[2:]]
    for key in LONG_KEYS:
        start = next(i for i, piece in enumerate(pieces) if key.startswith(piece) and piece)
        shown, i = "", start
        while shown != key:
            assert pieces[i] and key.startswith(shown + pieces[i]), (key, pieces)
            shown += pieces[i]
            assert shown == key or shown.endswith(":"), f"{key} folds inside a part: {pieces[start:i + 1]}"
            i += 1
    assert "17:43:17" in text, "a time is no key: its colons do not fold it"


def test_a_campaign_file_error_fits_80_columns(tmp_path: Path) -> None:
    samples = terminal.doc_samples()
    samples.write_bad_campaign(tmp_path)
    text, code = samples.on_terminal(("run", "campaigns/h100.yaml"), tmp_path / "home", tmp_path, stderr=True,
                                     width=80)
    lines = text.rstrip("\n").splitlines()
    assert code == 2 and lines[0].startswith("error: campaigns/h100.yaml:8 matrix[1].count:"), text
    assert all(len(line) <= 80 for line in lines), text
    assert " ".join(line.strip() for line in lines).endswith("input should be greater than or equal to 1"), text
    piped = run_cli("run", str(tmp_path / "campaigns" / "h100.yaml"), home=tmp_path / "home")
    assert len(piped.stderr.splitlines()) == 1, "piped, an error stays one line"


def test_a_preflight_replay_shows_each_observed_value_whole_in_80_columns() -> None:
    """The observed column wraps each value whole (it was cut at 60 characters, mid-string)."""
    text, code = terminal.on_terminal(Path("/nonexistent-home"), 80, "preflight", "--replay",
                                      "tests/fixtures/preflight/h100-sxm-numa-split")
    lines = text.rstrip("\n").splitlines()
    assert code == 0 and all(len(line) <= 80 for line in lines), text
    words = " ".join(text.split())
    for whole in ('["NVIDIA H100 80GB HBM3"]}', '"torch": "2.8.0+cu128"}', '"7": 478.1}}', 'mlx5_7:1/IB"}}',
                  "facts in tests/fixtures/preflight/h100-sxm-numa-split)"):
        assert whole in words, (whole, text)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_runs_progress_line_wraps_at_the_terminals_width_under_its_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` printed "HH:MM:SS campaign x: worst case $7.25; over budget_usd $5.00, which caps the spend
    at $5.00" as one 101-character line on an 80-column terminal; piped, a line stays whole."""
    from benchctl.engine.progress import print_line

    line = "campaign local-smoke: worst case $7.25; over budget_usd $5.00, which caps the spend at $5.00"
    monkeypatch.setenv("COLUMNS", "80")
    shown = _Terminal()
    monkeypatch.setattr(sys, "stderr", shown)
    print_line(line)
    lines = shown.getvalue().splitlines()
    assert len(lines) == 2 and all(len(x) <= 80 for x in lines), lines
    assert lines[1].startswith(" " * 9) and not lines[1].startswith(" " * 10), lines
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    print_line(line)
    assert piped.getvalue().count("\n") == 1 and line in piped.getvalue()
