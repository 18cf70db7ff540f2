"""What ``run``/``resume`` show while cells run: one interface, two renderers.

``PlainProgress`` prints one ``HH:MM:SS <message>`` line per message on stderr: stable and
parseable (scripts and tests read it). ``LiveProgress`` draws a rich table on stderr, redrawn
twice a second, one row per cell: key, state, profile steps ``done/total`` with an ETA from the step
rate seen so far, elapsed, spent, attempt, last event; columns that do not fit the terminal's width
are left out from the right of that order (at 80 columns: key, state, steps, elapsed, spent). A message
``"<cell key>: ..."`` becomes that cell's last event; other messages print above the table.
Cell threads only call ``log`` (it queues under a lock); one refresh thread reads the store
(``benchctl.store.queries.progress_snapshot``) and draws. Use either as a context manager around the
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

from benchctl.engine.cell_states import CellState
from benchctl.store import queries as q
from benchctl.terminal_text import clean
from benchctl.terminal_wrap import terminal_lines

if TYPE_CHECKING:
    from rich.live import Live
    from rich.table import Table
    from sqlalchemy.engine import Engine

    from benchctl.store.models import Event

COLUMNS = ("cell", "state", "steps", "elapsed", "spent", "attempt", "last event")
"""In the order they are kept: the first three always; the others while the width allows."""
MIN_KEY_WIDTH = 24
MIN_EVENT_WIDTH = 16
FINISHED = {CellState.DONE.value, CellState.FAILED.value, CellState.CANCELLED.value}
_STYLES = {state.value: style for state, style in ((CellState.DONE, "green"), (CellState.FAILED, "red"),
                                                   (CellState.CANCELLED, "yellow"), (CellState.BAD_NODE, "red"),
                                                   (CellState.PREEMPTED, "yellow"))}


def print_line(line: str) -> None:
    """A progress line on stderr (stdout carries results), wrapped to the terminal's width there
    with later lines under the text, not the time."""
    click.echo(terminal_lines(f"{time.strftime('%H:%M:%S')} {clean(line)}", " " * 9, sys.stderr), err=True)


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
    steps_done: int | None = None
    """Timed profile steps recorded (over all attempts), once the profile reported one."""
    steps_total: int | None = None
    eta_s: float | None = None
    """Time left for the remaining steps at the step rate seen so far; None until a rate is known."""


@dataclass
class _Rate:
    """The first and the newest timed step seen of one attempt (index, event time)."""

    attempt_id: int
    first: tuple[int, float]
    last: tuple[int, float]


class StepRates:
    """Profile progress per cell from the newest events the refreshes see: the newest timed step's
    ``timed_index``, and the rate between the first and the newest timed steps seen of the same
    attempt (event times, so a slow refresh does not skew it)."""

    def __init__(self) -> None:
        self._rates: dict[int, _Rate] = {}
        self._done: dict[int, int] = {}

    def observe(self, cell_id: int, event: Event | None) -> None:
        if event is None or event.kind != "sample" or event.phase != "profile":
            return
        index = json.loads(event.data_json).get("timed_index")
        if not isinstance(index, int):
            return  # a warmup step
        self._done[cell_id] = index + 1
        rate = self._rates.get(cell_id)
        if rate is None or rate.attempt_id != event.attempt_id or index < rate.last[0]:
            self._rates[cell_id] = _Rate(event.attempt_id, (index, event.t), (index, event.t))
        else:
            rate.last = (index, event.t)

    def done(self, cell_id: int) -> int | None:
        return self._done.get(cell_id)

    def eta_s(self, cell_id: int, total: int) -> float | None:
        rate, done = self._rates.get(cell_id), self._done.get(cell_id)
        if rate is None or done is None or rate.last[0] <= rate.first[0] or rate.last[1] <= rate.first[1]:
            return None
        per_step = (rate.last[1] - rate.first[1]) / (rate.last[0] - rate.first[0])
        return max(0, total - done) * per_step


def cell_rows(snapshot: q.ProgressSnapshot, keys: Sequence[str], notes: dict[str, Note], now: float,
              since: float, steps_total: int | None = None, rates: StepRates | None = None) -> list[CellRow]:
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
        event = snapshot.latest_events.get(cell.id)
        done, eta = None, None
        if rates is not None:
            rates.observe(cell.id, event)
            done = rates.done(cell.id)
            if cell.state == CellState.DONE.value and steps_total is not None:
                done = steps_total
            if done is not None and steps_total is not None and cell.state not in FINISHED:
                eta = rates.eta_s(cell.id, steps_total)
        rows.append(CellRow(key=key, state=cell.state, attempt=max((a.number for a in attempts), default=None),
                            elapsed_s=elapsed, spent_usd=sum(q.attempt_spent(a, now) for a in attempts),
                            last_event=_last_event(event, notes.get(key)), steps_done=done, steps_total=steps_total,
                            eta_s=eta))
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


def format_steps(row: CellRow) -> str:
    """``38/80 ~1m12s``: timed profile steps done of the total, and the time left when a rate is known."""
    if row.steps_total is None:
        return "-" if row.steps_done is None else str(row.steps_done)
    text = f"{row.steps_done or 0}/{row.steps_total}"
    return text if row.eta_s is None else f"{text} ~{format_elapsed(row.eta_s)}"


def render_table(rows: Sequence[CellRow], title: str, width: int = 120) -> Table:
    """The table for a terminal ``width`` columns wide: key (ellipsized to fit), state and steps always;
    elapsed, spent, attempt and the last event while they fit, in that order; with the last event shown, the key
    and it share what is left."""
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text

    cells: dict[str, list[Text]] = {
        "cell": [Text(clean(r.key)) for r in rows],
        "state": [Text(clean(r.state), style=_STYLES.get(r.state, "")) for r in rows],
        "steps": [Text(format_steps(r)) for r in rows],
        "elapsed": [Text(format_elapsed(r.elapsed_s)) for r in rows],
        "attempt": [Text("-" if r.attempt is None else str(r.attempt)) for r in rows],
        "spent": [Text(format_usd(r.spent_usd)) for r in rows],
        "last event": [Text(clean(r.last_event)) for r in rows],
    }
    natural = {c: max([cell_len(c), *(t.cell_len for t in cells[c])]) for c in COLUMNS}
    key_width = min(natural["cell"], MIN_KEY_WIDTH)

    def room(columns: list[str]) -> int:
        """What is left for the key column (and the last event) with ``columns`` shown: rich's heavy-head
        box takes 1 border character per column plus 1, and pads each cell by 1 on either side."""
        return width - (3 * len(columns) + 1) - sum(natural[c] for c in columns if c not in ("cell", "last event"))

    shown = ["cell", "state", "steps"]
    for column in COLUMNS[3:]:
        need = key_width + (MIN_EVENT_WIDTH if column == "last event" else 0)
        if room([*shown, column]) >= need:
            shown.append(column)
    left = room(shown)
    key_width = max(1, min(natural["cell"], max(key_width, left // 2) if "last event" in shown else left))
    event_width = left - key_width

    table = Table(title=Text(clean(title)), title_justify="left")
    for column in shown:
        numeric = column in ("steps", "attempt", "elapsed", "spent")
        fixed = key_width if column == "cell" else event_width if column == "last event" else natural[column]
        table.add_column(column, justify="right" if numeric else "left", no_wrap=True, overflow="ellipsis",
                         width=fixed)
    for i in range(len(rows)):
        table.add_row(*(cells[c][i] for c in shown))
    return table


class LiveProgress(Progress):
    """A rich live table on a terminal; see the module docstring."""

    def __init__(self, engine: Engine, campaign_id: int, keys: Sequence[str], name: str, budget_usd: float,
                 stream: TextIO | None = None, refresh_s: float = 0.5, steps_total: int | None = None) -> None:
        from rich.console import Console

        self._engine, self._campaign_id, self._keys = engine, campaign_id, list(keys)
        self._name, self._budget = name, budget_usd
        self._by_length = sorted(self._keys, key=len, reverse=True)
        self._console = Console(file=stream or sys.stderr, highlight=False)
        self._refresh_s = refresh_s
        self._steps_total = steps_total
        self._rates = StepRates()
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
            rows = cell_rows(self._snapshot, self._keys, notes, now, self._since, self._steps_total, self._rates)
            spent = sum(q.attempt_spent(a, now) for a in self._snapshot.attempts)
            live.update(render_table(rows, f"campaign {self._name}: spent {format_usd(spent)} of budget "
                                           f"{format_usd(self._budget)}", self._console.width), refresh=True)


def pick_progress(engine: Engine, campaign_id: int, keys: Sequence[str], name: str, budget_usd: float,
                  steps_total: int | None = None) -> Progress:
    """Live on a terminal (stdout and stderr both), plain otherwise or with ``BENCHCTL_PROGRESS=plain``.
    ``steps_total``: the timed profile steps of each cell (None when the campaign does not profile)."""
    if os.environ.get("BENCHCTL_PROGRESS", "").strip().lower() == "plain":
        return PlainProgress()
    if not (sys.stdout.isatty() and sys.stderr.isatty()):
        return PlainProgress()
    return LiveProgress(engine, campaign_id, keys, name, budget_usd, steps_total=steps_total)
