"""The preflight phase: capture the node's facts, take the live measurements, judge, act.

Within a time budget (``budget_s``, default 90 s): the facts snapshot (``payload.facts_capture``)
goes to ``artifacts/facts/``; the probes (``payload.probes``) add ``probes.json`` and, on GPUs,
one ``nccl-debug.<host>.<pid>.log`` per rank; the checks (``payload.checks``) judge the snapshot.
Each check is emitted as a ``sample`` event; ``artifacts/preflight.json`` holds ``{verdict, checks,
elapsed_s}``. A probe still running when the budget is spent makes its check ``fail`` ("timed
out"). Verdict ``fail`` raises BadNode (runner exit code 3).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .checks import Expect, Facts, judge, verdict
from .events import EventLog
from .facts_capture import capture, faults
from .job import Job
from .thresholds import resolve

if TYPE_CHECKING:
    from .distributed import Ranks

NCCL_DEBUG_FILE = "nccl-debug.%h.%p.log"
"""One NCCL log per rank: NCCL expands %h to the host name and %p to the process id (ranks writing
one file would overwrite each other). ``payload.checks`` reads every ``nccl-debug*.log``."""
PROBE_OF_CHECK = {"cuda_init": "cuda_init", "gemm": "gemm_tflops", "hbm": "hbm_gbps", "nccl_allreduce": "allreduce"}


class BadNode(RuntimeError):
    """Preflight decided this node cannot run the cell."""


def run_probes(job: Job, job_path: Path, facts_dir: Path, deadline: float,
               ranks: Ranks | None = None) -> tuple[dict[str, Any], list[str]]:
    """Live measurements; returns (probes, names of probes that ran out of time). The per-GPU
    probes run in a child process that exits (``payload.child``), freeing their CUDA contexts
    and cached memory; the all_reduce runs on the attempt's ``ranks`` (on ranks of its own without)."""
    from . import probes as live
    from .child import run_in_child

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
    if wants_gpu and not timed_out and not probes.get("cuda_init", {}).get("error"):
        timed_out += _allreduce(job, job_path, facts_dir, deadline, probes, ranks)
    (facts_dir / "probes.json").write_text(json.dumps(probes, indent=2))
    return probes, timed_out


def _allreduce(job: Job, job_path: Path, facts_dir: Path, deadline: float, probes: dict[str, Any],
               ranks: Ranks | None = None) -> list[str]:
    import os

    from .distributed import RanksFailed, launch

    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(facts_dir / NCCL_DEBUG_FILE)}
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
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
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    result = facts_dir / "allreduce.json"
    if result.is_file():
        probes["allreduce"] = json.loads(result.read_text())
    return []


def run_preflight(job: Job, job_path: Path, log: EventLog, ranks: Ranks | None = None) -> dict[str, Any]:
    started = time.monotonic()
    thresholds = resolve(job.preflight_thresholds)
    deadline = started + thresholds["budget_s"]
    workdir = job_path.parent
    facts_dir = workdir / "artifacts" / "facts"
    capture(facts_dir, deadline)
    _, timed_out = run_probes(job, job_path, facts_dir, deadline, ranks)
    checks = judge(Facts(facts_dir), Expect(job.gpu, job.count), thresholds)
    for check in checks:
        if PROBE_OF_CHECK.get(check["name"]) in timed_out:
            check.update(status="fail", hint=f"timed out: the preflight budget of {thresholds['budget_s']:.0f} s "
                                             "ran out during this check")
        check["elapsed_s"] = round(time.monotonic() - started, 3)
        log.emit("sample", phase="preflight", **check)
    result = {"verdict": verdict(checks), "checks": checks, "elapsed_s": round(time.monotonic() - started, 3)}
    report = workdir / "artifacts" / "preflight.json"
    report.write_text(json.dumps(result, indent=2, default=str))
    for path in [report, *sorted(facts_dir.iterdir())]:
        relative = path.relative_to(workdir).as_posix()
        log.emit("artifact", phase="preflight", name=path.name, path=relative, bytes=path.stat().st_size)
    if result["verdict"] == "fail":
        failed = [c["name"] for c in checks if c["status"] == "fail"]
        raise BadNode("preflight failed: " + "; ".join(f"{c['name']}: {c['hint']}" for c in checks
                                                       if c["name"] in failed))
    return {"verdict": result["verdict"], "warn": [c["name"] for c in checks if c["status"] == "warn"],
            "elapsed_s": result["elapsed_s"]}
