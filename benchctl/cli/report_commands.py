"""``benchctl status`` and ``benchctl leaderboard``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from benchctl.cli.state import CliState, pass_state

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from benchctl.leaderboard import Filters

_FORMATS = click.Choice(["table", "json", "csv", "md"])


@click.command()
@click.argument("name", required=False)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@pass_state
def status(state: CliState, name: str | None, fmt: str) -> None:
    """Cells, their states and attempts, and money spent (of campaign NAME, or all)."""
    import time

    from benchctl.errors import CampaignNotFound
    from benchctl.render import render
    from benchctl.terminal_text import clean
    from store import queries as q

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
        cells = [{"key": c.key, "state": c.state, "attempts": len(q.attempts(engine, c.id or 0)),
                  "controller": c.lease_owner if (c.lease_expires_at or 0) > now else None,
                  "reason": c.reason} for c in q.cells(engine, camp.id)]
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
        click.echo(render(camp_report["cells"], ["key", "state", "attempts", "controller", "reason"], "table"))


@click.command()
@click.option("--campaign", "campaigns", multiple=True, help="Only this campaign (repeatable).")
@click.option("--provider", "providers", multiple=True, help="Only this provider (repeatable).")
@click.option("--market", "markets", multiple=True, type=click.Choice(["spot", "on-demand"]),
              help="Only this market (repeatable).")
@click.option("--model", "models", multiple=True, help="Only results for this target model, e.g. nanochat-d26.")
@click.option("--format", "fmt", type=_FORMATS, default="table", show_default=True)
@pass_state
def leaderboard(state: CliState, campaigns: tuple[str, ...], providers: tuple[str, ...], markets: tuple[str, ...],
                models: tuple[str, ...], fmt: str) -> None:
    """Cost-to-train per cell across campaigns, cheapest first."""
    from benchctl.errors import CampaignNotFound
    from benchctl.leaderboard import Filters
    from store import queries as q

    engine = state.engine()
    known = {c.name for c in q.campaigns(engine)}
    for name in campaigns:
        if name not in known:
            raise CampaignNotFound(f"no campaign named {name!r} in the store; `benchctl status` lists them")
    print_leaderboard(engine, Filters(campaigns=campaigns, providers=providers, markets=markets, models=models), fmt)


def print_leaderboard(engine: Engine, filters: Filters | str | None, fmt: str) -> None:
    """``filters``: a campaign name, or Filters (None: everything)."""
    from benchctl.leaderboard import COLUMNS, TABLE_COLUMNS, Filters, display_row, leaderboard_rows
    from benchctl.render import render

    if not isinstance(filters, Filters):
        filters = Filters(campaigns=[filters] if filters else [])
    rows = leaderboard_rows(engine, filters=filters)
    if fmt == "json":
        click.echo(render(rows, COLUMNS, "json"))
    elif fmt == "csv":
        click.echo(render(rows, COLUMNS, "csv"))
    elif not rows:
        click.echo("no results yet: run a campaign with `benchctl run FILE`")
    else:
        click.echo(render([display_row(r) for r in rows], TABLE_COLUMNS, fmt, title="cost-to-train"))


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--campaign", help="The campaign the imports join (default: imported); never one benchctl ran.")
@click.option("--config", "config", metavar="KEY",
              help="The cell an nccl-tests log measured (needed when the campaign has several).")
@pass_state
def import_command(state: CliState, files: tuple[Path, ...], campaign: str | None, config: str | None) -> None:
    """Import result records (.json/.yaml) and nccl-tests logs; all or nothing."""
    from benchctl.importer import import_files
    from benchctl.terminal_text import clean

    summary = import_files(state.engine(), list(files), campaign, config)
    skipped = f", skipped {summary.skipped} rows without a result" if summary.skipped else ""
    click.echo(f"imported {summary.results} results and {summary.collectives} nccl-tests logs into campaign "
               f"{clean(summary.campaign)}{skipped}; `benchctl leaderboard` ranks them")
    for line in summary.logs_read_as:
        click.echo(f"  read {clean(line)}")
