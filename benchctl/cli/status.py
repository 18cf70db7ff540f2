"""``benchctl status [NAME]``: cells, their states and attempts, and money spent."""

from __future__ import annotations

from typing import Any

import click

from benchctl.cli.options import CliState, pass_state


@click.command()
@click.argument("name", required=False)
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table",
              show_default=True)
@click.option("--watch", is_flag=True, help="Print it again every --interval seconds, until Ctrl-C.")
@click.option("--interval", "-n", type=click.FloatRange(min=0.1), default=2.0, show_default=True, metavar="SECONDS",
              help="Seconds between refreshes with --watch.")
@pass_state
def status(state: CliState, name: str | None, fmt: str, watch: bool, interval: float) -> None:
    """Cells, their states and attempts, the controller running each (alive or dead, since when),
    and money spent (of campaign NAME, or all)."""
    import time

    if not watch:
        _status_once(state, name, fmt)
        return
    try:
        while True:
            if fmt == "table":
                click.clear()
                click.echo(f"every {interval:g}s (Ctrl-C stops): benchctl status{' ' + name if name else ''}  "
                           f"{time.strftime('%H:%M:%S')}")
            _status_once(state, name, fmt)
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def _status_once(state: CliState, name: str | None, fmt: str) -> None:
    import time

    from benchctl.errors import CampaignNotFound
    from benchctl.report.render import render
    from benchctl.store import queries as q
    from benchctl.terminal_text import clean

    engine = state.engine()
    campaigns = q.campaigns(engine, name)
    if name is not None and not campaigns:
        raise CampaignNotFound(f"no campaign named {name!r} in the store; `benchctl status` lists them")
    report: list[dict[str, Any]] = []
    for camp in campaigns:
        assert camp.id is not None
        spent = q.spent_usd(engine, camp.id)
        by_outcome = q.spent_by_outcome(engine, camp.id)
        now = time.time()
        cells = []
        for c in q.cells(engine, camp.id):
            tries = q.attempts(engine, c.id or 0)
            cells.append({"key": c.key, "state": c.state, "attempts": len(tries),
                          **_controller(c.lease_owner if (c.lease_expires_at or 0) > now else None),
                          "reason": c.reason or _failure(tries)})
        report.append({"name": camp.name, "budget_usd": camp.budget_usd, "spent_usd": spent,
                       "remaining_usd": camp.budget_usd - spent, "spent_by_outcome_usd": by_outcome,
                       "bad_node_spent_usd": by_outcome.get("bad_node", 0.0), "cells": cells})
    if fmt == "json":
        click.echo(render([], [], "json", payload={"campaigns": report}))
        return
    if not report:
        click.echo("no campaigns yet: start one with `benchctl run FILE`")
    for camp_report in report:
        click.echo(f"campaign {clean(camp_report['name'])}: spent ${camp_report['spent_usd']:.4f} of "
                   f"${camp_report['budget_usd']:.2f}, ${camp_report['remaining_usd']:.4f} remaining "
                   f"(${camp_report['bad_node_spent_usd']:.4f} on nodes that failed preflight)")
        rows = [{**c, "controller": c["controller_text"]} for c in camp_report["cells"]]
        click.echo(render(rows, ["key", "state", "attempts", "controller", "reason"], "table"))


def _failure(tries: list[Any]) -> str | None:
    """Why the newest closed attempt failed (``outcome: detail``), None when it did not fail."""
    closed = [a for a in tries if not a.open]
    if not closed or closed[-1].outcome in (None, "done"):
        return None
    last = closed[-1]
    return f"attempt {last.number} {last.outcome}" + (f": {last.detail}" if last.detail else "")


def _controller(owner: str | None) -> dict[str, Any]:
    """The cell's controller: its id, whether its process is alive (None: another host), since when."""
    from benchctl.engine.lease import holder

    if owner is None:
        return {"controller": None, "controller_alive": None, "controller_since": None, "controller_text": None}
    who = holder(owner)
    return {"controller": owner, "controller_alive": who.alive, "controller_since": who.since,
            "controller_text": who.describe()}
