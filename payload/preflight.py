"""The preflight phase (minimal): facts about the node and a verdict on whether it can run the cell.

Each check is emitted as a ``sample`` event ``{phase: "preflight", name, status: pass|warn|fail|skip,
observed, expected, hint, elapsed_s}`` and the facts are written to ``artifacts/preflight.json``.
A failing check makes the node bad (runner exit code 3). The full suite of checks is a later issue.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from payload.events import EventLog
from payload.job import Job

Check = dict[str, Any]


class BadNode(RuntimeError):
    """Preflight decided this node cannot run the cell."""


def _check(name: str, status: str, observed: Any, expected: Any, hint: str = "") -> Check:
    return {"name": name, "status": status, "observed": observed, "expected": expected, "hint": hint}


def check_python(job: Job) -> Check:
    ok = tuple(map(int, platform.python_version_tuple()[:2])) >= (3, 10)
    return _check("python", "pass" if ok else "fail", platform.python_version(), ">= 3.10",
                  "" if ok else "use an image with Python 3.10 or newer")


def check_torch(job: Job) -> Check:
    import torch

    return _check("torch", "pass", {"torch": torch.__version__, "cuda": torch.version.cuda}, "importable")


def check_devices(job: Job) -> Check:
    import torch

    if job.gpu.lower() == "cpu":
        return _check("gpu_inventory", "skip", "cpu cell", "no GPU needed")
    if not torch.cuda.is_available():
        return _check("gpu_inventory", "fail", "CUDA not available", f"{job.count}× {job.gpu}",
                      "the node has no usable GPU: replace it")
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    ok = len(names) >= job.count
    return _check("gpu_inventory", "pass" if ok else "fail", names, f"{job.count}× {job.gpu}",
                  "" if ok else "fewer GPUs than the cell asked for: replace the node")


def check_cpu(job: Job) -> Check:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ok = usable >= job.count
    return _check("cpu", "pass" if ok else "warn", {"usable_cpus": usable, "cpu_count": os.cpu_count()},
                  f">= {job.count} (one per rank)", "" if ok else "ranks will share CPUs: step times will suffer")


CHECKS: list[Callable[[Job], Check]] = [check_python, check_torch, check_devices, check_cpu]


def run_preflight(job: Job, workdir: Path, log: EventLog) -> dict[str, Any]:
    results = []
    for check in CHECKS:
        start = time.perf_counter()
        result = check(job)
        result["elapsed_s"] = round(time.perf_counter() - start, 6)
        log.emit("sample", phase="preflight", **result)
        results.append(result)
    artifact = workdir / "artifacts" / "preflight.json"
    artifact.write_text(json.dumps(results, indent=2, default=str))
    log.emit("artifact", phase="preflight", name="preflight.json", path="artifacts/preflight.json",
             bytes=artifact.stat().st_size)
    failed = [r["name"] for r in results if r["status"] == "fail"]
    if failed:
        raise BadNode("preflight failed: " + ", ".join(failed))
    return {"checks": len(results), "warn": sum(r["status"] == "warn" for r in results)}
