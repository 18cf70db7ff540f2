"""The preflight phase: capture the node's facts, take the live measurements, judge, act.

Within a time budget (``budget_s``, default 90 s): the facts snapshot (``payload.node.facts_capture``)
goes to ``artifacts/facts/``; the probes (``payload.node.probes``) add ``probes.json`` and, on GPUs,
one ``nccl-debug.<host>.<pid>.log`` per rank; the checks (``payload.node.checks``) judge the snapshot.
Each check is emitted as a ``sample`` event; ``artifacts/preflight.json`` holds ``{verdict, checks,
elapsed_s}``. A probe still running when the budget is spent makes its check ``fail`` ("timed
out"). Verdict ``fail`` raises BadNode (runner exit code 3).

Across nodes (``job.nodes`` > 1) the all_reduce probe is the cluster probe instead
(``payload.node.probes.cluster_rank``, on every node, CPU included, within its own budget,
``cluster_probe_budget_s``, so a slow first NCCL init between nodes is no failure):
each node's own all_reduce (``probes.json``'s ``allreduce``, judged by the node-local check as on
one node), each rail's and the whole cluster's (``facts/cluster.json``), judged by
``payload.node.cluster_checks``. Every node gets the same figures, so every node reaches the same
cross-node verdict. A node failing its node-local checks raises BadNode naming itself
(``node_rank``); a node the cross-node checks name (``intra_node_busbw``) is named by every node;
a fabric failure (node pair, falloff, rails) raises BadNode naming none. A cluster probe that
fails or runs out of budget (a peer node gone or failing its own preflight) is ``cluster_probe:
fail`` and ClusterProbeFailed (exit code 1), never a bad node here.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..events import EventLog
from ..job import Job
from . import toolchain
from .checks import Expect, Facts, judge, verdict
from .cluster_checks import bad_node_ranks, judge_cluster
from .fabric_checks import FabricExpect, fabric_checks
from .facts_capture import capture, faults, torch_facts, write_torch_json
from .thresholds import resolve

if TYPE_CHECKING:
    from ..comm.ranks import Ranks

NCCL_DEBUG_FILE = "nccl-debug.%h.%p.log"
"""One NCCL log per rank: NCCL expands %h to the host name and %p to the process id (ranks writing
one file would overwrite each other). ``payload.node.checks`` reads every ``nccl-debug*.log``."""
PROBE_OF_CHECK = {"cuda_init": "cuda_init", "gemm": "gemm_tflops", "hbm": "hbm_gbps", "nccl_allreduce": "allreduce"}


class BadNode(RuntimeError):
    """Preflight decided a node cannot run the cell: across nodes ``node_rank`` names it (None:
    this node on one node, or the fabric between nodes, which names no one node)."""

    def __init__(self, message: str, node_rank: int | None = None) -> None:
        super().__init__(message)
        self.node_rank = node_rank


class ClusterProbeFailed(RuntimeError):
    """The cross-node probe did not finish: a peer node is gone or failed its own preflight."""


def run_probes(job: Job, job_path: Path, facts_dir: Path, deadline: float,
               ranks: Ranks | None = None) -> tuple[dict[str, Any], list[str]]:
    """Live measurements; returns (probes, names of probes that ran out of time). The per-GPU
    probes run in a child process that exits (``payload.child``), freeing their CUDA contexts
    and cached memory; the all_reduce runs on the attempt's ``ranks`` (on ranks of its own without)."""
    from ..child import run_in_child
    from . import probes as live

    injected = faults()
    probes: dict[str, Any] = {}
    timed_out: list[str] = []
    wants_gpu = job.gpu.lower() != "cpu"
    names: list[str] = []
    if wants_gpu or injected.get("cuda_init"):
        names.append("cuda_init")
    if wants_gpu:
        names += ["gemm_tflops", "hbm_gbps"]
    if names:
        reported, reason = run_in_child(live.measure, (names, job.count, injected), deadline)
        probes.update(reported)
        unfinished = names[len(reported)] if reason and len(reported) < len(names) else None
        if unfinished and reason == "timed out":
            timed_out.append(unfinished)
        elif unfinished:
            probes[unfinished] = {"error": reason}
    cuda_failed = cuda_init_failed(job, probes)
    if job.nodes > 1 and not timed_out and not cuda_failed:  # a node that passes always joins the cluster probe
        _cluster(job, job_path, facts_dir, probes, ranks)
    elif wants_gpu and not timed_out and not cuda_failed:
        timed_out += _allreduce(job, job_path, facts_dir, deadline, probes, ranks)
    (facts_dir / "probes.json").write_text(json.dumps(probes, indent=2))
    return probes, timed_out


