"""The payload's GPU path on one real GPU: preflight, collectives and the profile at world size 1.

    python scripts/bench_gpu.py --out DIR [--budget-s 480]      # on a machine with one NVIDIA GPU
    python scripts/bench_gpu.py --out DIR --cpu                 # the same stages, tiny, on CPU (a dry run)

Needs only the payload's own dependencies (Python and torch), so it runs on a bare GPU machine
from a checkout. Each stage writes a job.json and runs ``python -m payload run job.json`` exactly
as the controller starts it on a node, in a folder of its own under ``DIR/work``, with its own
timeout; a stage that fails or hangs is recorded and the next one runs. While a stage runs,
``nvidia-smi`` is read every 0.5 s for the device's memory in use (the card's view: CUDA context,
allocator cache and all), next to torch's ``max_memory_allocated`` that the profile records and
the estimate ``benchctl plan`` uses (``payload.workloads.memory_estimate``).

Stages, cheapest first: preflight (+ p2p, a skip on one GPU), the collectives sweep, then the
profile: nanochat-d12 compiled with and without phase timing (the overhead), nanochat-d20 compiled,
both eager, and nanochat-d26 at device batch 8 (the 80 GB default) and 16 while time is left.
A stage's timeout is cut to what is left of ``--budget-s``; under 30 s left, no stage starts.

Writes ``DIR/results.json`` after every stage (phase summaries, wall times, exit codes, the
estimate and the memory high-water marks) and ``DIR/stages.tar.gz`` (each stage's events.jsonl,
payload.log, rank logs and facts) at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from payload.events import read_events  # noqa: E402
from payload.job import PHASES, CollectivesConfig, Job, ProfileConfig  # noqa: E402
from payload.workloads.memory_estimate import estimate  # noqa: E402

SEQ = 2048
MIN_STAGE_S = 30.0
"""A stage starts only with this much of the budget left."""
GIB = 2**30


def smi(query: str) -> list[str]:
    """One nvidia-smi query's values for GPU 0 ([] without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [v.strip() for v in out.stdout.strip().split(",")] if out.returncode == 0 else []


class MemoryWatch:
    """The highest ``memory.used`` nvidia-smi reports while a stage runs (MiB; None without it)."""

    def __init__(self) -> None:
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            used = smi("memory.used")
            if used and used[0].isdigit():
                self.peak_mib = max(self.peak_mib or 0.0, float(used[0]))

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def gpu_name() -> str:
    name = smi("name")
    return name[0] if name else "cpu"


def cell_gpu(name: str) -> str:
    """The campaign's gpu string for the card (the preflight judges the inventory against it)."""
    if name == "cpu":
        return "cpu"
    from payload.node.gpu_models import gpu_model

    return gpu_model(name) or name


def profile_cfg(model: str, batch: int, accum: int, steps: int, warmup: int, *, seq: int = SEQ,
                compile: bool = True, phase_timing: bool = True, vocab: int | None = None) -> ProfileConfig:
    return ProfileConfig(model=model, device_batch_size=batch, sequence_len=seq, total_batch_size=batch * seq * accum,
                         warmup_steps=warmup, steps=steps, vocab_size=vocab, compile=compile,
                         phase_timing=phase_timing)


def stages(cpu: bool, card_gib: float) -> list[tuple[str, dict[str, Any], float]]:
    """(name, Job fields, timeout s) in the order they run."""
    if cpu:  # the same stages, sized for a dry run of the script on a CPU machine
        tiny = {"seq": 64, "vocab": 512}
        sweep = CollectivesConfig(ops=["all_reduce"], min_bytes=1024, max_bytes=2**16, factor=4, warmup_iters=1,
                                  iters=2)
        d12 = [("profile_d2", profile_cfg("nanochat-d2", 2, 2, 3, 1, **tiny), 120)]
        return [("preflight", {"phases": ["preflight", "p2p"]}, 120),
                ("collectives", {"phases": ["collectives"], "collectives": sweep}, 120),
                *[(name, {"phases": ["profile"], "profile": cfg}, t) for name, cfg, t in d12]]
    sweep = CollectivesConfig(ops=["all_reduce", "all_gather", "reduce_scatter", "broadcast"],
                              min_bytes=1024, max_bytes=4 * GIB, factor=4)
    d20_batch = 16 if estimate("nanochat-d20", SEQ, 16, 1, compiled=False).total_gib < card_gib - 4 else 8
    profiles = [
        ("profile_d12_compiled", profile_cfg("nanochat-d12", 16, 2, 30, 3), 240),
        ("profile_d12_compiled_no_phase_timing", profile_cfg("nanochat-d12", 16, 2, 30, 3, phase_timing=False), 120),
        (f"profile_d20_b{d20_batch}_compiled", profile_cfg("nanochat-d20", d20_batch, 1, 20, 3), 240),
        ("profile_d12_eager", profile_cfg("nanochat-d12", 16, 2, 20, 2, compile=False), 90),
        (f"profile_d20_b{d20_batch}_eager", profile_cfg("nanochat-d20", d20_batch, 1, 10, 2, compile=False), 90),
        ("profile_d26_b8_compiled", profile_cfg("nanochat-d26", 8, 1, 10, 2), 150),
        ("profile_d26_b16_compiled", profile_cfg("nanochat-d26", 16, 1, 10, 2), 150),
    ]
    return [("preflight", {"phases": ["preflight", "p2p"]}, 120),
            ("collectives", {"phases": ["collectives"], "collectives": sweep}, 120),
            *[(name, {"phases": ["profile"], "profile": cfg}, t) for name, cfg, t in profiles]]


