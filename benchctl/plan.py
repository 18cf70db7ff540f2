"""``benchctl plan``: what each cell would rent now and what it could cost, without launching.

Per cell: the offer the engine would take (the provider's cheapest that fits), its $/hr and
market, and the worst-case spend (max_attempts × price × the attempt's worst-case duration);
warnings for cells with no offer and for a matrix whose worst case exceeds ``budget_usd``
(cells would wait for budget or end with reason ``budget``); the profile's memory estimate per GPU
and the card's memory (``benchctl.memory_fit``). A cell without an offer has an unknown worst case
(None), never 0, and so has the matrix then. When no provider answered at all there is no plan:
``NoProviderAnswered``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchctl.budget import attempt_worst_case_s
from benchctl.errors import BenchctlError
from benchctl.memory_fit import cell_fit
from benchctl.providers import Providers, offer_request
from benchctl.spec import Campaign
from provisioners.base import ProviderError

COLUMNS = ("cell", "provider", "market", "offer", "host", "vcpus", "hourly_usd", "worst_case_usd", "mem_est_gib",
           "gpu_mem_gib", "warning")


class NoProviderAnswered(BenchctlError):
    """Every provider's offers failed: nothing could be priced (exit 1: try again later)."""


@dataclass(frozen=True)
class Plan:
    rows: list[dict[str, Any]]
    worst_case_usd: float | None
    """None when a cell has no offer (its spend is unknown)."""
    priced_usd: float
    """The worst case of the cells that have an offer."""
    budget_usd: float
    warnings: list[str]


def plan_campaign(campaign: Campaign, providers: Providers) -> Plan:
    hours = attempt_worst_case_s(campaign.spec) / 3600.0
    rows, warnings = [], []
    failed: dict[str, str] = {}
    answered: set[str] = set()
    for cell in campaign.cells:
        row: dict[str, Any] = {"cell": cell.key, "provider": cell.provider, "market": cell.market, "offer": None,
                               "host": None, "vcpus": None, "hourly_usd": None, "worst_case_usd": None,
                               "warning": None}
        fit = cell_fit(campaign, cell)
        row.update(mem_est_gib=fit.mem_est_gib, gpu_mem_gib=fit.gpu_mem_gib)
        try:
            offers = providers.get(cell.provider).offers(offer_request(cell, cell.key,
                                                                       image=campaign.spec.defaults.image))
            answered.add(cell.provider)
        except ProviderError as exc:
            offers, row["warning"] = [], f"offers failed: {exc}"
            failed.setdefault(cell.provider, str(exc))
        if offers:
            best = offers[0]
            row.update(offer=best.offer_id, host=best.host or None, vcpus=best.vcpus or None,
                       hourly_usd=best.hourly_usd, worst_case_usd=round(cell.max_attempts * best.hourly_usd * hours, 4))
        elif row["warning"] is None:
            row["warning"] = "no offer now"
        if row["warning"]:
            warnings.append(f"{cell.key}: {row['warning']}")
        rows.append(row)
    if failed and not answered:
        raise NoProviderAnswered("no provider answered for offers, so nothing could be planned: " + "; ".join(
            f"{name}: {problem}" for name, problem in sorted(failed.items())) + ". Fix that (or wait) and plan again")
    warnings += [f"{name}: {note}" for name in sorted(answered) for note in providers.get(name).plan_notes()]
    priced = sum(r["worst_case_usd"] for r in rows if r["worst_case_usd"] is not None)
    if priced > campaign.spec.budget_usd:
        warnings.append(f"the worst case ${priced:.2f} is over budget_usd ${campaign.spec.budget_usd:.2f}: cells "
                        "will wait for budget, or end with reason budget")
    unknown = any(r["worst_case_usd"] is None for r in rows)
    return Plan(rows, None if unknown else round(priced, 4), round(priced, 4), campaign.spec.budget_usd, warnings)
