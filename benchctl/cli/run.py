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
    from benchctl.campaign.images import compile_warnings
    from benchctl.campaign.memory_fit import refuse_unfit
    from benchctl.campaign.spec import load_campaign
    from benchctl.engine.plan import refuse_multi_node
    from benchctl.engine.providers import Providers
    from benchctl.errors import UsageError
    from benchctl.home import home
    from benchctl.store import queries as q

    campaign = load_campaign(file)
    refuse_unfit(campaign)  # before any provider, database or node
    for warning in compile_warnings(campaign, campaign.cells):
        progress(f"warning: {warning}")
    providers = Providers(home(), campaign.spec.providers)
    providers.check(cell.provider for cell in campaign.cells)
    refuse_multi_node(providers, campaign.cells)
    providers.check_cells(campaign.cells, campaign.spec.defaults.image)
    engine = state.engine()
    previous = q.campaigns(engine, campaign.spec.name)
    if previous and previous[0].kind == "imported":
        raise UsageError(f"campaign {campaign.spec.name!r} holds imported results; give this campaign another name")
    if previous:
        _check_same_measurement(engine, previous[0], campaign)
    _confirm_spend(engine, campaign, previous[0] if previous else None, providers, yes, confirm_above)
    before = _results_before(engine, previous[0] if previous else None)
    row = register_campaign(engine, campaign, file)
    if previous:
        _say_edits(engine, previous[0], campaign, before)
    _execute(state, campaign, row, concurrency, poll_interval, status_interval)


def register_campaign(engine: Engine, campaign: Campaign, file: str) -> CampaignRow:
    """Store the campaign and its new cells (``run``'s first write); results follow the file's target."""
    from benchctl.store import queries as q

    campaign_id, added = q.upsert_campaign(
        engine, campaign.spec.name, campaign.model_dump_json(), file, campaign.spec.budget_usd,
        [q.NewCell(key=c.key, provider=c.provider, gpu=c.gpu or str(c.instance_type), count=c.world_size,
                   market=c.market, config_json=c.model_dump_json()) for c in campaign.cells])
    if added:
        progress(f"campaign {campaign.spec.name}: {len(added)} new cell(s)")
    _recompute_results(engine, campaign_id, campaign)
    (row,) = q.campaigns(engine, campaign.spec.name)
    return row


def _confirm_spend(engine: Engine, campaign: Campaign, previous: CampaignRow | None, providers: Any, yes: bool,
                   confirm_above: float) -> None:
    """Print the spend of what is left to run (the figures ``plan`` prints); when the most that can
    be spent (the worst case, capped by the budget) is above ``confirm_above``, show the per-cell plan
    and ask (or refuse without a terminal) unless ``--yes``. A provider that does not answer stops
    the run: one line per provider, exit 1. Runs before anything is written."""
    import sys

    from benchctl.engine.plan import compact_table, plan_campaign
    from benchctl.errors import UsageError
    from benchctl.store import queries as q

    done, spent = set(), 0.0
    if previous is not None and previous.id is not None:
        done = {c.key for c in q.cells(engine, previous.id) if c.state == "done"}
        spent = q.spent_usd(engine, previous.id)
    result = plan_campaign(campaign, providers, [c for c in campaign.cells if c.key not in done], spent)
    result.raise_problems()
    line = f"campaign {campaign.spec.name}: {result.spend_line()}"
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


def _results_before(engine: Engine, previous: CampaignRow | None) -> dict[str, tuple[int, float]]:
    from benchctl.cli.result_edits import results_by_key

    return results_by_key(engine, previous.id) if previous is not None and previous.id is not None else {}


def _say_edits(engine: Engine, previous: CampaignRow, campaign: Campaign, before: dict[str, tuple[int, float]]) -> None:
    """Say what an edit of the file did to the stored results (``cli.result_edits``)."""
    from benchctl.campaign.spec import Campaign as CampaignModel
    from benchctl.cli.result_edits import price_edits, repriced, results_by_key

    old = stored_campaign(previous, CampaignModel)
    assert previous.id is not None
    for line in [*price_edits(old, campaign, set(before)),
                 *repriced(old, campaign, before, results_by_key(engine, previous.id))]:
        progress(line)


_WORKLOAD_TARGET = ("model", "total_batch_size", "vocab_size")
"""The target fields that change what a step computes (the model's size, the tokens per step). The
rest of ``target`` (``target_param_data_ratio``) only multiplies a measured step time."""