def phase_walls(events: list[dict[str, Any]]) -> dict[str, float]:
    starts = {e["phase"]: e["t"] for e in events if e.get("kind") == "phase_start"}
    return {e["phase"]: round(e["t"] - starts[e["phase"]], 3) for e in events
            if e.get("kind") == "phase_end" and e.get("phase") in starts}


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def run_stage(workdir: Path, job: Job, timeout_s: float, cpu: bool) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "job.json").write_text(job.to_json())
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    with MemoryWatch() as watch, open(workdir / "payload.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "payload", "run", "job.json"], cwd=workdir, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            code = None
    events = list(read_events(workdir / "events.jsonl")) if (workdir / "events.jsonl").exists() else []
    result: dict[str, Any] = {
        "exit_code": code, "timed_out": code is None, "wall_s": round(time.monotonic() - started, 2),
        "phase_wall_s": phase_walls(events),
        "summaries": {e["phase"]: e.get("summary") for e in events if e.get("kind") == "phase_end"},
        "errors": [e.get("message") for e in events if e.get("kind") == "error"],
        "smi_peak_mem_used_gib": round(watch.peak_mib / 1024, 2) if watch.peak_mib is not None else None,
    }
    if job.profile:
        cfg = job.profile
        result["estimate_gib"] = estimate(cfg.model, cfg.sequence_len, cfg.device_batch_size, 1,
                                          cfg.vocab_size, compiled=cfg.compile and not cpu).as_dict()
        result["profile_samples"] = [{k: v for k, v in e.items() if k not in ("t", "kind")}
                                     for e in events if e.get("kind") == "sample" and e.get("phase") == "profile"]
    if job.phases[0] == "preflight":
        result["preflight_checks"] = [{k: e.get(k) for k in ("name", "status", "observed", "expected", "elapsed_s")}
                                      for e in events if e.get("kind") == "sample" and e.get("phase") == "preflight"]
    if code != 0:
        result["payload_log_tail"] = tail(workdir / "payload.log")
        result["rank_log_tail"] = {p.name: tail(p) for p in sorted((workdir / "artifacts" / "logs").glob("*.log"))}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, help="where the stages' attempt folders go (default: OUT/work)")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="the whole run's seconds: a stage's timeout is cut to what is left of them")
    parser.add_argument("--cpu", action="store_true", help="a tiny dry run on CPU")
    parser.add_argument("--only", nargs="*", help="run only the stages named")
    args = parser.parse_args()
    began = time.monotonic()
    name = "cpu" if args.cpu else gpu_name()
    total = smi("memory.total")
    card_gib = float(total[0]) / 1024 if total and total[0].isdigit() else 0.0
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": name,
                               "card_gib": round(card_gib, 2), "driver": (smi("driver_version") or [None])[0],
                               "python": sys.version.split()[0], "stages": {}}
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda, "
                            "torch.cuda.is_available())"], capture_output=True, text=True)
    results["torch"] = (probe.stdout or probe.stderr).strip()[-300:]
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or args.out / "work"
    base = {"campaign": "bench-gpu", "attempt": 1, "token": "bench", "gpu": cell_gpu(name), "count": 1}
    for stage, fields, timeout_s in stages(args.cpu, card_gib):
        if args.only and stage not in args.only:
            continue
        left = args.budget_s - (time.monotonic() - began)
        if left < MIN_STAGE_S:
            results["stages"][stage] = {"skipped": f"{left:.0f} s of the budget left"}
            continue
        job = Job(cell=stage, **base, **fields)
        assert set(job.phases) <= set(PHASES)
        print(f"[{time.monotonic() - began:6.1f} s] {stage} …", flush=True)
        results["stages"][stage] = outcome = run_stage(work / stage, job, min(timeout_s, left), args.cpu)
        print(f"[{time.monotonic() - began:6.1f} s] {stage}: exit {outcome['exit_code']}, {outcome['wall_s']} s, "
              f"{json.dumps(outcome['summaries'])[:600]} {outcome['errors'][:2]}", flush=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1))
    with tarfile.open(args.out / "stages.tar.gz", "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            if path.is_file() and path.stat().st_size < 20 * 2**20 and not path.name.endswith(".nsys-rep"):
                tar.add(path, arcname=str(path.relative_to(work)))
    (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
