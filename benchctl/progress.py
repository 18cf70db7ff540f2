"""What ``run``/``resume`` show while cells run: one interface, two renderers.

``PlainProgress`` prints one ``HH:MM:SS <message>`` line per message on stderr: stable and
parseable (scripts and tests read it). ``LiveProgress`` draws a rich table on stderr, redrawn
twice a second, one row per cell: key, state, attempt, elapsed, spent, last event. A message
``"<cell key>: ..."`` becomes that cell's last event; other messages print above the table.
Cell threads only call ``log`` (it queues under a lock); one refresh thread reads the store
(``store.queries.progress_snapshot``) and draws. Use either as a context manager around the
run: leaving it (normally, on Ctrl-C, on an error) stops the table and leaves it on screen.
``pick_progress`` chooses live when stdout and stderr are terminals, unless
``BENCHCTL_PROGRESS=plain``. Messages and event texts come from nodes too: both renderers print
them without escape sequences or control characters (``terminal_text.clean``), as plain text.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

import click

from benchctl.cell_states import CellState
from benchctl.terminal_text import clean
from store import queries as q

if TYPE_CHECKING:
    from rich.live import Live
    from rich.table import Table
    from sqlalchemy.engine import Engine

    from store.models import Event

COLUMNS = ("cell", "state", "attempt", "elapsed", "spent", "last event")
FINISHED = {CellState.DONE.value, CellState.FAILED.value, CellState.CANCELLED.value}
_STYLES = {state.value: style for state, style in ((CellState.DONE, "green"), (CellState.FAILED, "red"),
                                                   (CellState.CANCELLED, "yellow"), (CellState.BAD_NODE, "red"),
                                                   (CellState.PREEMPTED, "yellow"))}


def print_line(line: str) -> None:
    """A progress line on stderr (stdout carries results)."""
    click.echo(f"{time.strftime('%H:%M:%S')} {clean(line)}", err=True)


class Progress:
    """A run's progress view. ``log`` may be called from any thread; leaving the context stops it."""

    def log(self, line: str) -> None:
        print_line(line)

    def hard_exit(self) -> None:
        """The process is about to ``os._exit``: leave the terminal usable; no locks taken."""

    def stop(self) -> None:
        """End the view; idempotent."""

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class PlainProgress(Progress):
    """One timestamped line per message (the output when stdout is not a terminal)."""


@dataclass(frozen=True)
class Note:
    t: float
    text: str


@dataclass(frozen=True)
class CellRow:
    key: str
    state: str
    attempt: int | None
    """The number of the cell's newest attempt."""
    elapsed_s: float | None
    """From the launch of the cell's first attempt of this run (one launched, or still open, at or
    after ``since``) to now, or to the cell's last state change once it is finished."""
    spent_usd: float
    """Every attempt of the cell: closed ones at their cost, open ones up to now."""
    last_event: str


def cell_rows(snapshot: q.ProgressSnapshot, keys: Sequence[str], notes: dict[str, Note], now: float,
              since: float) -> list[CellRow]:
    """One row per cell of ``keys`` (in that order) that the store holds."""
    by_key = {c.key: c for c in snapshot.cells}
    rows = []
    for key in keys:
        cell = by_key.get(key)
        if cell is None or cell.id is None:
            continue
        attempts = [a for a in snapshot.attempts if a.cell_id == cell.id]
        this_run = [a.launched_at for a in attempts
                    if a.launched_at is not None and (a.open or (a.terminated_at or 0.0) >= since)]
        elapsed = None
        if this_run:
            finished = cell.state in FINISHED and not any(a.open for a in attempts)
            elapsed = max(0.0, (cell.updated_at if finished else now) - min(this_run))
        rows.append(CellRow(key=key, state=cell.state, attempt=max((a.number for a in attempts), default=None),
                            elapsed_s=elapsed, spent_usd=sum(q.attempt_spent(a, now) for a in attempts),
                            last_event=_last_event(snapshot.latest_events.get(cell.id), notes.get(key))))
    return rows


def _last_event(event: Event | None, note: Note | None) -> str:
    if event is None or (note is not None and note.t >= event.t):
        return note.text if note is not None else ""
    data = json.loads(event.data_json)
    parts = [f"{event.phase}:" if event.phase else "", event.kind]
    if data.get("step") is not None:
        parts.append(f"step {data['step']}" + (" (warmup)" if data.get("warmup") else ""))
    for field in ("name", "status", "message"):
        if data.get(field):
            parts.append(str(data[field]))
    if data.get("exit_code") is not None:
        parts.append(f"exit {data['exit_code']}")
    return " ".join(p for p in parts if p)


def format_elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s" if rest >= 60 else f"{rest}s"


