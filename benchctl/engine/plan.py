"""``benchctl plan`` and ``run``'s spend confirmation: what each cell would rent now and what it
could cost, without launching.

Per cell: the offer the engine would take (the provider's cheapest that fits), its $/hr and
market, the expected spend (one attempt that succeeds, billed up to the attempt's time limit) and
the worst-case spend (max_attempts × price × the attempt's worst-case duration); the predicted
step time and cost-to-train (``predicted_cost``, ranked by ``predicted_rank``); the profile's
memory estimate per GPU and the card's memory (``benchctl.campaign.memory_fit``). A cell without a price
(no offer now, its provider unusable or unreachable) has an unknown worst case (None), never 0,
and so has the matrix then. A cell of ``nodes`` > 1 is priced as its nodes together (each $/hr ×
nodes) on a provider that can rent them as one unit (one that cannot was refused before:
``engine.prepare``, which checks the cells and providers and calls the plan). A provider
that cannot be used (no SDK, no credentials) is asked nothing: its cells say what it needs
(``unavailable``). A provider whose offers fail is asked once (``failed``): one line per provider.
When no provider answered at all there is no plan: ``NoProviderAnswered``.

A cell whose provider cannot be asked (unavailable, failed) is priced from a public catalog when one
lists it (``provisioners.catalog``): ``price_source`` says ``offer`` or ``catalog`` (never an offer:
nothing says such a node is free now), ``price_origin`` where the figure comes from and
``price_as_of`` its date (an offer's: now). The row's ``hourly_usd`` and ``price_source`` are the one
place later columns (predicted cost) read the price from.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from benchctl.campaign.images import compile_warnings
from benchctl.campaign.memory_fit import cell_fit
from benchctl.campaign.spec import Campaign, CellSpec, Target
from benchctl.engine.attempt_limits import attempt_worst_case_s
from benchctl.engine.providers import Providers, offer_request, unnamed
from benchctl.errors import BenchctlError, ProviderUnavailable
from benchctl.provisioners.base import ProviderError
from benchctl.provisioners.catalog import catalog_price

COLUMNS = ("cell", "provider", "nodes", "market", "offer", "host", "vcpus", "hourly_usd", "price_source",
           "predicted_step_ms", "predicted_cost_usd", "predicted_rank", "expected_usd", "worst_case_usd", "mem_est_gib",
           "gpu_mem_gib", "warning")
TERMINAL_PRIORITY = ("cell", "hourly_usd", "predicted_cost_usd", "worst_case_usd", "warning", "predicted_rank",
                     "price_source", "predicted_step_ms", "expected_usd", "offer", "vcpus", "mem_est_gib",
                     "gpu_mem_gib", "nodes", "host", "provider", "market")
"""Most wanted first: the columns a terminal shows when not all fit (the cell key names provider
and market)."""


class NoProviderAnswered(BenchctlError):
    """Every provider's offers failed: nothing could be priced (exit 1: try again later)."""


