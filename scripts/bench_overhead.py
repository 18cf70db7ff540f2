"""Measure the controller's overhead: `benchctl run` of a one-cell local campaign against running the
same job directly with `python -m payload run job.json`.

    .venv/bin/python scripts/bench_overhead.py [--steps 250] [--repeats 2]

Each repeat runs both, alternating which goes first, in fresh temporary directories. Prints the wall
times and the ratio (goal: <= 1.10 for a payload of 30 s or more).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CAMPAIGN = """\
name: overhead
budget_usd: 5
target: {{model: nanochat-d2, vocab_size: 8192, target_param_data_ratio: 8.5, total_batch_size: 512}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 4, sequence_len: 64, warmup_steps: 2, steps: {steps}}}
matrix:
  - {{provider: local, gpu: cpu, count: {count}, price_usd_per_hour: 1.0}}
"""


def write_campaign(work: Path, steps: int, count: int) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    campaign = work / "overhead.yaml"
    campaign.write_text(CAMPAIGN.format(steps=steps, count=count))
    return campaign


def run_controller(work: Path, campaign: Path) -> float:
    env = {**os.environ, "BENCHCTL_HOME": str(work / "home")}
    env.pop("BENCHCTL_DB", None)
    start = time.perf_counter()
    subprocess.run([str(REPO / ".venv/bin/benchctl"), "run", str(campaign)], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def run_direct(work: Path, campaign: Path) -> float:
    """The job the controller would send, run by hand: same payload, same job.json fields."""
    sys.path.insert(0, str(REPO))
    from benchctl.campaign.spec import load_campaign
    from benchctl.payload.job import Job

    loaded = load_campaign(campaign)
    (cell,) = loaded.cells
    job = Job(campaign=loaded.spec.name, cell=cell.key, attempt=1, token="direct", gpu=cell.gpu or "",
              count=cell.world_size, phases=list(loaded.spec.payload.phases), profile=loaded.profile_config(cell))
    direct = work / "direct"
    shutil.copytree(REPO / "payload", direct / "payload", ignore=shutil.ignore_patterns("__pycache__"))
    (direct / "job.json").write_text(job.to_json())
    start = time.perf_counter()
    subprocess.run([str(REPO / ".venv/bin/python"), "-m", "payload", "run", "job.json"], cwd=direct, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=250, help="timed profile steps (sets the payload's length)")
    parser.add_argument("--count", type=int, default=2, help="world size of the cell")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    controller, direct = [], []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
            work = Path(tmp)
            campaign = write_campaign(work, args.steps, args.count)
            if repeat % 2 == 0:
                t_ctl = run_controller(work, campaign)
                t_direct = run_direct(work, campaign)
            else:
                t_direct = run_direct(work, campaign)
                t_ctl = run_controller(work, campaign)
            controller.append(t_ctl)
            direct.append(t_direct)
            print(f"repeat {repeat + 1}: benchctl run {t_ctl:.2f} s, direct payload {t_direct:.2f} s, "
                  f"ratio {t_ctl / t_direct:.3f}", file=sys.stderr)
    summary = {"steps": args.steps, "count": args.count, "controller_s": controller, "direct_s": direct,
               "ratio_of_medians": statistics.median(controller) / statistics.median(direct)}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
