"""``benchctl down [NAME|--all]``: terminate every node of a campaign and close its attempts."""

from __future__ import annotations

import click

from benchctl.cli.state import CliState, pass_state, progress


@click.command()
@click.argument("name", required=False)
@click.option("--all", "all_campaigns", is_flag=True, help="Every campaign in the store.")
@pass_state
def down(state: CliState, name: str | None, all_campaigns: bool) -> None:
    """Terminate every node of campaign NAME (or of --all campaigns), close their attempts and cancel
    the unfinished cells. Safe to run while a controller runs the campaign: it stops too."""
    from benchctl.cli.campaign_commands import stored_campaign
    from benchctl.errors import BenchctlError, CampaignNotFound, UsageError
    from benchctl.providers import Providers
    from benchctl.run_context import campaign_tag
    from benchctl.settings import home
    from benchctl.spec import Campaign
    from benchctl.teardown import down_campaign
    from benchctl.terminal_text import clean
    from store import queries as q

    if (name is None) == (not all_campaigns):
        raise UsageError("name one campaign (`benchctl down NAME`) or pass --all; `benchctl status` lists them")
    engine = state.engine()
    rows = [r for r in q.campaigns(engine, name) if r.kind != "imported"]  # imports rent nothing
    if name is not None and not rows:
        raise CampaignNotFound(f"no campaign named {name!r} in the store; `benchctl status` lists them")
    failures = []
    for row in rows:
        assert row.id is not None
        campaign = stored_campaign(row, Campaign)
        providers = Providers(home(), campaign.spec.providers)
        report = down_campaign(engine, row.id, campaign_tag(row.name, row.uid),
                               {c.provider for c in campaign.cells}, providers, progress)
        click.echo(f"campaign {clean(row.name)}: terminated {len(report.terminated)} node(s), closed "
                   f"{report.closed_attempts} attempt(s), cancelled {report.cancelled_cells} cell(s); "
                   f"`benchctl resume {row.name}` continues it")
        failures += report.failures
    if failures:
        raise BenchctlError("could not terminate: " + "; ".join(failures) +
                            ". Run `benchctl down` again, or terminate them at the provider")
