"""``benchctl run FILE`` and ``benchctl resume [NAME]``."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from benchctl.cli.options import CliState, pass_state, progress

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from benchctl.campaign.spec import Campaign
    from benchctl.engine.plan import Plan
    from benchctl.store.models import Campaign as CampaignRow

_run_options = [
    click.option("--concurrency", type=click.IntRange(min=1), default=4, show_default=True,
                 help="Cells run at the same time."),
    click.option("--poll-interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
                 help="Seconds between reads of a running payload's events."),
    click.option("--status-interval", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
                 help="Seconds between asks of the provider for each node's state (preemption), heartbeats to "
                      "the payload and budget checks."),
]


def _with_run_options(fn: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_run_options):
        fn = option(fn)
    return fn


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@_with_run_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask before a campaign whose worst-case spend is above "
              "--confirm-above.")
@click.option("--confirm-above", type=click.FloatRange(min=0), default=20.0, show_default=True,
              envvar="BENCHCTL_CONFIRM_ABOVE_USD", metavar="USD",
              help="Ask for confirmation when the worst-case spend is above this [env BENCHCTL_CONFIRM_ABOVE_USD].")
@pass_state
def run(state: CliState, file: str, concurrency: int, poll_interval: float, status_interval: float, yes: bool,
        confirm_above: float) -> None:
    """Run (or continue) the campaign in FILE; print its leaderboard."""
    from benchctl.campaign.spec import load_campaign
    from benchctl.engine.prepare import RunOptions, prepare_run, register
    from benchctl.engine.scheduler import connections_for

    state.connections = connections_for(concurrency)  # before the store opens (prepare_run opens it)
    campaign = load_campaign(file)
    prepared = prepare_run(campaign, RunOptions(open_store=state.engine, say=progress))
    _confirm_spend(prepared.plan, campaign.spec.name, yes, confirm_above)
    row = register(prepared, file, progress)
    _execute(state, campaign, row, concurrency, poll_interval, status_interval)


def register_campaign(engine: Engine, campaign: Campaign, file: str) -> CampaignRow:
    """Store the campaign and its new cells, saying what was added (``engine.prepare.register_campaign``,
    as tests and scripts set a campaign up without ``run``'s checks)."""
    from benchctl.engine.prepare import register_campaign as store_campaign

    return store_campaign(engine, campaign, file, progress)


def _confirm_spend(result: Plan, name: str, yes: bool, confirm_above: float) -> None:
    """Print the spend of what is left to run (the figures ``plan`` prints); when the most that can
    be spent (the worst case, capped by the budget) is above ``confirm_above``, show the per-cell plan
    and ask (or refuse without a terminal) unless ``--yes``. Nothing is written before it."""
    import sys

    from benchctl.engine.plan import compact_table
    from benchctl.errors import UsageError

    line = f"campaign {name}: {result.spend_line()}"
    if result.capped_usd <= confirm_above or yes:
        progress(line)
        return
    for row in compact_table(result):
        progress(row)
    progress(line)
    question = f"up to ${result.capped_usd:.2f} may be spent, above ${confirm_above:.2f}"
    if not sys.stdin.isatty():
        raise UsageError(f"{question}: pass --yes to run it without a terminal (or raise --confirm-above); "
                         "nothing was launched")
    if not click.confirm(f"{question}. Run it?", default=False, err=True):
        raise UsageError("not run: nothing was launched")


@click.command()
@click.argument("name", required=False)
@_with_run_options
@pass_state
def resume(state: CliState, name: str | None, concurrency: int, poll_interval: float, status_interval: float) -> None:
    """Continue every unfinished cell (of campaign NAME, or of every campaign)."""
    from benchctl.engine.prepare import stored_campaign
    from benchctl.engine.scheduler import connections_for
    from benchctl.errors import BenchctlError, CampaignNotFound
    from benchctl.store import queries as q

    state.connections = connections_for(concurrency)
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
    failures = []
    for row in unfinished:
        try:
            _execute(state, stored_campaign(row), row, concurrency, poll_interval, status_interval)
        except BenchctlError as exc:  # go on: the other campaigns' nodes need reconciling too
            if exc.exit_code == 130:
                raise
            failures.append(str(exc))
    if failures:
        raise BenchctlError("\n".join(failures))


@contextmanager
def _termination_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a kill, a closed terminal) stop the campaign the way Ctrl-C does."""
    def interrupt(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _execute(state: CliState, campaign: Campaign, row: CampaignRow, concurrency: int, poll_interval: float,
             status_interval: float) -> None:
    from benchctl.cli.leaderboard import print_leaderboard
    from benchctl.engine.budget import Budget, attempt_worst_case_s
    from benchctl.engine.lease import Leases
    from benchctl.engine.progress import pick_progress
    from benchctl.engine.providers import Providers
    from benchctl.engine.run_context import RunContext
    from benchctl.engine.scheduler import pending_cells, run_campaign, terminate_orphans
    from benchctl.errors import BenchctlError
    from benchctl.home import artifacts_dir, home, lease_ttl_s

    engine = state.engine()
    name = campaign.spec.name
    assert row.id is not None
    leases = Leases(engine, lease_ttl_s())
    payload = campaign.spec.payload
    view = pick_progress(engine, row.id, [c.key for c in campaign.cells], name, campaign.spec.budget_usd,
                         payload.profile.steps if "profile" in payload.phases else None)
    ctx = RunContext(engine=engine, campaign=campaign, campaign_id=row.id, campaign_uid=row.uid,
                     providers=Providers(home(), campaign.spec.providers),
                     artifacts_dir=artifacts_dir(name), leases=leases,
                     budget=Budget(engine, row.id, campaign.spec.budget_usd, attempt_worst_case_s(campaign.spec)),
                     poll_interval_s=poll_interval, status_interval_s=status_interval, log=view.log,
                     hard_exit=view.hard_exit)
    terminate_orphans(ctx)
    if not pending_cells(ctx):
        click.echo(f"campaign {name} is complete: all {len(campaign.cells)} cells are done; nothing to run")
        print_leaderboard(engine, name, "table")
        return
    try:
        with _termination_as_interrupt(), view:  # the view stops first: messages after it print plainly
            summary = run_campaign(ctx, concurrency)
    finally:
        leases.close()
    print_leaderboard(engine, name, "table")
    if not summary.complete:
        raise BenchctlError(_not_complete(name, summary.states, summary.held_elsewhere))


def _not_complete(name: str, states: dict[str, str], held: dict[str, str]) -> str:
    """Why a campaign is not complete; when another live controller runs what is left, who and since
    when, and how to follow it (trying again would only skip those cells again)."""
    from benchctl.engine.lease import holder

    unfinished = ", ".join(f"{k} ({s}{'; run by controller ' + holder(held[k]).describe() if k in held else ''})"
                           for k, s in states.items() if s != "done")
    if held and all(k in held for k, s in states.items() if s != "done"):
        return (f"campaign {name} is not complete: {unfinished}. Another controller is running it: "
                f"`benchctl status --watch {name}` follows it")
    return (f"campaign {name} is not complete: {unfinished}. `benchctl status {name}` shows why; "
            f"`benchctl resume {name}` tries again")