def cuda_init_failed(job: Job, probes: dict[str, Any]) -> bool:
    """A GPU job whose ``cuda_init`` probe failed: no rank may start on its GPUs (each would fail at
    CUDA's init, or hang in it on a broken driver). On CPU the probe's check skips: never."""
    return job.gpu.lower() != "cpu" and bool(probes.get("cuda_init", {}).get("error"))


@contextlib.contextmanager
def _nccl_debug(facts_dir: Path) -> Iterator[None]:
    """NCCL's INFO log, one file per rank under ``facts_dir``, for the ranks started inside."""
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(facts_dir / NCCL_DEBUG_FILE)}
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _allreduce(job: Job, job_path: Path, facts_dir: Path, deadline: float, probes: dict[str, Any],
               ranks: Ranks | None = None) -> list[str]:
    from ..comm.ranks import RanksFailed, launch

    try:
        with _nccl_debug(facts_dir):
            budget_s = max(0.0, deadline - time.monotonic())
            if ranks is None:
                launch(job_path, "preflight_allreduce", job.count, timeout_s=budget_s)
            else:  # started here, the attempt's ranks keep this NCCL_DEBUG for their later phases
                ranks.run("preflight_allreduce", timeout_s=budget_s)
    except RanksFailed as exc:
        if "timed out" in str(exc):
            return ["allreduce"]
        probes["allreduce"] = {"wrong": -1, "error": str(exc)}
        return []
    result = facts_dir / "allreduce.json"
    if result.is_file():
        probes["allreduce"] = json.loads(result.read_text())
    return []


def _cluster(job: Job, job_path: Path, facts_dir: Path, probes: dict[str, Any], ranks: Ranks | None = None) -> None:
    """The cross-node probe on the attempt's ``ranks`` (on ranks of its own without) within its own
    budget (``cluster_probe_budget_s``): ``probes["cluster"]`` (also ``cluster.json``) the figures
    or ``{"error": ...}``, and on GPUs ``probes["allreduce"]`` this node's own figure."""
    from ..comm.ranks import Ranks, RanksFailed

    own = ranks if ranks is not None else Ranks(job_path, job.count)
    budget_s = resolve(job.preflight_thresholds)["cluster_probe_budget_s"]  # its own: a first NCCL init is slow
    try:
        with _nccl_debug(facts_dir):
            result = own.run("preflight_cluster", timeout_s=budget_s)
    except RanksFailed as exc:
        reason = (f"the other nodes' ranks did not finish within the cluster probe's {budget_s:.0f} s "
                  "(cluster_probe_budget_s)"
                  if "timed out" in str(exc) else str(exc))
        probes["cluster"] = {"error": f"{reason}: a peer node is gone or failed its own preflight (see every "
                                      "node's exit code)"}
        return
    finally:
        if ranks is None:
            own.close()
    if not result:
        probes["cluster"] = {"error": "the cluster probe returned nothing"}
        return
    probes["cluster"] = result
    (facts_dir / "cluster.json").write_text(json.dumps(result, indent=2))
    mine = [n for n in result.get("intra_node", []) if n["node_rank"] == job.node_rank]
    if mine and job.gpu.lower() != "cpu":
        probes["allreduce"] = {"bytes": result["bytes"], **{k: mine[0][k] for k in ("busbw_gbps", "algbw_gbps",
                                                                                   "wrong")}}


