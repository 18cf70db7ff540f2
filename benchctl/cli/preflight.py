"""``benchctl preflight``: judge this machine, or a saved facts snapshot (``--replay DIR``).

A snapshot of one node of a cluster (its ``cluster.json``, the cluster probe's figures) is judged
as the payload judged it: the node's own checks, then its fabric checks (GPU snapshots) and the
cross-node checks (``payload.node.cluster_checks``), with the default thresholds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


def _expectation(text: str | None, replay: str | None) -> tuple[str, int]:
    """``gpu=H100_SXM,count=8`` → (gpu, count); without it, what the snapshot shows (or cpu × 1): a
    model outside the table by the name its driver reports (``NVIDIA B300 SXM6 AC``)."""
    from benchctl.errors import UsageError
    from benchctl.payload.node.checks import Facts, detected_model

    if text is None:
        if replay is None:
            return "cpu", 1
        facts = Facts(Path(replay))
        from benchctl.payload.node.node_facts import parse_query_csv

        rows = parse_query_csv(facts.text("nvidia-smi-query.csv") or "")
        return (detected_model(facts) or "cpu", len(rows)) if rows else ("cpu", _cluster_count(Path(replay)))
    fields = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        fields[name.strip()] = value.strip()
    if set(fields) - {"gpu", "count"} or not fields.get("gpu"):
        raise UsageError(f"--expect {text!r}: write gpu=NAME[,count=N], e.g. gpu=H100_SXM,count=8")
    count = fields.get("count", "1")
    if not count.isdigit() or int(count) < 1:
        raise UsageError(f"--expect {text!r}: count must be a whole number >= 1")
    return _gpu(fields["gpu"], text), int(count)


def _cluster_count(directory: Path) -> int:
    """The ranks per node a cluster snapshot's ``cluster.json`` names; 1 without a readable one."""
    import json

    try:
        count = json.loads((directory / "cluster.json").read_text()).get("count")
    except (OSError, ValueError, AttributeError):
        return 1
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 1 else 1


def _gpu(name: str, text: str) -> str:
    """The model name ``name`` means (``payload.node.gpu_models.canonical``: ``h100-sxm`` is ``H100_SXM``,
    ``H200_SXM`` is ``H200``), or ``name`` itself for a model outside the table (``B300``, ``RTX 4090``:
    judged on what does not depend on the model); UsageError listing the known names for a bare
    family (``H100``) or a misspelt table model (``h100 sxm5``)."""
    from benchctl.errors import UsageError
    from benchctl.payload.node.gpu_models import canonical, outside_table, unknown_model

    model = canonical(name) or outside_table(name)
    if model is None:
        raise UsageError(f"--expect {text!r}: {unknown_model(name)} (a GPU outside this list is judged by "
                         "its own name, e.g. gpu=B300 or gpu='RTX 4090')")
    return model


@click.command("preflight")
@click.option("--replay", type=click.Path(exists=True, file_okay=False), help="Judge a saved facts snapshot.")
@click.option("--expect", "expect_text", metavar="gpu=NAME,count=N", help="What the node should be.")
@click.option("--fabric", "fabric_text", metavar="TEXT",
              help="What was sold between nodes (cluster replays): ib 8x400, roce 16x200, efa 32, none.")
