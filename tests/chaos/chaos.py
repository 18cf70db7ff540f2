"""Chaos run: SIGKILL the controller at seeded random moments, resume after each, then audit.

    python -m tests.chaos.chaos --kills 20 --seed 1 [--home DIR] [--report FILE]

A local campaign (spot cells, some with injected preemptions) is started with ``benchctl run``;
after a random 0.5–``--max-gap`` s the controller is killed with SIGKILL and ``benchctl resume``
started again, until ``--kills`` kills are done; the last resume runs to the end. The audit
checks what the resilience issue promises and prints the figures as JSON:

- every cell ``done`` exactly once, each with exactly the requested timed steps (one sample per
  ``timed_index``);
- no sample lost: every line each node wrote to its ``events.jsonl`` is in the store;
- no node process of the campaign left, no attempt left open;
- the attempts' costs add up to the campaign's spent, and to what the local provider "billed"
  (price × node lifetime from its own records): the difference is the accounting error;
- preemption detection latency: provider says preempted → next attempt launched.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

CAMPAIGN = """\
name: chaos
budget_usd: 50
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: spot, max_attempts: 6}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: {steps}}}
matrix:
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5, faults: {{preempt_after_s: 6, seed: {seed}}}}}
  - {{provider: local, gpu: cpu, count: 2, price_usd_per_hour: 1.0}}
  - {{provider: local, gpu: cpu, count: 1, market: on-demand, price_usd_per_hour: 0.25,
     faults: {{preempt_at_step: {at_step}}}}}
"""


def _controller(home: Path, args: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "BENCHCTL_HOME": str(home)}
    env.pop("BENCHCTL_DB", None)
    log = (home / "controller.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "benchctl", *args, "--poll-interval", "0.2",
                             "--status-interval", "1"], cwd=REPO, env=env, stdout=log, stderr=log)


def chaos(home: Path, kills: int, seed: int, steps: int, max_gap_s: float,
          python: Path | None = None) -> dict[str, Any]:
    """``python``: the local nodes' ``providers.local.python`` (default: the real payload on this interpreter)."""
    rng = random.Random(seed)
    home.mkdir(parents=True, exist_ok=True)
    campaign = home / "chaos.yaml"
    campaign.write_text(CAMPAIGN.format(steps=steps, seed=seed, at_step=steps // 3)
                        + (f'providers:\n  local: {{python: "{python}"}}\n' if python else ""))
    done_kills, runs, started = 0, 0, time.monotonic()
    while True:
        registered = runs > 0 and "campaign chaos: 3 new cell(s)" in (home / "controller.log").read_text()
        proc = _controller(home, ["resume", "chaos"] if registered else ["run", str(campaign), "--yes"])
        runs += 1
        if done_kills < kills:
            try:
                proc.wait(timeout=rng.uniform(0.5, max_gap_s))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                done_kills += 1
                continue
        else:
            proc.wait(timeout=600)
        if proc.returncode == 0:
            break
        if proc.returncode == 2:
            raise RuntimeError(f"bad input; see {home / 'controller.log'}")
        if runs > kills + 20:
            raise RuntimeError(f"the campaign did not complete after {runs} runs; see {home / 'controller.log'}")
    report = audit(home, steps)
    report.update(kills=done_kills, controller_runs=runs, wall_s=round(time.monotonic() - started, 1), seed=seed)
    return report


def audit(home: Path, steps: int) -> dict[str, Any]:
    from benchctl.provisioners.local.processes import node_processes
    from benchctl.store import queries as q
    from benchctl.store.database import open_store

    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    (campaign,) = q.campaigns(engine, "chaos")
    problems: list[str] = []
    lost_samples = 0
    attempts = q.campaign_attempts(engine, campaign.id or 0)
    for cell in q.cells(engine, campaign.id or 0):
        cell_attempts = [a for a in attempts if a.cell_id == cell.id]
        if cell.state != "done":
            problems.append(f"{cell.key} is {cell.state}: {cell.reason}")
        if [a.outcome for a in cell_attempts].count("done") != 1:
            problems.append(f"{cell.key}: attempts ended {[a.outcome for a in cell_attempts]}")
        timed = sorted(json.loads(e.data_json)["timed_index"]
                       for e in q.events(engine, cell.id or 0, kind="sample", phase="profile")
                       if not json.loads(e.data_json)["warmup"])
        if timed != list(range(steps)):
            problems.append(f"{cell.key}: timed steps {len(timed)} (distinct {len(set(timed))}), expected {steps}")
        for attempt in cell_attempts:
            events_file = home / "nodes" / attempt.token / "home" / attempt.remote_dir / "events.jsonl"
            on_node = len(events_file.read_text().splitlines()) if events_file.exists() else 0
            stored = sum(e.attempt_id == attempt.id for e in q.events(engine, cell.id or 0))
            lost_samples += max(0, on_node - stored)
    open_attempts = [a.token for a in attempts if a.open]
    billed, live = 0.0, []
    prices = {a.token: a.hourly_usd or 0.0 for a in attempts}
    for record_path in sorted((home / "nodes").glob("*/node.json")):
        record = json.loads(record_path.read_text())
        if node_processes(record["token"]):
            live.append(record["token"])
        ends = [float(record["terminated_at"])] if record.get("terminated_at") else []
        if (record_path.parent / "ended_at").exists():
            ends.append(float((record_path.parent / "ended_at").read_text()))
        if ends:
            billed += (min(ends) - record["created_at"]) / 3600 * prices.get(record["token"], 0.0)
    costs = sum(a.cost_usd or 0.0 for a in attempts)
    spent = q.spent_usd(engine, campaign.id or 0)
    latencies = []
    for a, b in itertools.pairwise(attempts):
        if a.cell_id == b.cell_id and a.outcome == "preempted" and (a.detail or "").startswith("the provider reports"):
            latencies.append(round((b.launched_at or 0) - (a.terminated_at or 0), 3))
    log = (home / "controller.log").read_text(errors="replace")
    return {
        "cells": len(q.cells(engine, campaign.id or 0)), "attempts": len(attempts),
        "preemptions": sum(a.outcome == "preempted" for a in attempts),
        "lost_at_launch": sum(a.outcome == "lost" for a in attempts),
        "reattached": log.count("re-attaching"), "lost_samples": lost_samples,
        "orphans_terminated": log.count("no open attempt knew it"), "nodes_left_running": len(live),
        "open_attempts": len(open_attempts), "attempt_costs_usd": round(costs, 6), "spent_usd": round(spent, 6),
        "provider_billed_usd": round(billed, 6), "accounting_error_usd": round(abs(costs - billed), 6),
        "detection_to_relaunch_s": latencies, "problems": problems,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=900, help="timed profile steps per cell")
    parser.add_argument("--max-gap", type=float, default=4.0, help="longest time between kills (s)")
    parser.add_argument("--home", type=Path, help="BENCHCTL_HOME to use (default: a new temp dir)")
    parser.add_argument("--report", type=Path, help="also write the JSON report here")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="benchctl-chaos-"))
    report = chaos(home, args.kills, args.seed, args.steps, args.max_gap)
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    sys.exit(1 if report["problems"] or report["nodes_left_running"] or report["open_attempts"]
             or report["lost_samples"] else 0)


if __name__ == "__main__":
    main()
