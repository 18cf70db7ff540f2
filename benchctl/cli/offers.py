"""``benchctl offers``: what each provider rents now (GPU, count, market, $/hr), without a campaign file."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click

from benchctl.cli.options import CliState, pass_state

COLUMNS = ["provider", "gpu", "count", "market", "region", "vcpus", "hourly_usd", "price_source", "host"]


@click.command()
@click.option("--gpu", "gpus", multiple=True, metavar="GPU", default=("H100_SXM",), show_default=True,
              help="GPU name as a campaign file states it (repeat for several; `cpu` for the local provider).")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True, help="GPUs per node.")
@click.option("--provider", "only", multiple=True, metavar="P", help="Ask only this provider (repeatable).")
@click.option("--market", "markets", multiple=True, type=click.Choice(["on-demand", "spot"], case_sensitive=False),
              help="Only this market (repeatable) [default: both].")
@click.option("--cloud", metavar="CLOUD", help="The cloud SkyPilot asks (e.g. lambda); SkyPilot needs one.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "md"], case_sensitive=False),
              default="table", show_default=True)
@pass_state
def offers(state: CliState, gpus: tuple[str, ...], count: int, only: tuple[str, ...], markets: tuple[str, ...],
           cloud: str | None, fmt: str) -> None:
    """GPUs, counts, markets and $/hr across the providers that answer, cheapest first.

    \b
    A provider without its SDK or credentials is listed as skipped, with what it needs, and priced from
    a public catalog where one lists the node (price_source catalog: not an offer; its source and
    date below); a provider that fails answers with one line. Exit 0 when a provider answered (a
    rental provider, or local/ssh with such a node) or a catalog priced something, 1 otherwise."""
    from benchctl.engine.providers import Providers, unnamed
    from benchctl.errors import BenchctlError, ProviderUnavailable
    from benchctl.home import home
    from benchctl.provisioners.base import AuthError, OfferRequest, ProviderError, Unavailable
    from benchctl.provisioners.catalog import catalog_price, credentials_line
    from benchctl.provisioners.registry import PROVIDERS
    from benchctl.report.render import render
    from benchctl.terminal_text import clean

    names = _chosen(only, PROVIDERS)
    providers = Providers(home())
    rows: list[dict[str, Any]] = []
    notes: dict[str, list[str]] = {"skipped": [], "errors": [], "answered": [], "catalog": []}
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    for name in names:
        if name == "skypilot" and not cloud:  # its offers are one cloud's, and asking starts its API server
            notes["skipped"].append("skypilot: skipped: pass --cloud CLOUD (e.g. lambda) to ask SkyPilot")
            continue
        try:
            provider = providers.get(name)
        except ProviderUnavailable as exc:
            notes["skipped"].append(f"{name}: skipped: {unnamed(name, clean(str(exc)))}")
            for gpu in gpus:
                for market in [m.lower() for m in markets] or ["on-demand", "spot"]:
                    listed = catalog_price(name, OfferRequest(gpu=gpu, count=count, market=market,
                                                              extra={"cloud": cloud} if cloud else {}))
                    if listed is not None and listed.market_listed:  # a list without this market's price: none
                        rows.append({"provider": name, "gpu": gpu, "count": count, "market": market, "region": None,
                                     "vcpus": None, "hourly_usd": listed.hourly_usd, "price_source": "catalog",
                                     "price_origin": listed.source, "price_as_of": listed.as_of, "host": None})
                        notes["catalog"].append(name)
            continue
        failed, found_any = False, False
        for gpu in gpus:
            for market in [m.lower() for m in markets] or ["on-demand", "spot"]:
                request = OfferRequest(gpu=gpu, count=count, market=market, label=f"{name} {gpu}x{count} {market}",
                                       extra={"cloud": cloud} if cloud else {})
                try:
                    found = provider.offers(request)
                except ProviderError as exc:
                    notes["errors"].append(f"{name}: {unnamed(name, clean(' '.join(str(exc).split())))}")
                    failed = isinstance(exc, AuthError | Unavailable)  # the next request would fail the same way
                    if failed:
                        break
                    continue
                found_any = found_any or bool(found)
                for offer in found:
                    priced = not PROVIDERS[name].priced_by_user
                    rows.append({"provider": name, "gpu": offer.gpu, "count": offer.count, "market": offer.market,
                                 "region": offer.region, "vcpus": offer.vcpus,
                                 "hourly_usd": offer.hourly_usd if priced else None,
                                 "price_source": "offer" if priced else None, "price_origin": name if priced else None,
                                 "price_as_of": now if priced else None, "host": offer.host})
            if failed:
                break
        if not failed and (found_any or PROVIDERS[name].extra is not None):
            notes["answered"].append(name)  # local and ssh without such nodes: no answer to the question
    rows.sort(key=lambda r: (r["hourly_usd"] is None, r["hourly_usd"] or 0.0, r["provider"]))
    notes["catalog"] = sorted(set(notes["catalog"]))
    fmt = fmt.lower()
    if fmt == "json":
        click.echo(render([], [], "json", payload={"offers": rows, **notes}))
    else:
        if rows:
            click.echo(render(rows, COLUMNS, fmt, title="offers"))
        else:
            click.echo(f"no offers for {', '.join(gpus)} x{count}")
        for origin, as_of in sorted({(r["price_origin"], r["price_as_of"]) for r in rows
                                     if r["price_source"] == "catalog"}):
            click.echo(f"catalog price (not an offer): {origin}, as of {as_of}")
        for line in notes["skipped"] + notes["errors"]:
            click.echo(line, err=True)
        if notes["catalog"]:
            click.echo(credentials_line(notes["catalog"]), err=True)
        if any(PROVIDERS[r["provider"]].priced_by_user for r in rows):
            click.echo("hourly_usd -: nobody bills these nodes; a campaign states their price_usd_per_hour", err=True)
    if not notes["answered"] and not notes["catalog"]:
        raise BenchctlError("no provider answered; `benchctl check` shows which credentials work")


def _chosen(only: tuple[str, ...], table: dict[str, Any]) -> list[str]:
    """The providers named with --provider (all, in the table's order, when none), refusing unknown names."""
    from benchctl.errors import UsageError

    unknown = [name for name in only if name.lower() not in table]
    if unknown:
        raise UsageError(f"unknown provider {unknown[0]!r}: one of {', '.join(table)}")
    wanted = {name.lower() for name in only}
    return [name for name in table if not wanted or name in wanted]