@dataclass(frozen=True)
class Plan:
    rows: list[dict[str, Any]]
    worst_case_usd: float | None
    """None when a cell has no price (its spend is unknown)."""
    priced_usd: float
    """The worst case of the cells that have a price."""
    budget_usd: float
    warnings: list[str]
    spent_usd: float = 0.0
    """Already spent by this campaign (``run`` continuing it); part of the worst case."""
    unavailable: dict[str, str] = field(default_factory=dict)
    """Provider → why it cannot be used here (what it needs)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Provider → why its offers failed."""

    @property
    def catalog_priced(self) -> dict[str, str]:
        """Provider → what it needs, for the unavailable providers whose every cell has a catalog price."""
        return {name: why for name, why in self.unavailable.items()
                if all(r["price_source"] == "catalog" for r in self.rows if r["provider"] == name)}

    def catalog_sources(self) -> list[str]:
        """One line per catalog source the rows use: what it is and its date."""
        seen = sorted({(r["price_origin"], r["price_as_of"]) for r in self.rows if r["price_source"] == "catalog"})
        return [f"catalog price (not an offer): {origin}, as of {as_of}" for origin, as_of in seen]

    @property
    def unpriced(self) -> int:
        return sum(row["worst_case_usd"] is None for row in self.rows)

    @property
    def capped_usd(self) -> float:
        """The most that can be spent: the worst case capped by the budget (the budget itself while
        a cell's price is unknown)."""
        if self.unpriced:
            return self.budget_usd
        return min(self.spent_usd + self.priced_usd, self.budget_usd)

    def spend_line(self) -> str:
        """One line both ``plan`` and ``run`` print: the same figures."""
        worst = self.spent_usd + self.priced_usd
        spent = f" (${self.spent_usd:.2f} already spent)" if self.spent_usd else ""
        if self.unpriced:
            return (f"worst case ${worst:.2f}{spent} for the priced cells, unknown for the {self.unpriced} cell(s) "
                    f"without an offer; budget_usd ${self.budget_usd:.2f} caps the spend")
        if worst > self.budget_usd:
            return (f"worst case ${worst:.2f}{spent}; over budget_usd ${self.budget_usd:.2f}, which caps the spend "
                    f"at ${self.capped_usd:.2f}")
        return f"worst case ${worst:.2f}{spent} of budget_usd ${self.budget_usd:.2f}"

    def problems(self) -> list[str]:
        """One line per provider that could not be asked or did not answer."""
        return ([message for _, message in sorted(self.unavailable.items())]
                + [f"{name}: offers failed: {problem}" for name, problem in sorted(self.failed.items())])

    def raise_problems(self, catalog_ok: bool = False) -> None:
        """Exit 2 when a provider needs set-up, 1 when one did not answer; nothing when all answered.
        ``catalog_ok`` (``plan``): a provider whose every cell has a catalog price is no problem."""
        excused = self.catalog_priced if catalog_ok else {}
        unavailable = {k: v for k, v in self.unavailable.items() if k not in excused}
        lines = ([message for _, message in sorted(unavailable.items())]
                 + [f"{name}: offers failed: {problem}" for name, problem in sorted(self.failed.items())])
        if unavailable:
            raise ProviderUnavailable("\n".join(lines))
        if self.failed:
            raise BenchctlError("\n".join(lines))


def plan_campaign(campaign: Campaign, providers: Providers, cells: list[CellSpec] | None = None,
                  spent_usd: float = 0.0, unavailable: Mapping[str, str] | None = None) -> Plan:
    """Plan ``cells`` (default: all the campaign's); ``spent_usd`` counts toward the worst case.
    ``unavailable``: provider → what it needs, for those the caller's checks found unusable (their
    cells are not asked; ``engine.prepare.check_providers``, which every other cell passed)."""
    cells = campaign.cells if cells is None else cells
    unavailable = dict(unavailable or {})
    hours = attempt_worst_case_s(campaign.spec) / 3600.0
    image = campaign.spec.defaults.image
    rows, warnings = [], []
    failed: dict[str, str] = {}
    answered: set[str] = set()
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    for cell in cells:
        row: dict[str, Any] = {"cell": cell.key, "provider": cell.provider, "nodes": cell.nodes,
                               "market": cell.market, "offer": None,
                               "host": None, "vcpus": None, "hourly_usd": None, "price_source": None,
                               "price_origin": None, "price_as_of": None, "expected_usd": None,
                               "worst_case_usd": None, "warning": None}
        fit = cell_fit(campaign, cell)
        row.update(mem_est_gib=fit.mem_est_gib, gpu_mem_gib=fit.gpu_mem_gib)
        offers = []
        request = offer_request(cell, cell.key, image=image)
        if cell.provider in unavailable:
            row["warning"] = "needs " + unnamed(cell.provider, unavailable[cell.provider])
        elif cell.provider in failed:  # asked once: an unreachable API is not asked again per cell
            row["warning"] = "offers failed (below)"
        else:
            try:
                offers = providers.get(cell.provider).offers(request)
                answered.add(cell.provider)
                if not offers and providers.get(cell.provider).all_busy(request):
                    row["warning"] = "busy now: " + (providers.get(cell.provider).busy_detail(request) or
                                                     "every matching node is in use (a run would wait for one)")
            except ProviderError as exc:
                failed[cell.provider] = unnamed(cell.provider, str(exc))  # the lines below name it
                row["warning"] = "offers failed (below)"
        listed = None if offers or cell.provider in answered else catalog_price(cell.provider, request)
        if offers:
            best = offers[0]
            hourly = best.hourly_usd * cell.nodes  # every node of the unit bills
            row.update(offer=best.offer_id, host=best.host or None, vcpus=best.vcpus or None,
                       hourly_usd=hourly, price_source="offer", price_origin=cell.provider,
                       price_as_of=now, expected_usd=round(hourly * hours, 4),
                       worst_case_usd=round(cell.max_attempts * hourly * hours, 4))
        elif listed is not None:
            hourly = listed.hourly_usd * cell.nodes
            row.update(hourly_usd=hourly, price_source="catalog", price_origin=listed.source,
                       price_as_of=listed.as_of, expected_usd=round(hourly * hours, 4),
                       worst_case_usd=round(cell.max_attempts * hourly * hours, 4),
                       warning=("offers failed (below); " if cell.provider in failed else "")
                       + "not an offer" + (f": {listed.note}" if listed.note else ""))
        elif row["warning"] is None:
            row["warning"] = "no offer now"
            warnings.append(f"{cell.key}: no offer now")
        row.update(predicted_cost(campaign, cell, row["hourly_usd"]))
        rows.append(row)
    rank_predicted(rows)
    if failed and not answered and not unavailable:
        raise NoProviderAnswered("no provider answered for offers, so nothing could be planned: " + "; ".join(
            f"{name}: {problem}" for name, problem in sorted(failed.items())) + ". Fix that (or wait) and plan again")
    warnings += [f"{name}: {note}" for name in sorted(answered | failed.keys())
                 for note in providers.get(name).plan_notes()]
    warnings += compile_warnings(campaign, cells)
    priced = round(sum(r["worst_case_usd"] for r in rows if r["worst_case_usd"] is not None), 4)
    if spent_usd + priced > campaign.spec.budget_usd:
        warnings.append(f"the worst case ${spent_usd + priced:.2f} is over budget_usd "
                        f"${campaign.spec.budget_usd:.2f}: cells will wait for budget, or end with reason budget")
    unknown = any(r["worst_case_usd"] is None for r in rows)
    return Plan(rows, None if unknown else priced, priced, campaign.spec.budget_usd, warnings, spent_usd,
                unavailable, failed)