def run_preflight(job: Job, job_path: Path, log: EventLog, ranks: Ranks | None = None) -> dict[str, Any]:
    started = time.monotonic()
    thresholds = resolve(job.preflight_thresholds)
    deadline = started + thresholds["budget_s"]
    workdir = job_path.parent
    facts_dir = workdir / "artifacts" / "facts"
    capture(facts_dir, deadline, torch_json=False)
    # as the profile's ranks see it
    toolchain.write(facts_dir, {**os.environ, **job.env}, toolchain.compile_wanted(job))
    probes, timed_out = run_probes(job, job_path, facts_dir, deadline, ranks)
    # torch's view from the runner alone when no rank may start (``cuda_init_failed``)
    write_torch_json(facts_dir, _torch_facts(job, facts_dir, deadline,
                                             None if cuda_init_failed(job, probes) else ranks))
    checks = judge(Facts(facts_dir), Expect(job.gpu, job.count), thresholds) + _fabric(job, facts_dir)
    for check in checks:
        if PROBE_OF_CHECK.get(check["name"]) in timed_out:
            check.update(status="fail", hint=f"timed out: the preflight budget of {thresholds['budget_s']:.0f} s "
                                             "ran out during this check")
    local_failed = [c for c in checks if c["status"] == "fail"]
    cross = _cross_node_checks(job, probes, thresholds)
    checks += cross
    for check in checks:
        check["elapsed_s"] = round(time.monotonic() - started, 3)
        log.emit("sample", phase="preflight", **check)
    result = {"verdict": verdict(checks), "checks": checks, "elapsed_s": round(time.monotonic() - started, 3)}
    report = workdir / "artifacts" / "preflight.json"
    report.write_text(json.dumps(result, indent=2, default=str))
    for path in [report, *sorted(facts_dir.iterdir())]:
        relative = path.relative_to(workdir).as_posix()
        log.emit("artifact", phase="preflight", name=path.name, path=relative, bytes=path.stat().st_size)
    _act(job, local_failed, cross)
    return {"verdict": result["verdict"], "warn": [c["name"] for c in checks if c["status"] == "warn"],
            "elapsed_s": result["elapsed_s"]}


def _torch_facts(job: Job, facts_dir: Path, deadline: float, ranks: Ranks | None) -> dict[str, Any]:
    """torch's view of the node (``torch.json``) from the attempt's ranks, which import torch for
    the later phases anyway (the runner never does: one ``import torch`` less per attempt). In the
    runner itself only without ranks, when they fail, or across nodes once the ranks are gone
    (starting a new set would wait for the other nodes)."""
    from ..comm.ranks import RanksFailed

    if ranks is not None and (job.nodes == 1 or ranks.started) and deadline > time.monotonic():
        try:
            with _nccl_debug(facts_dir):  # ranks started here keep NCCL's log for their later phases
                facts = ranks.run("preflight_torch", timeout_s=max(5.0, deadline - time.monotonic()))
            if facts:
                return facts
        except RanksFailed:
            pass  # judged from the runner's own view below
    return torch_facts()


def _fabric(job: Job, facts_dir: Path) -> list[dict[str, Any]]:
    """This node's fabric checks (``payload.node.fabric_checks``: NICs, GPUDirect RDMA, NCCL's NIC use,
    RoCE GID, PXN, transport) for a GPU job across nodes, judged on the snapshot and the NCCL log of
    the cluster probe's cross-node communicator, against what was sold (``job.fabric``); none on one
    node or on CPU "nodes" (no fabric)."""
    if job.nodes == 1 or job.gpu.lower() == "cpu":
        return []
    return fabric_checks(Facts(facts_dir), job.env, FabricExpect.parse(job.fabric))


def _cross_node_checks(job: Job, probes: dict[str, Any], thresholds: dict[str, float]) -> list[dict[str, Any]]:
    """The cross-node checks (none on one node); ``cluster_probe: fail`` when the probe did not finish."""
    if job.nodes == 1:
        return []
    cluster = probes.get("cluster")
    if not cluster:
        return [{"name": "cluster_probe", "status": "skip", "observed": None, "expected": None,
                 "hint": "not run: this node's own probes failed or ran out of time"}]
    if "error" in cluster:
        return [{"name": "cluster_probe", "status": "fail", "observed": None, "expected": None,
                 "hint": cluster["error"]}]
    return judge_cluster(cluster, job.gpu, job.count, thresholds, set(job.preflight_thresholds))


def _reasons(checks: list[dict[str, Any]]) -> str:
    return "; ".join(f"{c['name']}: {c['hint']}" for c in checks if c["status"] == "fail")


def _act(job: Job, local_failed: list[dict[str, Any]], cross: list[dict[str, Any]]) -> None:
    """Raise for a failed verdict: this node's own checks first, then the cluster's (see module doc)."""
    if local_failed:
        raise BadNode(("preflight failed: " if job.nodes == 1 else f"preflight failed on node {job.node_rank}: ")
                      + _reasons(local_failed), job.node_rank if job.nodes > 1 else None)
    if any(c["name"] == "cluster_probe" and c["status"] == "fail" for c in cross):
        raise ClusterProbeFailed("preflight's cluster probe failed: " + _reasons(cross))
    if any(c["status"] == "fail" for c in cross):
        named = bad_node_ranks(cross)
        who = f"node {named[0]} is bad" if named else "the fabric between the nodes is bad (no one node named)"
        raise BadNode(f"preflight failed across nodes, {who}: {_reasons(cross)}", named[0] if named else None)
