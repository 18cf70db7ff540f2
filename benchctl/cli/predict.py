"""``benchctl predict``: the step time a workload would take on a machine, before renting it."""

from __future__ import annotations

import click

from benchctl.cli.options import CliState, pass_state


@click.command("predict")
@click.option("--model", help="A preset, e.g. nanochat-d26 (or give --params and --flops-per-token).")
@click.option("--params", type=click.IntRange(min=1), help="Another model: its parameter count.")
@click.option("--flops-per-token", type=click.FloatRange(min=0, min_open=True),
              help="Another model: its training FLOPs per token (forward and backward, e.g. 6 × params).")
@click.option("--gpu", required=True, help="GPU model, e.g. H100_SXM (benchctl's names: see `benchctl offers`).")
@click.option("--count", type=click.IntRange(min=1), required=True, help="GPUs per node.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--precision", type=click.Choice(["bf16", "fp8"]), default="bf16", show_default=True)
@click.option("--attention", type=click.Choice(["fa3", "sdpa"]), default="fa3", show_default=True,
              help="nanochat: a window-aware kernel (Flash-Attention 3) or SDPA, which computes the whole context.")
@click.option("--interconnect", type=click.Choice(["nvswitch_mesh", "nvlink_pairs", "pcie_only"]),
              help="Default: the GPU model's usual board (SXM: nvswitch_mesh, NVL: nvlink_pairs, PCIe: pcie_only).")
@click.option("--tokens-per-step", type=click.IntRange(min=1), default=524_288, show_default=True)
@click.option("--sequence-len", type=click.IntRange(min=1), default=2048, show_default=True)
@click.option("--no-store", is_flag=True, help="Published defaults only: ignore this store's measurements.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@pass_state
def predict_command(state: CliState, model: str | None, params: int | None, flops_per_token: float | None, gpu: str,
                    count: int, nodes: int, precision: str, attention: str, interconnect: str | None,
                    tokens_per_step: int, sequence_len: int, no_store: bool, fmt: str) -> None:
    """Predicted step time and its parts (compute, optimizer updates, exposed communication), with a
    range, and where every input came from (measured in this store, imported, or a published default)."""
    from benchctl.errors import UsageError
    from benchctl.payload.node.gpu_models import canonical, unknown_model
    from benchctl.predict.service import predict_for
    from benchctl.report.render import render, terminal_lines

    name = canonical(gpu)
    if name is None or name == "cpu":
        raise UsageError(unknown_model(gpu) if name is None else "predict needs a GPU model, not cpu")
    if (model is None) == (params is None):
        raise UsageError("give --model (a preset, e.g. nanochat-d26) or --params with --flops-per-token, not both")
    if params is not None and flops_per_token is None:
        raise UsageError("--params needs --flops-per-token (training FLOPs per token, e.g. 6 × params)")
    engine = None if no_store else state.engine()
    prediction = predict_for(engine, name, count, nodes, precision, model=model, params=params,
                             flops_per_token=flops_per_token, tokens_per_step=tokens_per_step,
                             sequence_len=sequence_len, attention=attention, interconnect=interconnect)
    report = {"gpu": name, "count": count, "nodes": nodes, "precision": precision, **prediction.as_dict()}
    if fmt == "json":
        click.echo(render([], [], "json", payload=report))
        return
    click.echo(terminal_lines(f"{report['model']} on {nodes} × {count} {name} ({precision}): step "
               f"{report['step_time_ms']:.1f} ms (range {report['step_time_ms_low']:.1f}–"
               f"{report['step_time_ms_high']:.1f}) = compute {report['compute_ms']:.1f} + optimizer updates "
               f"{report['optimizer_update_ms']:.1f} + exposed communication {report['comm_ms']:.1f} "
               f"(of {report['comm_total_ms']:.1f} ms of collectives)", indent="  "))
    rows = [{"input": key, "value": f"{v['value']:.4g}", "range": f"{v['low']:.4g}–{v['high']:.4g}",
             "kind": v["kind"], "source": v["source"]} for key, v in report["sources"].items()]
    click.echo(render(rows, ["input", "value", "range", "kind", "source"], "table", title="inputs"))
    for note in report["notes"]:
        click.echo(terminal_lines(f"note: {note}", indent="  "))
