"""``benchctl logs CELL``: why a cell's attempts ended, and the stored events of one of them."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import click

from benchctl.cli.options import CliState, pass_state

if TYPE_CHECKING:
    from collections.abc import Iterable

    from benchctl.store.models import Attempt, Event

POLL_S = 1.0
"""How often ``-f`` reads the store for new events."""


@click.command()
@click.argument("cell")
@click.option("--campaign", metavar="NAME", help="The campaign the cell belongs to (needed when several have it).")
@click.option("--attempt", "number", type=click.IntRange(min=1), metavar="N",
              help="Which attempt's events to show [default: the last].")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events while the attempt runs.")
@click.option("--lines", type=click.IntRange(min=0), default=40, show_default=True, metavar="N",
              help="How many of the last lines of the attempt's payload.log to show, once brought home.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table",
              show_default=True, help="json: only the events, one raw JSON object a line, as the node wrote them.")
@pass_state
def logs(state: CliState, cell: str, campaign: str | None, number: int | None, follow: bool, lines: int,
         fmt: str) -> None:
    """The attempts of cell CELL (its key, as `benchctl status` shows it) with how and why each ended,
    then the events the chosen attempt's node reported (stored by the controller as the run goes:
    time, kind, phase and a summary with rounded numbers, wrapped to the terminal) and the end of
    its payload.log when the controller brought it home."""
    from benchctl.errors import UsageError
    from benchctl.report.render import terminal_lines
    from benchctl.store import queries as q
    from benchctl.terminal_text import clean

    engine = state.engine()
    found = q.cells_by_key(engine, cell, campaign)
    if not found:
        where = f" in campaign {campaign!r}" if campaign else ""
        raise UsageError(f"no cell {cell!r}{where} in the store; `benchctl status` lists the cells")
    if len(found) > 1:
        names = ", ".join(c.name for c, _ in found)
        raise UsageError(f"cell {cell!r} is in several campaigns ({clean(names)}); pick one with --campaign NAME")
    camp, row = found[0]
    assert row.id is not None
    attempts = q.attempts(engine, row.id)
    raw = fmt.lower() == "json"
    say = (lambda _text: None) if raw else click.echo
    reason = f" ({clean(row.reason)})" if row.reason else ""
    say(terminal_lines(f"campaign {clean(camp.name)}, cell {clean(row.key)}: {row.state}{reason}", "  "))
    for a in attempts:
        say(terminal_lines(_attempt_line(a), "  "))
    if not attempts:
        say("no attempts yet")
        return
    chosen = attempts[-1] if number is None else next((a for a in attempts if a.number == number), None)
    if chosen is None:
        raise UsageError(f"cell {cell!r} has no attempt {number} (it has 1..{len(attempts)})")
    assert chosen.id is not None
    say(f"events of attempt {chosen.number}:")
    if not raw:
        say(_EVENT_HEADER)
    last = _print_events(q.iter_attempt_events(engine, chosen.id), raw)
    if not follow:
        if last < 0:
            say("  (none stored)")
        if not raw:
            _print_log_tail(camp.name, row.key, chosen.number, lines)
        return
    try:
        while q.attempt_row(engine, chosen.id).open:
            time.sleep(POLL_S)
            last = max(last, _print_events(q.iter_attempt_events(engine, chosen.id, last), raw))
        _print_events(q.iter_attempt_events(engine, chosen.id, last), raw)  # what the controller stored as it closed
        say(_attempt_line(q.attempt_row(engine, chosen.id)))
    except KeyboardInterrupt:
        return


def _print_log_tail(campaign: str, key: str, number: int, lines: int) -> None:
    """The last ``lines`` lines of the attempt's payload.log under the home's artifacts, if there."""
    from collections import deque

    from benchctl.engine.attempt_driver import cell_dir_name
    from benchctl.home import home
    from benchctl.terminal_text import clean

    path = home() / "artifacts" / campaign / cell_dir_name(key) / str(number) / "payload.log"
    if lines == 0 or not path.is_file():
        return
    with path.open(encoding="utf-8", errors="replace") as handle:
        tail = deque(handle, maxlen=lines)
    if not tail:
        return
    click.echo(f"last {len(tail)} line(s) of {path}:")
    for line in tail:
        click.echo("  " + clean(line.rstrip("\n")))


def _attempt_line(a: Attempt) -> str:
    from benchctl.terminal_text import clean

    ended = "running" if a.open else (a.outcome or "ended")
    detail = f": {clean(a.detail)}" if a.detail else ""
    cost = f"${a.cost_usd:.4f}" if a.cost_usd is not None else "-"
    return f"attempt {a.number} on {clean(a.host or '-')} ({a.provider}, {a.market}, {cost}): {ended}{detail}"


_EVENT_HEADER = f"  {'time':<8}  {'kind':<11}  {'phase':<11}  summary"
_SUMMARY_INDENT = " " * 38
_FIRST = ("name", "op", "status", "verdict", "message")
"""Fields a summary starts with, when an event has them."""


def _print_events(rows: Iterable[Event], raw: bool = False) -> int:
    """Print each event as it is read (``rows`` may be a stream): a table row, or with ``raw`` the
    event as one JSON line; return the last line number printed (-1 for none). A stored event that
    cannot be shown is one line naming it."""
    from benchctl.report.render import terminal_lines

    last = -1
    for e in rows:
        click.echo(_raw_line(e) if raw else terminal_lines(_event_line(e), _SUMMARY_INDENT))
        last = e.line if isinstance(e.line, int) else last
    return last


def _raw_line(e: Event) -> str:
    """The event as the node wrote it: t, kind, phase and its fields (stored text, if not JSON)."""
    try:
        data = json.loads(e.data_json)
    except ValueError:
        data = {"data": e.data_json}
    head = {"t": e.t, "kind": e.kind, **({"phase": e.phase} if e.phase else {})}
    try:
        return json.dumps({**head, **data} if isinstance(data, dict) else {**head, "data": data})
    except (ValueError, RecursionError):
        return json.dumps({**head, "data": e.data_json})


def _event_line(e: Event) -> str:
    """One event as a table row: time, kind, phase, a summary of its fields with rounded numbers
    and without empty ones (the summary of dropped lines: its message)."""
    from benchctl.store.queries import DROPPED_KIND
    from benchctl.terminal_text import clean

    try:
        stamp = datetime.fromtimestamp(e.t, timezone.utc).strftime("%H:%M:%S")
        try:
            data = json.loads(e.data_json)
        except ValueError:
            data = e.data_json
        if isinstance(data, dict) and e.kind == DROPPED_KIND:
            body = str(data.get("message", ""))
        elif isinstance(data, dict):
            keys = [*(k for k in _FIRST if k in data), *(k for k in data if k not in _FIRST)]
            body = " ".join(f"{k}={_short(data[k])}" for k in keys if data[k] not in (None, "", [], {}))
        else:
            body = _short(data)
        return clean(f"  {stamp:<8}  {e.kind:<11}  {e.phase or '-':<11}  {body}").rstrip()
    except (ValueError, TypeError, OverflowError, OSError, RecursionError) as exc:
        return clean(f"  line {e.line}: stored event not shown ({type(exc).__name__}: {str(exc)[:120]})")


def _rounded(value: object) -> object:
    """``value`` with every float at 4 significant digits (at any depth)."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(_rounded(value), sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."
