"""One campaign's preparation before anything is rented or written: ``run`` and ``plan`` share it.

``prepare_run`` takes the steps in this order, each a refusal (a BenchctlError subclass, exit 2
unless said) before anything is written: the memory fit (``refuse_unfit``, before any provider or
database); the compile warnings (said as found); every provider of the campaign built
(``check_providers``: renting, one that cannot be used is ``ProviderUnavailable``; planning, its
cells are priced without it), a multi-node cell its provider cannot rent (``refuse_multi_node``),
a shape or access a provider refuses (``Providers.check_cells``); with a store (``run``): a name
that holds imported results, a measured campaign whose workload changed
(``same_measurement``); then the plan of what is left to run (``engine.plan``), whose unusable or
unanswering providers stop a run (2, or 1). A refusal gives back what the providers started.

``register`` is ``run``'s first write, after the CLI confirmed the spend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from benchctl.campaign.images import compile_warnings
from benchctl.campaign.memory_fit import refuse_unfit
from benchctl.campaign.spec import Campaign, CellSpec
from benchctl.engine.plan import Plan, plan_campaign
from benchctl.engine.providers import Providers
from benchctl.errors import ProviderUnavailable, UsageError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from benchctl.store.models import Campaign as CampaignRow


def _quiet(_line: str) -> None:
    return None


@dataclass(frozen=True)
class RunOptions:
    renting: bool = True
    """``run``: every provider must be usable and its access is checked; False (``plan``): a provider
    not set up here is priced from a catalog, and one whose access check would start something is
    not asked."""
    open_store: Callable[[], Engine] | None = None
    """``run``: opens the store once the providers passed (the store is read, never written, here);
    None (``plan``): no store, every cell is planned."""
    say: Callable[[str], None] = _quiet
    """Where the warnings found before the providers are asked go, as they are found."""


@dataclass(frozen=True)
class PreparedRun:
    campaign: Campaign
    providers: Providers
    plan: Plan
    """Of the cells left to run (not done), with the campaign's spend so far."""
    engine: Engine | None = None
    previous: CampaignRow | None = None
    """The stored campaign of the same name that ``run`` continues."""


def prepare_run(campaign: Campaign, options: RunOptions) -> PreparedRun:
    """The campaign checked, its providers built and its plan made (module docstring: the order)."""
    from benchctl.home import home

    refuse_unfit(campaign)
    for warning in compile_warnings(campaign, campaign.cells):
        options.say(f"warning: {warning}")
    providers = Providers(home(), campaign.spec.providers)
    try:
        unavailable = check_providers(providers, campaign.cells, campaign.spec.defaults.image, options.renting)
        engine = previous = None
        done: set[str] = set()
        spent = 0.0
        if options.open_store is not None:
            engine = options.open_store()
            previous, done, spent = _previous(engine, campaign)
        plan = plan_campaign(campaign, providers, [c for c in campaign.cells if c.key not in done], spent,
                             unavailable)
        if options.renting:
            plan.raise_problems()
    except BaseException:
        providers.close()
        raise
    return PreparedRun(campaign, providers, plan, engine, previous)


def check_providers(providers: Providers, cells: list[CellSpec], image: str | None, renting: bool) -> dict[str, str]:
    """Provider → what it needs, for those that cannot be built (``renting``: any such is a refusal,
    one line per provider); the others' cells are checked before any API is asked for offers: a
    multi-node cell its provider cannot rent, a refused shape or access (``Providers.check_cells``)."""
    unavailable: dict[str, str] = {}
    for name in sorted({cell.provider for cell in cells}):
        try:
            providers.get(name)
        except ProviderUnavailable as exc:
            unavailable[name] = str(exc)
    if renting and unavailable:
        raise ProviderUnavailable("\n".join(message for _, message in sorted(unavailable.items())))
    usable = [c for c in cells if c.provider not in unavailable]
    refuse_multi_node(providers, usable)
    providers.check_cells(usable, image, renting=renting)
    return unavailable


