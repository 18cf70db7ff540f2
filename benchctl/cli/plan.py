"""``benchctl plan FILE``: offers and worst-case spend per cell, without launching anything."""

from __future__ import annotations

import click

from benchctl.cli.options import CliState, pass_state


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=str))
@click.option("--format", "fmt", type=click.Choice(["table", "json", "md"]), default="table", show_default=True)
@pass_state
def plan(state: CliState, file: str, fmt: str) -> None:
    """Expand FILE's matrix and ask each provider for offers; launch nothing, write nothing.

    Every cell is shown, also those whose provider is not set up here (each says what it needs) or
    did not answer; then one line per such provider and a non-zero exit (2: set-up, 1: no answer)."""
    from benchctl.campaign.memory_fit import refuse_unfit
    from benchctl.campaign.spec import load_campaign
    from benchctl.engine.plan import COLUMNS, plan_campaign
    from benchctl.engine.providers import Providers
    from benchctl.home import home
    from benchctl.report.render import render
    from benchctl.terminal_text import clean

    campaign = load_campaign(file)
    refuse_unfit(campaign)
    providers = Providers(home(), campaign.spec.providers)
    try:
        result = plan_campaign(campaign, providers)
    finally:
        providers.close()  # e.g. SkyPilot's local API server, when plan started it
    if fmt == "json":
        click.echo(render([], [], "json", payload={"campaign": campaign.spec.name, "cells": result.rows,
                                                  "worst_case_usd": result.worst_case_usd,
                                                  "budget_usd": result.budget_usd, "warnings": result.warnings,
                                                  "problems": result.problems()}))
    else:
        click.echo(render(result.rows, COLUMNS, fmt, title=f"plan: {campaign.spec.name}"))
        click.echo(result.spend_line())
        for warning in result.warnings:
            click.echo(f"warning: {clean(warning)}")  # provider messages are untrusted text
    result.raise_problems()
