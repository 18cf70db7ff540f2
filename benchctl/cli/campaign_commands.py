"""``benchctl run FILE`` and ``benchctl resume [NAME]``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from benchctl.cli.state import CliState, pass_state, progress

if TYPE_CHECKING:
    from benchctl.spec import Campaign

_run_options = [
    click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
                 help="Cells run at the same time."),
    click.option("--poll-interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
                 help="Seconds between reads of a running payload's events."),
]


def _with_run_options(fn: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_run_options):
        fn = option(fn)
    return fn


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@_with_run_options
@pass_state
def run(state: CliState, file: str, concurrency: int, poll_interval: float) -> None:
    """Run (or continue) the campaign in FILE; print its leaderboard."""
    from benchctl.providers import Providers
    from benchctl.settings import home
    from benchctl.spec import load_campaign
    from store import queries as q

    campaign = load_campaign(file)
    Providers(home()).check(cell.provider for cell in campaign.cells)
    engine = state.engine()
    campaign_id, added = q.upsert_campaign(
        engine, campaign.spec.name, campaign.model_dump_json(), file, campaign.spec.budget_usd,
        [q.NewCell(key=c.key, provider=c.provider, gpu=c.gpu or str(c.instance_type), count=c.world_size,
                   market=c.market, config_json=c.model_dump_json()) for c in campaign.cells])
    if added:
        progress(f"campaign {campaign.spec.name}: {len(added)} new cell(s)")
    _execute(state, campaign, campaign_id, concurrency, poll_interval)


@click.command()
@click.argument("name", required=False)
@_with_run_options
@pass_state
def resume(state: CliState, name: str | None, concurrency: int, poll_interval: float) -> None:
    """Continue every unfinished cell (of campaign NAME, or of every campaign)."""
    from benchctl.errors import CampaignNotFound
    from benchctl.spec import Campaign
    from store import queries as q

    engine = state.engine()
    campaigns = q.campaigns(engine, name)
    if name is not None and not campaigns:
        known = ", ".join(c.name for c in q.campaigns(engine)) or "none"
        raise CampaignNotFound(f"no campaign named {name!r} in the store (known: {known}); "
                               "check the name or the --db URL")
    unfinished = [c for c in campaigns
                  if c.id is not None and any(cell.state != "done" for cell in q.cells(engine, c.id))]
    if not unfinished:
        click.echo("nothing to resume: every campaign is complete" if campaigns else "nothing to resume: the store "
                   "holds no campaign; start one with `benchctl run FILE`")
        return
    for row in unfinished:
        assert row.id is not None
        _execute(state, Campaign.model_validate_json(row.spec_json), row.id, concurrency, poll_interval)


def _execute(state: CliState, campaign: Campaign, campaign_id: int, concurrency: int, poll_interval: float) -> None:
    from benchctl.cell_runner import RunContext
    from benchctl.cli.report_commands import print_leaderboard
    from benchctl.engine import pending_cells, run_campaign
    from benchctl.errors import BenchctlError
    from benchctl.providers import Providers
    from benchctl.settings import home

    engine = state.engine()
    name = campaign.spec.name
    ctx = RunContext(engine=engine, campaign=campaign, campaign_id=campaign_id, providers=Providers(home()),
                     artifacts_dir=home() / "artifacts" / name, poll_interval_s=poll_interval, log=progress)
    if not pending_cells(ctx):
        click.echo(f"campaign {name} is complete: all {len(campaign.cells)} cells are done; nothing to run")
        print_leaderboard(engine, name, "table")
        return
    summary = run_campaign(ctx, concurrency)
    print_leaderboard(engine, name, "table")
    if not summary.complete:
        unfinished = ", ".join(f"{k} ({s})" for k, s in summary.states.items() if s != "done")
        raise BenchctlError(f"campaign {name} is not complete: {unfinished}. `benchctl status {name}` shows why; "
                            f"`benchctl resume {name}` tries again")
