"""``benchctl check``: which providers' SDKs and credentials work, one line each (like ``sky check``)."""

from __future__ import annotations

from typing import Any

import click

from benchctl.cli.options import CliState, pass_state

UNPROBED = {"skypilot": "installed; its credentials are SkyPilot's own: `sky check` tests them (benchctl does "
                        "not, as asking would start SkyPilot's API server)"}
"""Providers ``check`` does not call, with what it says instead; they count as not verified."""
PROBE_TAG = "benchctl-check"
"""The tag ``check`` lists nodes by: a read-only, authenticated call that no campaign's tag matches."""


_WORD = {True: "ok", False: "no", None: "?"}


@click.command()
@click.argument("names", nargs=-1, metavar="[PROVIDER]...")
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table",
              show_default=True)
@pass_state
def check(state: CliState, names: tuple[str, ...], fmt: str) -> None:
    """Check each provider (or the PROVIDERs named): its SDK is installed, its credentials are set and
    its API accepts them (one read-only listing call; nothing is rented).

    \b
    Each line says ok, no (with what to set up) or ? (not verified: skypilot, whose credentials
    `sky check` tests). Exit 0 when every PROVIDER named is ok, or, with none named, when at least
    one provider that rents nodes (not local or ssh, which always work) is; 1 otherwise."""
    from benchctl.cli.offers import _chosen
    from benchctl.engine.providers import Providers, unnamed
    from benchctl.errors import BenchctlError, ProviderUnavailable
    from benchctl.home import home
    from benchctl.provisioners.base import ProviderError
    from benchctl.provisioners.registry import PROVIDERS
    from benchctl.report.render import render, terminal_lines
    from benchctl.terminal_text import clean

    providers = Providers(home())
    results: list[dict[str, Any]] = []
    for name in _chosen(names, PROVIDERS):
        try:
            provider = providers.get(name)
            if name in UNPROBED:
                results.append({"provider": name, "ok": None, "detail": UNPROBED[name]})
                continue
            provider.check_access([])
            provider.owned(PROBE_TAG)
            results.append({"provider": name, "ok": True, "detail": "ready"})
        except (ProviderUnavailable, ProviderError) as exc:
            results.append({"provider": name, "ok": False, "detail": unnamed(name, clean(" ".join(str(exc).split())))})
    if fmt.lower() == "json":
        click.echo(render([], [], "json", payload={"providers": results}))
    else:
        for r in results:
            click.echo(terminal_lines(f"{r['provider']:<9} {_WORD[r['ok']]:<3} {r['detail']}", " " * 14))
    renting = [r for r in results if PROVIDERS[r["provider"]].extra is not None]
    if names and not all(r["ok"] is True for r in results):
        raise BenchctlError("not every provider named works: see the lines above")
    if not names and not any(r["ok"] is True for r in renting):
        raise BenchctlError("no provider that rents nodes works: install its extra and set its credentials")