def _check_same_measurement(engine: Engine, row: CampaignRow, campaign: Campaign) -> None:
    """Refuse to continue a measured campaign whose workload changed (the payload section, or a
    target field in ``_WORKLOAD_TARGET``): its stored step times would be priced as another
    workload's. One line names the first change, old → new, and the way out."""
    from benchctl.campaign.spec import Campaign as CampaignModel
    from benchctl.errors import UsageError
    from benchctl.store import queries as q

    old = stored_campaign(row, CampaignModel)
    if not any(q.attempts(engine, c.id or 0) for c in q.cells(engine, row.id or 0)):
        return
    changes = _changes(_workload(old), _workload(campaign), "target")
    what = "workload"
    if not changes:
        changes, what = _changes(old.spec.payload.model_dump(), campaign.spec.payload.model_dump(), "payload"), \
            "payload section"
    if changes:
        path, before, after = changes[0]
        raise UsageError(f"campaign {row.name!r} was measured with a different {what}: {path} {before} → {after}; "
                         "its stored step times would be priced as another workload's. Give the campaign a new "
                         f"name to measure the new one, or restore {path}: {before} (only "
                         "target.target_param_data_ratio and prices may change on a measured campaign)")


def _workload(campaign: Campaign) -> dict[str, Any]:
    """The ``_WORKLOAD_TARGET`` fields as the payload runs them (an unset vocab_size is the preset's)."""
    from benchctl.campaign.spec import Target
    from benchctl.payload.workloads.presets import model_dims

    if not isinstance(campaign.spec.target, Target):  # steps or tokens: a command's own workload, priced only
        return {}
    target = campaign.spec.target.model_dump()
    return {key: target[key] for key in _WORKLOAD_TARGET} | {
        "vocab_size": model_dims(campaign.spec.target.model, campaign.spec.target.vocab_size).vocab_size}


def _changes(old: Any, new: Any, path: str) -> list[tuple[str, str, str]]:
    """(dotted path, old, new) of every leaf that differs between two dumped models."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [change for key in (*old, *(k for k in new if k not in old))
                for change in _changes(old.get(key), new.get(key), f"{path}.{key}")]
    return [] if old == new else [(path, _shown(old), _shown(new))]


def _shown(value: Any) -> str:
    """``value`` on one short line (a command may span lines)."""
    text = "(unset)" if value is None else " ".join(str(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _recompute_results(engine: Engine, campaign_id: int, campaign: Campaign) -> None:
    """Results of done cells follow the file's target (the steps a cost is multiplied by)."""
    from benchctl.results.cell_result import save_cell_result
    from benchctl.results.evidence_rules import NO_RESULT
    from benchctl.store import queries as q

    for cell in q.cells(engine, campaign_id):
        if cell.state == "done" and cell.id is not None:
            why = save_cell_result(engine, cell.id, campaign.spec)
            if why != cell.reason and (why or (cell.reason or "").startswith(NO_RESULT)):
                q.set_cell_state(engine, cell.id, "done", why)


@click.command()
@click.argument("name", required=False)
@_with_run_options
@pass_state
def resume(state: CliState, name: str | None, concurrency: int, poll_interval: float, status_interval: float) -> None:
    """Continue every unfinished cell (of campaign NAME, or of every campaign)."""
    from benchctl.campaign.spec import Campaign
    from benchctl.errors import BenchctlError, CampaignNotFound
    from benchctl.store import queries as q

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
            _execute(state, stored_campaign(row, Campaign), row, concurrency, poll_interval, status_interval)
        except BenchctlError as exc:  # go on: the other campaigns' nodes need reconciling too
            if exc.exit_code == 130:
                raise
            failures.append(str(exc))
    if failures:
        raise BenchctlError("\n".join(failures))


def stored_campaign(row: CampaignRow, model: Any) -> Campaign:
    from pydantic import ValidationError

    from benchctl.errors import UsageError

    try:
        campaign: Campaign = model.model_validate_json(row.spec_json)
    except ValidationError as exc:
        raise UsageError(f"the stored definition of campaign {row.name!r} cannot be read by this benchctl "
                         f"({exc.error_count()} problems): run it again from its file with `benchctl run FILE`"
                         ) from None
    return campaign


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