@click.option("--out", type=click.Path(file_okay=False), help="Keep this machine's snapshot in DIR.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def preflight_command(replay: str | None, expect_text: str | None, fabric_text: str | None, out: str | None,
                      fmt: str) -> None:
    """Prove a node healthy: exit 0 on pass or warn, 3 on fail."""
    import json
    import sys
    import tempfile
    import time

    from benchctl.payload.node.checks import Expect, Facts, judge, verdict
    from benchctl.payload.node.thresholds import resolve
    from benchctl.report.render import render, terminal_lines
    from benchctl.results.check_status import CheckStatus

    gpu, count = _expectation(expect_text, replay)
    started = time.monotonic()
    if replay is not None:
        directory = Path(replay)
    else:
        directory = Path(out) if out else Path(tempfile.mkdtemp(prefix="benchctl-preflight-"))
        _capture_here(directory, gpu, count, started + resolve()["budget_s"])
    checks = judge(Facts(directory), Expect(gpu, count), resolve())
    nodes = None
    if replay is not None:
        nodes, cross = _cross_node(directory, gpu, count, fabric_text)
        checks += cross
    result = {"verdict": verdict(checks), "checks": checks, "elapsed_s": round(time.monotonic() - started, 3),
              "expect": {"gpu": gpu, "count": count}, "facts": str(directory)}
    if nodes is not None:
        result["nodes"] = nodes
    if fmt == "json":
        click.echo(json.dumps(result, indent=2, default=str))
    else:
        rows = [{**c, "observed": _observed(c["observed"])} for c in checks]
        click.echo(render(rows, ["name", "status", "observed", "hint"], "table"))
        shape = f"{count}× {gpu}" + (f", a node of {nodes}" if nodes is not None else "")
        click.echo(terminal_lines(f"verdict: {result['verdict']} ({shape}, {result['elapsed_s']:.1f} s; facts in "
                                  f"{directory})", "  "))
    if result["verdict"] == CheckStatus.FAIL:
        sys.exit(3)


OBSERVED_SHOWN = 300
"""Characters of a check's observed value a table shows (whole items; ``--format json`` has it all)."""


def _observed(value: Any) -> str:
    """A check's observed value for the table: its JSON whole (the table wraps it), or its first
    items up to ``OBSERVED_SHOWN`` characters and a note (a snapshot is untrusted and may be huge)."""
    import json

    text = json.dumps(value, default=str)
    if len(text) <= OBSERVED_SHOWN:
        return text
    cut = text.rfind(", ", 0, OBSERVED_SHOWN)
    return text[:cut if cut > 0 else OBSERVED_SHOWN] + ", … (--format json has it all)"


def _cross_node(directory: Path, gpu: str, count: int, fabric_text: str | None = None,
                ) -> tuple[int | None, list[dict[str, Any]]]:
    """(nodes, checks) of a snapshot with a ``cluster.json``: its fabric checks (GPU only, as the
    payload, against ``fabric_text``: what was sold, unknown without) and the cross-node checks;
    (None, []) without one. UsageError for a ``cluster.json`` that is no cluster probe result, or
    a ``fabric_text`` that is no fabric."""
    import json

    from benchctl.errors import UsageError
    from benchctl.payload.node.checks import Facts
    from benchctl.payload.node.cluster_checks import judge_cluster
    from benchctl.payload.node.fabric_checks import FabricError, FabricExpect, fabric_checks
    from benchctl.payload.node.thresholds import resolve

    try:
        sold = FabricExpect.parse(fabric_text)
    except FabricError as exc:
        raise UsageError(f"--fabric: {exc}") from None
    path = directory / "cluster.json"
    if not path.is_file():
        return None, []
    try:
        cluster = json.loads(path.read_text())
        nodes = cluster["nodes"]
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 2:
            raise ValueError(f"nodes is {nodes!r}, not a cluster's 2 or more")
        cross = judge_cluster(cluster, gpu, count, resolve(), set())
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path} is not a cluster probe result ({type(exc).__name__}: {exc}); "
                         "replay the facts/ directory of a cluster attempt as the payload wrote it") from None
    fabric = [] if gpu.lower() == "cpu" else fabric_checks(Facts(directory), {}, sold)
    return nodes, fabric + cross


def _capture_here(directory: Path, gpu: str, count: int, deadline: float) -> None:
    import tempfile

    from benchctl.errors import UsageError
    from benchctl.payload.job import Job
    from benchctl.payload.node.facts_capture import capture
    from benchctl.payload.node.preflight import run_probes

    try:
        capture(directory, deadline)
    except ModuleNotFoundError as exc:
        raise UsageError(f"judging this machine needs torch ({exc}): pip install 'benchctl[local]'") from None
    with tempfile.TemporaryDirectory(prefix="benchctl-preflight-job-") as work:
        job = Job(campaign="preflight", cell="here", attempt=1, token="preflight", gpu=gpu, count=count,
                  phases=["preflight"])
        job_path = Path(work) / "job.json"
        job_path.write_text(job.to_json())
        (Path(work) / "artifacts" / "logs").mkdir(parents=True)
        run_probes(job, job_path, directory, deadline)
