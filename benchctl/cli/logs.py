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
@pass_state
def logs(state: CliState, cell: str, campaign: str | None, number: int | None, follow: bool, lines: int) -> None:
    """The attempts of cell CELL (its key, as `benchctl status` shows it) with how and why each ended,
    then the events the chosen attempt's node reported (stored by the controller as the run goes)
    and the end of its payload.log when the controller brought it home."""
    from benchctl.errors import UsageError
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
    reason = f" ({clean(row.reason)})" if row.reason else ""
    click.echo(f"campaign {clean(camp.name)}, cell {clean(row.key)}: {row.state}{reason}")
    for a in attempts:
        click.echo(_attempt_line(a))
    if not attempts:
        click.echo("no attempts yet")
        return
    chosen = attempts[-1] if number is None else next((a for a in attempts if a.number == number), None)
    if chosen is None:
        raise UsageError(f"cell {cell!r} has no attempt {number} (it has 1..{len(attempts)})")
    assert chosen.id is not None
    click.echo(f"events of attempt {chosen.number}:")
    last = _print_events(q.iter_attempt_events(engine, chosen.id))
    if not follow:
        if last < 0:
            click.echo("  (none stored)")
        _print_log_tail(camp.name, row.key, chosen.number, lines)
        return
    try:
        while q.attempt_row(engine, chosen.id).open:
            time.sleep(POLL_S)
            last = max(last, _print_events(q.iter_attempt_events(engine, chosen.id, last)))
        _print_events(q.iter_attempt_events(engine, chosen.id, last))  # what the controller stored as it closed
        click.echo(_attempt_line(q.attempt_row(engine, chosen.id)))
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


def _print_events(rows: Iterable[Event]) -> int:
    """Print each event as one line as it is read (``rows`` may be a stream); return the last line
    number printed (-1 for none). A stored event that cannot be shown is one line naming it."""
    last = -1
    for e in rows:
        click.echo(_event_line(e))
        last = e.line if isinstance(e.line, int) else last
    return last


def _event_line(e: Event) -> str:
    """One event as a line: time, kind, phase, its fields (the summary of dropped lines: its message)."""
    from benchctl.store.queries import DROPPED_KIND
    from benchctl.terminal_text import clean

    try:
        stamp = datetime.fromtimestamp(e.t, timezone.utc).strftime("%H:%M:%S")
        phase = f" [{e.phase}]" if e.phase else ""
        try:
            data = json.loads(e.data_json)
        except ValueError:
            data = e.data_json
        if isinstance(data, dict) and e.kind == DROPPED_KIND:
            body = str(data.get("message", ""))
        elif isinstance(data, dict):
            body = " ".join(f"{k}={_short(v)}" for k, v in data.items())
        else:
            body = _short(data)
        return clean(f"  {stamp} {e.kind}{phase} {body}").rstrip()
    except (ValueError, TypeError, OverflowError, OSError, RecursionError) as exc:
        return clean(f"  line {e.line}: stored event not shown ({type(exc).__name__}: {str(exc)[:120]})")


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 200 else text[:197] + "..."
