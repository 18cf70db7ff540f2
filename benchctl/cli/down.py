"""``benchctl down [NAME|--all]``: terminate every node of a campaign and close its attempts."""

from __future__ import annotations

import click

from benchctl.cli.options import CliState, pass_state, progress


@click.command()
@click.argument("name", required=False)
@click.option("--all", "all_campaigns", is_flag=True, help="Every campaign in the store (asks first).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before --all (needed when stdin is not a terminal).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table",
              show_default=True, help="json: one object with what was stopped per campaign, for scripts.")
@pass_state
def down(state: CliState, name: str | None, all_campaigns: bool, yes: bool, fmt: str) -> None:
    """Terminate every node of campaign NAME (or of --all campaigns), close their attempts and cancel
    the unfinished cells. Safe to run while a controller runs the campaign: it stops too.

    --all lists the campaigns and asks before it stops them (the store may be shared); without a
    terminal to ask on it refuses (exit 2) unless --yes is given."""
    from benchctl.engine.prepare import stored_campaign
    from benchctl.engine.providers import Providers
    from benchctl.engine.run_context import campaign_tag
    from benchctl.engine.teardown import down_campaign
    from benchctl.errors import BenchctlError, CampaignNotFound, UsageError
    from benchctl.home import home
    from benchctl.store import queries as q
    from benchctl.terminal_text import clean

    if (name is None) == (not all_campaigns):
        raise UsageError("name one campaign (`benchctl down NAME`) or pass --all; `benchctl status` lists them")
    engine = state.engine()
    rows = [r for r in q.campaigns(engine, name) if r.kind != "imported"]  # imports rent nothing
    if name is not None and not rows:
        raise CampaignNotFound(f"no campaign named {name!r} in the store; `benchctl status` lists them")
    if all_campaigns and rows and not yes:
        _confirm_all([r.name for r in rows])
    failures = []
    done: list[dict[str, object]] = []
    for row in rows:
        assert row.id is not None
        campaign = stored_campaign(row)
        providers = Providers(home(), campaign.spec.providers)
        report = down_campaign(engine, row.id, campaign_tag(row.name, row.uid),
                               {c.provider for c in campaign.cells}, providers, progress)
        done.append({"name": row.name, "terminated": report.terminated, "closed_attempts": report.closed_attempts,
                     "cancelled_cells": report.cancelled_cells, "failures": report.failures})
        if fmt == "table":
            complete = all(c.state == "done" for c in q.cells(engine, row.id))
            after = (f"the campaign is complete: `benchctl leaderboard --campaign {row.name}`" if complete
                     else f"`benchctl resume {row.name}` continues it")
            click.echo(f"campaign {clean(row.name)}: terminated {len(report.terminated)} node(s), closed "
                       f"{report.closed_attempts} attempt(s), cancelled {report.cancelled_cells} cell(s); {after}")
        failures += report.failures
    if fmt == "json":
        from benchctl.report.render import render

        click.echo(render([], [], "json", payload={"campaigns": done}))
    if failures:
        raise BenchctlError("could not terminate: " + "; ".join(failures) +
                            ". Run `benchctl down` again, or terminate them at the provider")


def _confirm_all(names: list[str]) -> None:
    """Ask before ``down --all`` stops every campaign in the store; refuse without a terminal to ask on."""
    from benchctl.errors import UsageError
    from benchctl.terminal_text import clean

    shown = ", ".join(clean(n) for n in names)
    if not _stdin_is_terminal():
        raise UsageError(f"`down --all` would stop {len(names)} campaign(s) ({shown}) and cannot ask here (stdin "
                         "is not a terminal): pass --yes to stop them all, or name one campaign")
    if not click.confirm(f"stop {len(names)} campaign(s): {shown}?", default=False, err=True):
        click.echo("nothing stopped", err=True)
        raise click.exceptions.Exit(1)


def _stdin_is_terminal() -> bool:
    import sys

    return sys.stdin.isatty()
