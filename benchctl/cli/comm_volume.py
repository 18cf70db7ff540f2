"""``benchctl comm-volume``: the communication volume model of the payload's optimizer."""

from __future__ import annotations

import click


@click.command("comm-volume")
@click.option("--model", required=True, help="Model preset, e.g. nanochat-d26.")
@click.option("--world-size", type=click.IntRange(min=1), required=True, help="Ranks (GPUs) sharing the step.")
@click.option("--vocab-size", type=click.IntRange(min=1), help="Vocabulary override (default: the preset's).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def comm_volume_command(model: str, world_size: int, vocab_size: int | None, fmt: str) -> None:
    """Bytes and calls per collective in one optimizer step (ZeRO-2 Muon + AdamW)."""
    from benchctl.errors import UsageError
    from benchctl.payload.workloads.presets import UnknownPreset
    from benchctl.report.render import render, terminal_lines

    try:
        from benchctl.payload.workloads.commvolume import comm_volume
    except ModuleNotFoundError as exc:
        raise UsageError(f"comm-volume needs torch on this machine ({exc}): pip install 'benchctl[local]'") from None
    try:
        report = comm_volume(model, world_size, vocab_size)
    except UnknownPreset as exc:
        raise UsageError(str(exc)) from None
    if fmt == "json":
        click.echo(render([], [], "json", payload=report))
        return
    click.echo(terminal_lines(f"{model} at world size {world_size}: scaling params {report['scaling_params']:,}, "
                              f"{report['total_bytes'] / 1e9:.3f} GB per step "
                              f"({report['total_bytes_at_2_bytes_per_element'] / 1e9:.3f} GB at 2 bytes per element)",
                              "  "))
    click.echo(render(report["groups"], list(report["groups"][0]), "table", title="groups"))
    click.echo(render(report["ops"], list(report["ops"][0]), "table", title="collectives"))
