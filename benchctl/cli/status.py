"""``benchctl status [NAME]``: cells, their states and attempts, and money spent."""

from __future__ import annotations

from typing import Any

import click

from benchctl.cli.options import CliState, pass_state

LISTED = 40
"""Cells listed per campaign without ``--all``: every cell of a campaign this small, else this many
of those that need attention (``ATTENTION``, in its order)."""
ATTENTION = ("failed", "bad_node", "preempted", "provisioning", "preflight", "running", "collecting", "cancelled")
"""States that need a look, most urgent first; ``done`` and ``pending`` cells are only counted."""


@click.command()
@click.argument("name", required=False)
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table",
              show_default=True)
@click.option("--watch", is_flag=True, help="Print it again every --interval seconds, until Ctrl-C.")
@click.option("--all", "every", is_flag=True, help=f"List every cell (default: every cell up to {LISTED}, "
              "else a count per state and the cells that need attention).")
@click.option("--interval", "-n", type=click.FloatRange(min=0.1), default=2.0, show_default=True, metavar="SECONDS",
              help="Seconds between refreshes with --watch.")
@pass_state
def status(state: CliState, name: str | None, fmt: str, watch: bool, every: bool, interval: float) -> None:
    """Cells, their states and attempts, the controller running each (alive or dead, since when),
    and money spent (of campaign NAME, or all). A large campaign shows a count per state and the
    cells that need attention (failed, bad node, running, …); --all lists every cell."""
    import time

    if not watch:
        _status_once(state, name, fmt, every)
        return
    try:
        while True:
            if fmt == "table":
                click.clear()
                click.echo(f"every {interval:g}s (Ctrl-C stops): benchctl status{' ' + name if name else ''}  "
                           f"{time.strftime('%H:%M:%S')}")
            _status_once(state, name, fmt, every)
            time.sleep(interval)
    except KeyboardInterrupt:
        return


def _status_once(state: CliState, name: str | None, fmt: str, every: bool = False) -> None:
    import time

    from benchctl.errors import CampaignNotFound
    from benchctl.report.render import render, terminal_lines
    from benchctl.store import aggregates as agg
    from benchctl.store import queries as q
    from benchctl.terminal_text import clean

    engine = state.engine()
    campaigns = q.campaigns(engine, name)
    if name is not None and not campaigns:
        raise CampaignNotFound(f"no campaign named {name!r} in the store; `benchctl status` lists them")
    report: list[dict[str, Any]] = []
    for camp in campaigns:
        assert camp.id is not None
        by_outcome = q.spent_by_outcome(engine, camp.id)
        spent = sum(by_outcome.values())
        counts = agg.cell_state_counts(engine, camp.id)
        total = sum(counts.values())
        whole = every or total <= LISTED
        shown = agg.listed_cells(engine, camp.id, None if whole else ATTENTION, None if whole else LISTED)
        tries = agg.attempts_by_cell(engine, camp.id, None if every else [c.id for c in shown])
        now = time.time()
        cells = []
        for c in shown:
            mine = tries.get(c.id)
            cells.append({"key": c.key, "state": c.state, "attempts": mine.count if mine else 0,
                          **_controller(c.lease_owner if (c.lease_expires_at or 0) > now else None),
                          "reason": c.reason or _failure(mine.last_closed if mine else None)})
        report.append({"name": camp.name, "budget_usd": camp.budget_usd, "spent_usd": spent,
                       "remaining_usd": camp.budget_usd - spent, "spent_by_outcome_usd": by_outcome,
                       "bad_node_spent_usd": by_outcome.get("bad_node", 0.0), "cells_total": total,
                       "cells_by_state": dict(sorted(counts.items())), "cells_not_listed": total - len(cells),
                       "cells": cells})
    if fmt == "json":
        click.echo(render([], [], "json", payload={"campaigns": report}))
        return
    if not report:
        click.echo("no campaigns yet: start one with `benchctl run FILE`")
    for camp_report in report:
        click.echo(terminal_lines(f"campaign {clean(camp_report['name'])}: spent ${camp_report['spent_usd']:.4f} of "
                                  f"${camp_report['budget_usd']:.2f}, ${camp_report['remaining_usd']:.4f} remaining "
                                  f"(${camp_report['bad_node_spent_usd']:.4f} on nodes that failed preflight)", "  "))
        click.echo(state_summary(camp_report["cells_by_state"]))
        rows = [{**c, "controller": c["controller_text"]} for c in camp_report["cells"]]
        if rows:
            click.echo(render(rows, ["key", "state", "attempts", "controller", "reason"], "table"))
        if camp_report["cells_not_listed"]:
            click.echo(not_listed_line(camp_report))


def state_summary(counts: dict[str, int]) -> str:
    """``cells: 10,000 (9,400 done, 200 failed, …)``: every state with cells, in the state machine's order."""
    order = ("done", *ATTENTION, "pending")
    ranked = sorted(counts.items(), key=lambda item: (order.index(item[0]) if item[0] in order else len(order),
                                                      item[0]))
    parts = ", ".join(f"{n:,} {s}" for s, n in ranked)
    return f"cells: {sum(counts.values()):,}" + (f" ({parts})" if parts else "")


def not_listed_line(camp_report: dict[str, Any]) -> str:
    """What the listing left out, and how to see it."""
    from benchctl.terminal_text import clean

    attention = sum(n for s, n in camp_report["cells_by_state"].items() if s in ATTENTION)
    more = attention - len(camp_report["cells"])
    left = f"{more:,} more that need attention and " if more > 0 else ""
    return (f"not listed: {left}{camp_report['cells_not_listed'] - max(more, 0):,} done or pending; "
            f"`benchctl status {clean(camp_report['name'])} --all` lists every cell")


def _failure(last_closed: tuple[int, str | None, str | None] | None) -> str | None:
    """Why the newest closed attempt failed (``attempt N outcome: detail``), None when it did not fail."""
    if last_closed is None or last_closed[1] in (None, "done"):
        return None
    number, outcome, detail = last_closed
    return f"attempt {number} {outcome}" + (f": {detail}" if detail else "")


def _controller(owner: str | None) -> dict[str, Any]:
    """The cell's controller: its id, whether its process is alive (None: another host), since when."""
    from benchctl.engine.lease import holder

    if owner is None:
        return {"controller": None, "controller_alive": None, "controller_since": None, "controller_text": None}
    who = holder(owner)
    return {"controller": owner, "controller_alive": who.alive, "controller_since": who.since,
            "controller_text": who.describe()}
