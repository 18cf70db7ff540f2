"""The preflight phase: capture the node's facts, take the live measurements, judge, act.

Within a time budget (``budget_s``, default 90 s): the facts snapshot (``payload.facts_capture``)
goes to ``artifacts/facts/``; the probes (``payload.probes``) add ``probes.json`` and, on GPUs,
``nccl-debug.log``; the checks (``payload.checks``) judge the snapshot. Each check is emitted as a
``sample`` event; ``artifacts/preflight.json`` holds ``{verdict, checks, elapsed_s}``. A probe
still running when the budget is spent makes its check ``fail`` ("timed out"). Verdict ``fail``
raises BadNode (runner exit code 3).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from payload.checks import Expect, Facts, judge, verdict
from payload.events import EventLog
from payload.facts_capture import capture, faults
from payload.job import Job
from payload.thresholds import resolve

PROBE_OF_CHECK = {"cuda_init": "cuda_init", "gemm": "gemm_tflops", "hbm": "hbm_gbps", "nccl_allreduce": "allreduce"}


class BadNode(RuntimeError):
    """Preflight decided this node cannot run the cell."""


def _with_deadline(fn: Callable[[], Any], deadline: float) -> tuple[bool, Any]:
    """(finished, value): run ``fn`` in a thread and stop waiting at ``deadline``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except Exception as exc:  # reported as the probe's error
            box["value"] = {"error": f"{type(exc).__name__}: {exc}"}

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    return not thread.is_alive(), box.get("value")


def run_probes(job: Job, job_path: Path, facts_dir: Path, deadline: float) -> tuple[dict[str, Any], list[str]]:
    """Live measurements; returns (probes, names of probes that ran out of time)."""
    from payload import probes as live

    injected = faults()
    probes: dict[str, Any] = {}
    timed_out: list[str] = []
    wants_gpu = job.gpu.lower() != "cpu"
    steps: list[tuple[str, Callable[[], Any]]] = []
    if wants_gpu or injected.get("cuda_init"):
        steps.append(("cuda_init", lambda: live.cuda_init(job.count, injected)))
    if wants_gpu:
        steps += [("gemm_tflops", lambda: live.gemm_tflops(job.count)), ("hbm_gbps", lambda: live.hbm_gbps(job.count))]
    for name, fn in steps:
        finished, value = _with_deadline(fn, deadline)
        if not finished:
            timed_out.append(name)
            break
        probes[name] = value
        if name == "cuda_init" and value.get("error"):
            break  # nothing else can run on a GPU that does not initialise
    if wants_gpu and not timed_out and not probes.get("cuda_init", {}).get("error"):
        timed_out += _allreduce(job, job_path, facts_dir, deadline, probes)
    (facts_dir / "probes.json").write_text(json.dumps(probes, indent=2))
    return probes, timed_out


def _allreduce(job: Job, job_path: Path, facts_dir: Path, deadline: float, probes: dict[str, Any]) -> list[str]:
    import os

    from payload.distributed import RanksFailed, launch

    log = facts_dir / "nccl-debug.log"
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(log)}
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        launch(job_path, "preflight_allreduce", job.count, timeout_s=max(0.0, deadline - time.monotonic()))
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


def run_preflight(job: Job, job_path: Path, log: EventLog) -> dict[str, Any]:
    started = time.monotonic()
    thresholds = resolve(job.preflight_thresholds)
    deadline = started + thresholds["budget_s"]
    workdir = job_path.parent
    facts_dir = workdir / "artifacts" / "facts"
    capture(facts_dir, deadline)
    _, timed_out = run_probes(job, job_path, facts_dir, deadline)
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
