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

    Every cell is shown, also those whose provider is not set up here or did not answer: such a cell
    is priced from a public catalog when one lists it (``price_source`` catalog: not an offer; its
    source and date below the table), and one line says which credentials would make prices live.
    A provider not set up whose cells have no catalog price exits 2; one that did not answer, 1."""
    from benchctl.campaign.spec import load_campaign
    from benchctl.engine.plan import COLUMNS, TERMINAL_PRIORITY
    from benchctl.engine.prepare import RunOptions, prepare_run
    from benchctl.provisioners.catalog import credentials_line
    from benchctl.report.render import render, terminal_lines
    from benchctl.terminal_text import clean

    campaign = load_campaign(file)
    prepared = prepare_run(campaign, RunOptions(renting=False))  # the checks run makes, without a store
    prepared.providers.close()  # e.g. SkyPilot's local API server, when plan started it
    result = prepared.plan
    if fmt == "json":
        click.echo(render([], [], "json", payload={"campaign": campaign.spec.name, "cells": result.rows,
                                                  "worst_case_usd": result.worst_case_usd,
                                                  "budget_usd": result.budget_usd, "warnings": result.warnings,
                                                  "problems": result.problems()}))
    else:
        click.echo(render(result.rows, COLUMNS, fmt, title=f"plan: {campaign.spec.name}", keep=TERMINAL_PRIORITY))
        click.echo(terminal_lines(result.spend_line()))
        for line in result.catalog_sources():
            click.echo(terminal_lines(line, "  "))
        for warning in result.warnings:
            click.echo(terminal_lines(f"warning: {clean(warning)}", "  "))  # provider messages are untrusted text
    if result.catalog_priced:
        click.echo(credentials_line(result.catalog_priced), err=True)
    result.raise_problems(catalog_ok=True)
