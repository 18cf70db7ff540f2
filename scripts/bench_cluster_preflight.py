"""Measure, on a 2-node ``local`` cell, the time from "all nodes running" to the preflight verdict.

    .venv/bin/python scripts/bench_cluster_preflight.py [--runs 3] [--nodes 2] [--count 1]

Runs a one-cell local campaign (``nodes: --nodes``, ``count: --count`` CPU ranks per node, phases
preflight and collectives) ``--runs`` times, each in a temporary BENCHCTL_HOME, with the engine in
this process so each line it logs is timestamped here: "all nodes running" is the moment the
attempt driver saw every member running (its log line); the verdict is the end of the preflight
phase (node 0's ``phase_end`` event, or the ``error`` event of a failed preflight) as node 0
stamped it (the same machine's clock). Also prints the start of the preflight phase and the
whole attempt. Writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

CAMPAIGN = """\
name: cluster-preflight
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 1}}
payload:
  phases: [preflight, collectives]
  collectives: {{min_bytes: 8, max_bytes: 64K, factor: 16, warmup_iters: 1, iters: 2}}
matrix:
  - {{provider: local, gpu: cpu, count: {count}, nodes: {nodes}, price_usd_per_hour: 0.5}}
"""


def one_run(nodes: int, count: int) -> dict[str, float]:
    """One campaign in a fresh home: seconds from all nodes running to preflight's start and verdict."""
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        home = Path(tmp)
        os.environ["BENCHCTL_HOME"] = str(home)
        os.environ["BENCHCTL_LOCAL_LOCK"] = str(home / "local.lock")
        from benchctl.campaign.spec import load_campaign
        from benchctl.cli.run import register_campaign
        from benchctl.engine.budget import Budget, attempt_worst_case_s
        from benchctl.engine.lease import Leases
        from benchctl.engine.providers import Providers
        from benchctl.engine.run_context import RunContext
        from benchctl.engine.scheduler import run_campaign
        from benchctl.store import queries as q
        from benchctl.store.database import open_store

        path = home / "c.yaml"
        path.write_text(CAMPAIGN.format(nodes=nodes, count=count))
        campaign = load_campaign(path)
        engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
        row = register_campaign(engine, campaign, str(path))
        assert row.id is not None
        logged: list[tuple[float, str]] = []
        ctx = RunContext(engine=engine, campaign=campaign, campaign_id=row.id, campaign_uid=row.uid,
                         providers=Providers(home, campaign.spec.providers), artifacts_dir=home / "artifacts",
                         leases=Leases(engine), budget=Budget(engine, row.id, 5.0, attempt_worst_case_s(campaign.spec)),
                         poll_interval_s=0.05, status_interval_s=0.5,
                         log=lambda line: logged.append((time.time(), line)))
        summary = run_campaign(ctx, concurrency=1)
        ctx.leases.close()
        (cell,) = q.cells(engine, row.id)
        running = next(t for t, line in logged if line.endswith(f"all {nodes} nodes running"))
        events = [(e.t, e.kind) for e in q.events(engine, cell.id or 0) if e.phase == "preflight"]
        started = next(t for t, kind in events if kind == "phase_start")
        verdict = next(t for t, kind in events if kind in ("phase_end", "error"))
        (attempt,) = q.attempts(engine, cell.id or 0)
        if not summary.complete:
            print(f"  the cell ended {cell.state}: {cell.reason}")
        return {"to_start": started - running, "to_verdict": verdict - running,
                "attempt": (attempt.terminated_at or 0) - (attempt.launched_at or 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--count", type=int, default=1)
    args = parser.parse_args()
    results = []
    for number in range(1, args.runs + 1):
        result = one_run(args.nodes, args.count)
        results.append(result)
        print(f"run {number}: all {args.nodes} nodes running → preflight start {result['to_start']:.2f} s, "
              f"→ verdict {result['to_verdict']:.2f} s (attempt {result['attempt']:.1f} s)", flush=True)
    verdicts = [r["to_verdict"] for r in results]
    print(f"nodes running → preflight verdict: median {statistics.median(verdicts):.2f} s, "
          f"min {min(verdicts):.2f} s, max {max(verdicts):.2f} s over {len(verdicts)} runs "
          f"({args.nodes} nodes × {args.count} CPU ranks, {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