def refuse_multi_node(providers: Providers, cells: list[CellSpec]) -> None:
    """UsageError (one line, exit 2) when a cell asks for ``nodes`` > 1 on a provider that cannot
    rent them as one unit (``Provider.multi_node_refusal``)."""
    refused = []
    for cell in (c for c in cells if c.nodes > 1):
        why = providers.get(cell.provider).multi_node_refusal
        if why is not None:
            refused.append(f"{cell.key}: nodes: {cell.nodes} on {cell.provider} cannot be planned or run: {why}; "
                           "use nodes: 1")
    if refused:
        more = f" (and {len(refused) - 1} more cell(s) like it)" if len(refused) > 1 else ""
        raise UsageError(refused[0] + more)


def _previous(engine: Engine, campaign: Campaign) -> tuple[CampaignRow | None, set[str], float]:
    """The stored campaign ``run`` continues (refused when it holds imported results or was measured
    with another workload), its done cells' keys and what it spent."""
    from benchctl.engine.same_measurement import refuse_other_measurement
    from benchctl.store import queries as q

    rows = q.campaigns(engine, campaign.spec.name)
    if not rows:
        return None, set(), 0.0
    row = rows[0]
    if row.kind == "imported":
        raise UsageError(f"campaign {campaign.spec.name!r} holds imported results; give this campaign another name")
    refuse_other_measurement(engine, row, stored_campaign(row), campaign)
    if row.id is None:
        return row, set(), 0.0
    return row, {c.key for c in q.cells(engine, row.id) if c.state == "done"}, q.spent_usd(engine, row.id)


def register(prepared: PreparedRun, file: str, say: Callable[[str], None] = _quiet) -> CampaignRow:
    """``run``'s first write: the campaign and its new cells stored, done cells' results following
    the file's target; ``say`` gets what was added and what an edit of the file did to the stored
    results (``results.result_edits``)."""
    from benchctl.results.result_edits import price_edits, repriced, results_by_key

    assert prepared.engine is not None, "register needs the store prepare_run opened"
    engine, campaign, previous = prepared.engine, prepared.campaign, prepared.previous
    before = results_by_key(engine, previous.id) if previous is not None and previous.id is not None else {}
    row = register_campaign(engine, campaign, file, say)
    if previous is not None:
        old = stored_campaign(previous)
        for line in [*price_edits(old, campaign, set(before)),
                     *repriced(old, campaign, before, results_by_key(engine, row.id or 0))]:
            say(line)
    return row


def register_campaign(engine: Engine, campaign: Campaign, file: str, say: Callable[[str], None] = _quiet,
                      ) -> CampaignRow:
    """Store the campaign and its new cells; results of done cells follow the file's target."""
    from benchctl.store import queries as q

    campaign_id, added = q.upsert_campaign(
        engine, campaign.spec.name, campaign.model_dump_json(), file, campaign.spec.budget_usd,
        [q.NewCell(key=c.key, provider=c.provider, gpu=c.gpu or str(c.instance_type), count=c.world_size,
                   market=c.market, config_json=c.model_dump_json()) for c in campaign.cells])
    if added:
        say(f"campaign {campaign.spec.name}: {len(added)} new cell(s)")
    _recompute_results(engine, campaign_id, campaign)
    (row,) = q.campaigns(engine, campaign.spec.name)
    return row


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


def stored_campaign(row: CampaignRow) -> Campaign:
    """The campaign as stored by ``run`` (``resume`` and ``down`` read it); UsageError when this
    benchctl cannot read it."""
    from pydantic import ValidationError

    try:
        return Campaign.model_validate_json(row.spec_json)
    except ValidationError as exc:
        raise UsageError(f"the stored definition of campaign {row.name!r} cannot be read by this benchctl "
                         f"({exc.error_count()} problems): run it again from its file with `benchctl run FILE`"
                         ) from None
