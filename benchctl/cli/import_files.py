"""``benchctl import FILE...``: result records and nccl-tests logs taken elsewhere join the store."""

from __future__ import annotations

from pathlib import Path

import click

from benchctl.cli.options import CliState, pass_state


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--campaign", help="The campaign the imports join (default: imported); never one benchctl ran.")
@click.option("--config", "config", metavar="KEY",
              help="The cell an nccl-tests log measured (needed when the campaign has several).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table",
              show_default=True, help="json: one object with what was imported, for scripts.")
@pass_state
def import_command(state: CliState, files: tuple[Path, ...], campaign: str | None, config: str | None,
                   fmt: str) -> None:
    """Import result records (.json/.yaml) and nccl-tests logs; all or nothing."""
    import gc

    from benchctl.results.importer import import_files
    from benchctl.terminal_text import clean

    collecting = gc.isenabled()
    gc.disable()  # the records read hold no cycles: the collector's passes over them found nothing (~10 % of the CPU)
    try:
        summary = import_files(state.engine(), list(files), campaign, config)
    finally:
        if collecting:
            gc.enable()
    if fmt == "json":
        from benchctl.report.render import render

        click.echo(render([], [], "json", payload={
            "campaign": summary.campaign, "results": summary.results, "skipped": summary.skipped,
            "collectives": summary.collectives, "logs_read_as": list(summary.logs_read_as),
            "left_out": summary.left_out or None}))
        return
    skipped = f", skipped {summary.skipped} rows without a result" if summary.skipped else ""
    click.echo(f"imported {summary.results} results and {summary.collectives} nccl-tests logs into campaign "
               f"{clean(summary.campaign)}{skipped}; `benchctl leaderboard` ranks them")
    for line in summary.logs_read_as:
        click.echo(f"  read {clean(line)}")
    if summary.left_out:
        click.echo(f"  {clean(summary.left_out)}")