def predicted_cost(campaign: Campaign, cell: CellSpec, hourly_usd: float | None) -> dict[str, Any]:
    """``predicted_step_ms`` (``benchctl predict``'s model, published defaults: the profile's model,
    tokens per step and sequence length, bf16, the cell's GPU and count) and ``predicted_cost_usd``
    (that step × the target's steps at ``hourly_usd``); an AWS instance type by the GPUs of its
    table; None where the cell names no GPU model or count or has no price."""
    from benchctl.payload.node.gpu_models import BF16_PEAK_FLOPS
    from benchctl.predict.service import predict_for
    from benchctl.provisioners.aws.instances import INSTANCES as AWS_INSTANCES

    none: dict[str, Any] = {"predicted_step_ms": None, "predicted_cost_usd": None, "predicted_rank": None}
    gpu, count = cell.gpu, cell.count
    if gpu is None and cell.instance_type in AWS_INSTANCES:  # an instance type: the GPUs its table names
        gpu, count = AWS_INSTANCES[cell.instance_type].gpu, AWS_INSTANCES[cell.instance_type].count
    if gpu not in BF16_PEAK_FLOPS or count is None:
        return none
    if not isinstance(campaign.spec.target, Target):  # a command's own workload: no model of it to predict
        return none
    spec, target = campaign.spec, campaign.spec.target
    step_ms = predict_for(None, gpu, count, cell.nodes, "bf16", model=target.model,
                          tokens_per_step=target.total_batch_size,
                          sequence_len=spec.payload.profile.sequence_len).mid.step_ms
    steps = target.train_steps()
    cost = None if hourly_usd is None else round(step_ms / 1000 * steps / 3600 * hourly_usd, 2)
    return {**none, "predicted_step_ms": round(step_ms, 1), "predicted_cost_usd": cost}


def rank_predicted(rows: list[dict[str, Any]]) -> None:
    """``predicted_rank``: 1 for the cheapest predicted cost-to-train, None without one."""
    priced = sorted((r for r in rows if r["predicted_cost_usd"] is not None), key=lambda r: r["predicted_cost_usd"])
    for rank, row in enumerate(priced, start=1):
        row["predicted_rank"] = rank


def compact_table(plan: Plan) -> list[str]:
    """The per-cell plan in a few columns (cell, $/hr, expected, worst case), as the confirmation
    prompt shows it; unknown prices read ``?``."""
    def usd(value: float | None) -> str:
        return "?" if value is None else f"${value:.2f}"

    width = max([len("cell")] + [len(r["cell"]) for r in plan.rows])
    lines = [f"{'cell':<{width}}  {'$/hr':>8}  {'expected':>9}  {'worst':>9}"]
    lines += [f"{r['cell']:<{width}}  {usd(r['hourly_usd']):>8}  {usd(r['expected_usd']):>9}  "
              f"{usd(r['worst_case_usd']):>9}" + (f"  {r['warning']}" if r["warning"] else "") for r in plan.rows]
    return [*lines, "expected: one attempt, billed up to its time limit; worst: all max_attempts attempts"]
