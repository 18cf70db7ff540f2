"""Measure preemption detection latency: the provider says a node is preempted → the next attempt
is launched (and, separately, the time until the new node's first timed profile sample).

    .venv/bin/python scripts/bench_preemption.py [--preemptions 5] [--status-interval 5]

A one-cell local campaign whose node is killed (``faults.preempt_after_s``) in each of its first
``--preemptions`` launches; the controller runs with the given ``--status-interval``. The
provider's end time is the one the local provider records when it kills the node.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CAMPAIGN = """\
name: preempt-latency
budget_usd: 10
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: spot, max_attempts: {attempts}}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: 400}}
matrix:
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 1.0,
     faults: {{preempt_after_s: 5, seed: 1, preemptions: {preemptions}}}}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preemptions", type=int, default=5)
    parser.add_argument("--status-interval", type=float, default=5.0)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from benchctl.store import queries as q
    from benchctl.store.database import open_store

    home = Path(tempfile.mkdtemp(prefix="benchctl-preempt-"))
    campaign = home / "campaign.yaml"
    campaign.write_text(CAMPAIGN.format(attempts=args.preemptions + 1, preemptions=args.preemptions))
    env = {**os.environ, "BENCHCTL_HOME": str(home)}
    env.pop("BENCHCTL_DB", None)
    subprocess.run([sys.executable, "-m", "benchctl", "run", str(campaign), "--yes", "--poll-interval", "0.2",
                    "--status-interval", str(args.status_interval)], cwd=REPO, env=env, check=True,
                   capture_output=True)
    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    (row,) = q.campaigns(engine)
    attempts = q.campaign_attempts(engine, row.id or 0)
    (cell,) = q.cells(engine, row.id or 0)
    first_sample = {}
    for event in q.events(engine, cell.id or 0, kind="sample", phase="profile"):
        first_sample.setdefault(event.attempt_id, event.t)
    relaunch, resumed = [], []
    for before, after in itertools.pairwise(attempts):
        if before.outcome != "preempted":
            continue
        relaunch.append((after.launched_at or 0) - (before.terminated_at or 0))
        if after.id in first_sample:
            resumed.append(first_sample[after.id] - (before.terminated_at or 0))
    report = {"status_interval_s": args.status_interval, "preemptions": len(relaunch),
              "to_next_launch_s": [round(x, 3) for x in relaunch],
              "to_next_launch_median_s": round(statistics.median(relaunch), 3) if relaunch else None,
              "to_next_launch_max_s": round(max(relaunch), 3) if relaunch else None,
              "to_first_new_sample_median_s": round(statistics.median(resumed), 3) if resumed else None,
              "cell_state": cell.state}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