def format_usd(value: float) -> str:
    return f"${value:.2f}" if value >= 1 else f"${value:.4f}"


def render_table(rows: Sequence[CellRow], title: str) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(clean(title)), title_justify="left", expand=True)  # the last event takes what is left
    for column in COLUMNS:
        numeric = column in ("attempt", "elapsed", "spent")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True, overflow="ellipsis",
                         ratio=1 if column == "last event" else None, min_width=12 if column == "state" else None)
    for row in rows:
        table.add_row(Text(clean(row.key)), Text(clean(row.state), style=_STYLES.get(row.state, "")),
                      "-" if row.attempt is None else str(row.attempt), format_elapsed(row.elapsed_s),
                      format_usd(row.spent_usd), Text(clean(row.last_event)))
    return table


class LiveProgress(Progress):
    """A rich live table on a terminal; see the module docstring."""

    def __init__(self, engine: Engine, campaign_id: int, keys: Sequence[str], name: str, budget_usd: float,
                 stream: TextIO | None = None, refresh_s: float = 0.5) -> None:
        from rich.console import Console

        self._engine, self._campaign_id, self._keys = engine, campaign_id, list(keys)
        self._name, self._budget = name, budget_usd
        self._by_length = sorted(self._keys, key=len, reverse=True)
        self._console = Console(file=stream or sys.stderr, highlight=False)
        self._refresh_s = refresh_s
        self._lock = threading.Lock()  # guards _notes, _lines, _live
        self._draw = threading.Lock()  # one redraw at a time
        self._notes: dict[str, Note] = {}
        self._lines: list[str] = []
        self._snapshot: q.ProgressSnapshot | None = None
        self._live: Live | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._since = time.time()

    def __enter__(self) -> LiveProgress:
        self.start()
        return self

    def start(self) -> None:
        from rich.live import Live

        self._since = time.time()
        live = Live(console=self._console, auto_refresh=False, transient=False)
        with self._lock:
            self._live = live
        live.start()
        self._redraw()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._thread.start()

    def log(self, line: str) -> None:
        line = clean(line)
        key = next((k for k in self._by_length if line.startswith(f"{k}: ")), None)
        with self._lock:
            if self._live is not None:
                if key is not None:
                    self._notes[key] = Note(time.time(), line[len(key) + 2:])
                else:
                    self._lines.append(f"{time.strftime('%H:%M:%S')} {line}")
                return
        print_line(line)

    def stop(self) -> None:
        if self._thread is not None:
            self._stopping.set()
            self._thread.join(timeout=10)
            self._thread = None
        if self._live is not None:
            with contextlib.suppress(OSError):  # a terminal that hung up (SIGHUP) must not mask why the run ended
                self._redraw()
            with self._lock:
                live, self._live = self._live, None
            assert live is not None
            with contextlib.suppress(OSError):
                live.stop()

    def hard_exit(self) -> None:
        out = self._console.file
        out.write("\x1b[?25h\n")  # the cursor back (Live hid it), below the table
        for line in list(self._lines):
            out.write(line + "\n")
        out.flush()

    def _loop(self) -> None:
        while not self._stopping.wait(self._refresh_s):
            try:
                self._redraw()
            except OSError:  # the terminal is gone: nothing more to draw on
                return

    def _redraw(self) -> None:
        with self._draw:
            with self._lock:
                live, lines, notes = self._live, self._lines, dict(self._notes)
                self._lines = []
            if live is None:
                return
            for line in lines:
                live.console.print(line, markup=False, highlight=False, soft_wrap=True)
            with contextlib.suppress(Exception):  # a busy or unreachable store: keep the last table, try again
                self._snapshot = q.progress_snapshot(self._engine, self._campaign_id)
            if self._snapshot is None:
                return
            now = time.time()
            rows = cell_rows(self._snapshot, self._keys, notes, now, self._since)
            spent = sum(q.attempt_spent(a, now) for a in self._snapshot.attempts)
            live.update(render_table(rows, f"campaign {self._name}: spent {format_usd(spent)} of budget "
                                           f"{format_usd(self._budget)}"), refresh=True)


def pick_progress(engine: Engine, campaign_id: int, keys: Sequence[str], name: str, budget_usd: float) -> Progress:
    """Live on a terminal (stdout and stderr both), plain otherwise or with ``BENCHCTL_PROGRESS=plain``."""
    if os.environ.get("BENCHCTL_PROGRESS", "").strip().lower() == "plain":
        return PlainProgress()
    if not (sys.stdout.isatty() and sys.stderr.isatty()):
        return PlainProgress()
    return LiveProgress(engine, campaign_id, keys, name, budget_usd)
