"""A campaign end to end on this machine's GPU: ``benchctl run`` with the local provider (issue 28 items 7, 8).

    python scripts/gpu_e2e.py --out DIR [--model nanochat-d12] [--batch 16] [--steps 150] [--timeout-s 400]
    python scripts/gpu_e2e.py --out DIR --cpu        # the same path on CPU at a tiny size (a dry run)

Writes a two-cell campaign for the GPU nvidia-smi names (``payload.node.gpu_models.gpu_model``), one
GPU per cell, phases preflight, collectives and profile, and runs it as a user would (``python -m
benchctl run FILE --yes`` in a fresh ``BENCHCTL_HOME`` under DIR). The two cells differ only in the
folders their node gives torch's compile caches (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``),
each empty at first as on a freshly rented node: the first attempt compiles from nothing and saves
torch's portable compile cache, which the controller brings home and ships with the second cell's
attempt (same GPU, shapes and precision: ``benchctl.engine.compile_caches``), so the second shows
what the cache saves.

Then ``status``, ``leaderboard``, ``logs`` of each cell and ``report`` run against the same home,
and every attempt's billed-time figures (``bench_efficiency.attempt_figures``: rented seconds, each
phase's, timed seconds, efficiency = timed ÷ rented, compile seconds and the cache's outcome) go
to DIR/e2e.json and a table. Exit 0 only if every cell ended done with a profile result.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_efficiency import attempt_figures  # noqa: E402

CAMPAIGN = """\
name: gpu-e2e
budget_usd: 20
target: {{model: {model}, {vocab}target_param_data_ratio: 8.5, total_batch_size: {total}}}
payload:
  phases: [preflight, collectives, profile]
  collectives: {{ops: [all_reduce, all_gather, reduce_scatter], min_bytes: 1K, max_bytes: {max_bytes}, factor: 16,
                warmup_iters: 2, iters: {iters}}}
  profile: {{device_batch_size: {batch}, sequence_len: {seq}, warmup_steps: 3, steps: {steps}}}
  timeout_minutes: 15
matrix:
{cells}
"""
CELL = ("  - {{provider: local, gpu: {gpu}, count: 1, price_usd_per_hour: 2.49, market: on-demand,\n"
        "     env: {{TORCHINDUCTOR_CACHE_DIR: {home}/node-{n}/inductor, TRITON_CACHE_DIR: {home}/node-{n}/triton}}}}")
ITERS = 10


def gpu_name() -> str:
    """The cell's GPU name for this machine's GPU 0 (the one vocabulary)."""
    from payload.node.gpu_models import gpu_model

    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"],
                         capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    model = gpu_model(out)
    if model is None:
        raise SystemExit(f"error: nvidia-smi names {out!r}, which no GPU model of payload/node/gpu_models.py matches")
    return model


def benchctl(args: list[str], env: dict[str, str], log: Path, timeout: float) -> int:
    """``python -m benchctl ARGS``, its stdout and stderr into ``log``; the exit code (124: timed out, then
    interrupted as Ctrl-C would, so that benchctl terminates its nodes before it exits)."""
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "benchctl", *args], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            out.write(f"\n[gpu_e2e: timed out after {timeout:.0f} s: interrupting]\n")
            out.flush()
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            return 124


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", default="nanochat-d12")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--timeout-s", type=float, default=400.0, help="the whole `benchctl run`")
    parser.add_argument("--cpu", action="store_true", help="tiny, on CPU: checks the path, not the GPU")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    home = (args.out / "home").resolve()
    home.mkdir(exist_ok=True)
    gpu = "cpu" if args.cpu else gpu_name()
    model, seq, vocab = ("nanochat-d2", 64, "vocab_size: 8192, ") if args.cpu else (args.model, 2048, "")
    campaign = home / "gpu-e2e.yaml"
    campaign.write_text(CAMPAIGN.format(
        model=model, vocab=vocab, total=args.batch * seq, batch=args.batch, seq=seq, steps=args.steps,
        max_bytes="1M" if args.cpu else "256M", iters=ITERS,
        cells="\n".join(CELL.format(gpu=gpu, home=home, n=n) for n in ("a", "b"))))
    env = {**os.environ, "BENCHCTL_HOME": str(home), "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("BENCHCTL_DB", None)
    started = time.monotonic()
    rc = benchctl(["run", str(campaign), "--yes"], env, args.out / "run.log", args.timeout_s)
    run_s = time.monotonic() - started
    for name, cmd in (("status", ["status", "gpu-e2e"]), ("leaderboard", ["leaderboard"]),
                      ("report", ["report", "gpu-e2e", "--out", str(args.out / "report.html")])):
        benchctl(cmd, {**env, "COLUMNS": "80"}, args.out / f"{name}.txt", 120)
    rows = attempt_figures(f"sqlite:///{home / 'benchctl.db'}", ITERS)
    for n, row in enumerate(rows):
        benchctl(["logs", row["cell"]], {**env, "COLUMNS": "80"}, args.out / f"logs-{n}.txt", 120)
    (args.out / "e2e.json").write_text(json.dumps({"gpu": gpu, "benchctl_run_exit": rc, "benchctl_run_s": run_s,
                                                   "attempts": rows}, indent=1))
    print(f"benchctl run: exit {rc} in {run_s:.1f} s, GPU {gpu}")
    print(f"{'attempt':<9} {'done':>5} {'rented s':>8} {'prefl.':>7} {'coll.':>6} {'profile':>8} {'timed s':>8} "
          f"{'eff.':>5} {'compile s':>9} {'cache':<10} {'step ms':>8}")
    for n, r in enumerate(rows):
        timed = r["profile_timed_s"] + r["collectives_timed_s"]
        print(f"{n}:{r['attempt']:<7} {r['outcome_done']!s:>5} {r['rented_s']:>8.1f} {r['preflight_phase_s']:>7.1f} "
              f"{r['collectives_phase_s']:>6.1f} {r['profile_phase_s']:>8.1f} {timed:>8.1f} "
              f"{r['efficiency'] or 0:>5.2f} {r['compile_s'] or 0:>9.1f} {r['compile_cache']!s:<10} "
              f"{(r['step_time_s'] or 0) * 1000:>8.1f}")
    return 0 if rc == 0 and rows and all(r["outcome_done"] and r["timed_steps"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
