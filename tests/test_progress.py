"""Progress during ``run``: a live table on a terminal, and the rows' arithmetic (the plain lines
when piped are checked by tests/test_cli.py's quick-start run)."""

from __future__ import annotations

import fcntl
import io
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from benchctl.engine.progress import (
    CellRow,
    LiveProgress,
    Note,
    PlainProgress,
    StepRates,
    cell_rows,
    format_elapsed,
    pick_progress,
    render_table,
)
from benchctl.store import queries as q
from benchctl.store.database import open_store
from benchctl.store.models import Attempt, Cell, Event
from tests.conftest import REPO
from tests.local_campaign import wait_for

KEYS = ["local:cpux1:on-demand", "local:cpux2:on-demand"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
BOX = set("│┃━─┏┓┗┛┡┩└┘┌┐╇╈┼")
HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"


# -- the CLI under a pseudo-terminal ----------------------------------------------------------

def start_in_pty(home: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    """``benchctl ARGS`` with stdin, stdout and stderr on a 50×200 pseudo-terminal; returns it and the master fd."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {k: v for k, v in os.environ.items()
           if k not in ("BENCHCTL_DB", "BENCHCTL_PROGRESS", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM")}
    env.update(BENCHCTL_HOME=str(home), TERM="xterm-256color")
    proc = subprocess.Popen([sys.executable, "-m", "benchctl", *args], cwd=REPO, env=env, stdin=slave, stdout=slave,
                            stderr=slave, start_new_session=True)
    os.close(slave)
    return proc, master


def read_until_exit(proc: subprocess.Popen[bytes], master: int, timeout: float = 300) -> str:
    """Everything the process wrote to the terminal, read until it exited and the terminal is drained."""
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        else:
            proc.kill()
            raise AssertionError("benchctl did not finish in time:\n" + b"".join(chunks).decode(errors="replace"))
        proc.wait(timeout=60)
    finally:
        os.close(master)
    return b"".join(chunks).decode(errors="replace")


def last_table(output: str) -> str:
    """The last drawing of the live table (ANSI codes removed), up to the leaderboard."""
    plain = ANSI.sub("", output)
    start = plain.rindex("last event")
    end = plain.find("cost-to-train", start)
    return plain[start:end if end >= 0 else None]


def row_of(table: str, key: str) -> str:
    (line,) = [line for line in table.splitlines() if key in line]
    return line


@pytest.mark.slow
def test_live_table_on_a_terminal(home: Path, write_campaign, standin_python: Path) -> None:  # type: ignore[no-untyped-def]
    proc, master = start_in_pty(home, "run", str(write_campaign(python=standin_python)), "--poll-interval", "0.2")
    output = read_until_exit(proc, master)
    assert proc.returncode == 0, output
    plain = ANSI.sub("", output)
    header = next(line for line in plain.splitlines() if "last event" in line)
    assert [c for c in ("cell", "state", "attempt", "elapsed", "spent", "last event") if c not in header] == []
    assert BOX & set(plain), "a rich table draws its borders"
    assert plain.count("last event") >= 2, "the table was redrawn while the campaign ran"
    assert HIDE_CURSOR in output and SHOW_CURSOR in output[output.rindex(HIDE_CURSOR):], "the cursor is back"
    table = last_table(output)
    for key in KEYS:
        row = row_of(table, key)
        assert " done " in row and re.search(r"\$0\.\d{4}", row), row
    assert "campaign tiny: spent $" in plain
    assert plain.rindex("cost-to-train") > plain.rindex("last event"), "the leaderboard prints below the table"
    assert f"{KEYS[0]}: provisioning" not in plain, "cell messages go into the table, not above it"
    assert "Traceback" not in plain


@pytest.mark.slow
def test_sigterm_stops_the_table_and_leaves_the_terminal_sane(home: Path, write_campaign,  # type: ignore[no-untyped-def]
                                                              standin_python: Path) -> None:
    proc, master = start_in_pty(home, "run", str(write_campaign(steps=400, python=standin_python)),
                                "--poll-interval", "0.2")
    chunks: list[bytes] = []
    running_keys: set[str] = set()

    def running() -> bool:
        while select.select([master], [], [], 0)[0]:
            chunks.append(os.read(master, 65536))
        if not (home / "benchctl.db").exists():
            return False
        engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
        try:
            running_keys.update(c.key for k in q.campaigns(engine) for c in q.cells(engine, k.id or 0)
                                if c.state == "running")
            return bool(running_keys)
        finally:
            engine.dispose()

    try:
        wait_for(running, timeout=180)
    except AssertionError:
        proc.kill()
        raise
    proc.send_signal(signal.SIGTERM)
    output = b"".join(chunks).decode(errors="replace") + read_until_exit(proc, master)
    assert proc.returncode == 130, output
    plain = ANSI.sub("", output)
    assert HIDE_CURSOR in output and SHOW_CURSOR in output[output.rindex(HIDE_CURSOR):], "the cursor is back"
    assert "interrupted: terminating this campaign's nodes" in plain
    table = last_table(output)
    # The local provider runs one node at a time: whichever cell got it was running and is now
    # cancelled; the other never started and may still be pending.
    (interrupted,) = running_keys
    assert " cancelled " in row_of(table, interrupted), table
    (other,) = set(KEYS) - running_keys
    assert re.search(r" (pending|cancelled) ", row_of(table, other)), table
    assert "Traceback" not in plain


# -- picking a renderer ----------------------------------------------------------------------

class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_pick_progress(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    def picked() -> type:
        return type(pick_progress(engine, 1, KEYS, "c", 5.0))

    monkeypatch.delenv("BENCHCTL_PROGRESS", raising=False)
    monkeypatch.setattr(sys, "stdout", Tty())
    monkeypatch.setattr(sys, "stderr", Tty())
    assert picked() is LiveProgress
    monkeypatch.setenv("BENCHCTL_PROGRESS", "plain")
    assert picked() is PlainProgress
    monkeypatch.delenv("BENCHCTL_PROGRESS")
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert picked() is PlainProgress


# -- the rows' arithmetic --------------------------------------------------------------------

@pytest.fixture
def engine(db_url: str) -> Engine:
    return open_store(db_url)


def _campaign(engine: Engine, name: str, keys: list[str]) -> dict[str, int]:
    campaign_id, _ = q.upsert_campaign(engine, name, "{}", "x.yaml", 10.0, [
        q.NewCell(key=k, provider="local", gpu="cpu", count=1, market="on-demand", config_json="{}") for k in keys])
    return {c.key: c.id or 0 for c in q.cells(engine, campaign_id)} | {"": campaign_id}


def _attempt(engine: Engine, cell_id: int, hourly: float, launched_at: float,
             terminated_at: float | None = None) -> Attempt:
    attempt = q.new_attempt(engine, cell_id, f"tok-{cell_id}-{launched_at}", "local", "on-demand", "d", hourly, "h")
    assert attempt.id is not None
    with Session(engine) as s:
        row = s.get(Attempt, attempt.id)
        assert row is not None
        row.launched_at = launched_at
        s.commit()
    if terminated_at is not None:
        return q.close_attempt(engine, attempt.id, "preempted", terminated_at=terminated_at)
    return attempt


def _set_cell(engine: Engine, cell_id: int, state: str, updated_at: float) -> None:
    with Session(engine) as s:
        row = s.get(Cell, cell_id)
        assert row is not None
        row.state, row.updated_at = state, updated_at
        s.commit()


def test_rows_spent_elapsed_attempt_and_last_event(engine: Engine) -> None:
    ids = _campaign(engine, "c", ["a", "b", "c"])
    _campaign(engine, "other", ["a"])  # another campaign's events and attempts stay out
    now = 1_000_000.0
    since = now - 1000
    # a: an attempt of an earlier run (30 min at $2/h = $1), and an open one since 15 min at $4/h ($1 so far)
    _attempt(engine, ids["a"], 2.0, now - 10_000, terminated_at=now - 10_000 + 1800)
    second = _attempt(engine, ids["a"], 4.0, now - 900)
    _set_cell(engine, ids["a"], "running", now - 800)
    # b: one attempt of this run, 60 s at $3.60/h ($0.06); the cell finished 5 s after its node
    first_b = _attempt(engine, ids["b"], 3.6, since + 10, terminated_at=since + 70)
    _set_cell(engine, ids["b"], "done", since + 75)
    assert second.id is not None and first_b.id is not None
    q.record_events(engine, second.id, [{"t": now - 10, "kind": "phase_start", "phase": "profile"}], 0, 10)
    q.record_events(engine, first_b.id, [{"t": since + 20, "kind": "phase_start", "phase": "profile"},
                                         {"t": since + 30, "kind": "sample", "phase": "profile", "step": 3}], 0, 20)
    notes = {"a": Note(now - 5, "attempt 2 measures the profile's remaining 7 timed steps"),
             "b": Note(since + 1, "provisioning")}

    snapshot = q.progress_snapshot(engine, ids[""])
    rows = {r.key: r for r in cell_rows(snapshot, ["b", "a", "c", "gone"], notes, now, since)}

    assert list(rows) == ["b", "a", "c"]
    a, b, c = rows["a"], rows["b"], rows["c"]
    assert (a.state, a.attempt) == ("running", 2)
    assert a.spent_usd == pytest.approx(2.0)
    assert a.elapsed_s == pytest.approx(900), "from this run's first launch; the earlier run's attempt does not count"
    assert a.last_event == "attempt 2 measures the profile's remaining 7 timed steps", "the newer of note and event"
    assert (b.state, b.attempt) == ("done", 1)
    assert b.spent_usd == pytest.approx(0.06)
    assert b.elapsed_s == pytest.approx(65), "a finished cell's clock stops at its last state change"
    assert b.last_event == "profile: sample step 3"
    assert (c.state, c.attempt, c.elapsed_s, c.spent_usd, c.last_event) == ("pending", None, None, 0.0, "")

    steps = {r.key: r for r in cell_rows(snapshot, ["b", "a"], notes, now, since, 10, StepRates())}
    assert (steps["b"].steps_done, steps["b"].steps_total, steps["b"].eta_s) == (10, 10, None), "done: all steps"
    assert (steps["a"].steps_done, steps["a"].steps_total) == (None, 10), "no timed step seen yet"


def test_format_elapsed() -> None:
    assert [format_elapsed(s) for s in (None, 0.4, 59, 61, 3599, 3600 + 125)] == ["-", "0s", "59s", "1m01s", "59m59s",
                                                                                     "1h02m"]


def test_live_view_routes_messages_and_draws_the_store(engine: Engine) -> None:
    ids = _campaign(engine, "c", ["a", "b"])
    _set_cell(engine, ids["a"], "running", time.time())
    out = io.StringIO()
    view = LiveProgress(engine, ids[""], ["a", "b"], "c", 10.0, stream=out, refresh_s=0.05)
    with view:
        view.log("b: waiting for budget")
        view.log("terminated local node n1: it carried this campaign's tag but no open attempt knew it")
    text = ANSI.sub("", out.getvalue())  # not a terminal: the table is drawn once, when the view stops
    assert re.search(r"^\d\d:\d\d:\d\d terminated local node n1", text, re.M), text
    assert "waiting for budget" in row_of(text, "│ b ") and "running" in row_of(text, "│ a "), text
    assert "b: waiting" not in text, "a cell's message is its row's last event"
    view.log("after the view: a plain line")  # goes to stderr; the view is stopped and must not draw
    assert "after the view" not in out.getvalue()


# -- the table at a terminal's width ---------------------------------------------------------

WIDE_ROWS = [
    CellRow(key="runpod:NVIDIA-H100-80GB-HBM3x8:on-demand:NCCL_ALGO=Ring", state="provisioning", attempt=2,
            elapsed_s=125, spent_usd=1.5, last_event="profile: sample step 41", steps_done=38, steps_total=80,
            eta_s=72),
    CellRow(key="vastai:H100_SXMx8:spot", state="preempted", attempt=1, elapsed_s=30, spent_usd=0.25,
            last_event="preempted: the host reclaimed it", steps_done=None, steps_total=80),
]


def drawn(width: int) -> list[str]:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(render_table(WIDE_ROWS, "campaign c", width))
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 120])
def test_table_fits_the_width_and_keeps_key_state_and_steps(width: int) -> None:
    lines = drawn(width)
    assert max(len(line) for line in lines) <= width, "\n".join(lines)
    header = next(line for line in lines if "state" in line)
    assert [c for c in ("cell", "state", "steps", "elapsed") if c not in header] == [], header
    first = next(line for line in lines if line.startswith("│ runpod:"))
    assert " provisioning " in first and " 38/80 ~1m12s " in first, first
    second = next(line for line in lines if line.startswith("│ vastai:H100_SXMx8:spot "))  # short keys stay whole
    assert " preempted " in second and " 0/80 " in second, second
    if width == 80:
        assert "…" in first, "the long key is ellipsized, not the state or the steps"
    else:
        assert [c for c in ("attempt", "spent", "last event") if c not in header] == [], header
        assert "profile: sample step 41" in first and "preempted: the host" in second


def test_step_rates_count_timed_steps_and_time_the_rest() -> None:
    def sample(attempt: int, t: float, timed_index: int | None) -> Event:
        return Event(cell_id=1, attempt_id=attempt, line=0, t=t, kind="sample", phase="profile",
                     data_json=f'{{"timed_index": {"null" if timed_index is None else timed_index}}}')

    rates = StepRates()
    rates.observe(1, sample(7, 100.0, None))  # warmup: nothing timed yet
    assert (rates.done(1), rates.eta_s(1, 80)) == (None, None)
    rates.observe(1, sample(7, 110.0, 9))
    assert (rates.done(1), rates.eta_s(1, 80)) == (10, None), "one step seen: no rate yet"
    rates.observe(1, sample(7, 130.0, 19))  # 10 steps in 20 s: 2 s a step
    assert rates.done(1) == 20
    assert rates.eta_s(1, 80) == pytest.approx(120.0)
    rates.observe(1, sample(8, 500.0, 20))  # a new attempt continues the count; its rate starts afresh
    assert (rates.done(1), rates.eta_s(1, 80)) == (21, None)
    rates.observe(1, sample(8, 501.0, 30))
    assert rates.eta_s(1, 80) == pytest.approx(49 * 0.1)
