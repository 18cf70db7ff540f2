"""``benchctl leaderboard``: cost-to-train per cell across campaigns, cheapest first."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from benchctl.cli.state import CliState, pass_state

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from benchctl.leaderboard import Filters

_FORMATS = click.Choice(["table", "json", "csv", "md"])


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
