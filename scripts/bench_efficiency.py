"""Measure the billed-time efficiency of an attempt on the local provider: seconds of timed
measurement ÷ seconds the node was rented (the attempt's launch to its terminate).

    .venv/bin/python scripts/bench_efficiency.py [--steps 200] [--count 1 2] [--repo PATH]

Runs a one-cell local campaign per world size in ``--count`` (local-smoke's model and
phases: preflight, collectives, profile; ``--steps`` sets the profile's length, ~60 s by default
on a 2-core machine) with the benchctl and payload of ``--repo`` (default: this checkout, e.g.
an older commit unpacked elsewhere for a before/after comparison), in a temporary BENCHCTL_HOME.
Timed measurement is what the payload reports as timed: the profile's non-warmup ``step_time_s``
plus the collectives' timed iterations (``time_us`` × ``iters`` per sample). Prints a table;
writes nothing into the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
ITERS = 5
PHASES = ("preflight", "collectives", "profile")
CAMPAIGN = """\
name: efficiency
budget_usd: 5
target: {{model: nanochat-d2, vocab_size: 8192, target_param_data_ratio: 8.5, total_batch_size: 512}}
payload:
  phases: [preflight, collectives, profile]
  collectives: {{min_bytes: 8, max_bytes: 1M, factor: 8, warmup_iters: 2, iters: {iters}}}
  profile: {{device_batch_size: 4, sequence_len: 64, warmup_steps: 2, steps: {steps}}}
matrix:
  - {{provider: local, gpu: cpu, count: {count}, price_usd_per_hour: 1.0}}
"""


def run_cell(repo: Path, steps: int, count: int) -> dict[str, Any]:
    """One campaign run; the attempt's rented, payload and timed seconds."""
    with tempfile.TemporaryDirectory(prefix="bench-efficiency-") as tmp:
        home = Path(tmp)
        campaign = home / "campaign.yaml"
        campaign.write_text(CAMPAIGN.format(steps=steps, count=count, iters=ITERS))
        env = {**os.environ, "BENCHCTL_HOME": str(home), "PYTHONPATH": str(repo)}
        env.pop("BENCHCTL_DB", None)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "benchctl", "run", str(campaign), "--yes"], cwd=repo, env=env,
                       check=True, capture_output=True)
        run_s = time.perf_counter() - started
        (row,) = attempt_figures(f"sqlite:///{home / 'benchctl.db'}", ITERS)
    return {"count": count, **row, "benchctl_run_s": run_s}


def attempt_figures(db: str, iters: int) -> list[dict[str, Any]]:
    """Every attempt of every campaign in ``db``: rented seconds (launch to terminate), each phase's
    seconds, timed seconds (the profile's non-warm-up steps + the collectives' timed iterations, ``iters``
    per sample), efficiency (timed ÷ rented), and the profile's compile figures."""
    from benchctl.store import queries as q
    from benchctl.store.database import open_store

    engine = open_store(db)
    rows = []
    for campaign_row in q.campaigns(engine):
        for cell in q.cells(engine, campaign_row.id or 0):
            for attempt in q.attempts(engine, cell.id or 0):
                stored = [e for e in q.events(engine, cell.id or 0) if e.attempt_id == attempt.id]
                events = [(e.kind, {**json.loads(e.data_json), "phase": e.phase}) for e in stored]
                times = [e.t for e in stored] or [0.0]
                samples = [d for k, d in events if k == "sample" and d.get("phase") == "profile"]
                timed_samples = [d for d in samples if not d.get("warmup")]
                profile = sum(d["step_time_s"] for d in timed_samples)
                collectives = sum(d["time_us"] * iters / 1e6 for k, d in events
                                  if k == "sample" and d.get("phase") == "collectives")
                phase_s = {d["phase"]: d["elapsed_s"] for k, d in events if k == "phase_end"}
                rented = (attempt.terminated_at or 0) - (attempt.launched_at or 0)
                last = timed_samples[-1] if timed_samples else {}
                rows.append({"campaign": campaign_row.name, "cell": cell.key, "attempt": attempt.number,
                             "outcome_done": attempt.outcome == "done", "outcome": attempt.outcome,
                             "rented_s": rented, "payload_s": max(times) - min(times),
                             **{f"{p}_phase_s": phase_s.get(p, 0.0) for p in PHASES},
                             "profile_timed_s": profile, "collectives_timed_s": collectives,
                             "timed_steps": len(timed_samples),
                             "efficiency": (profile + collectives) / rented if rented > 0 else None,
                             **{k: last.get(k) for k in ("compile_s", "compile_cache", "compile_cache_note",
                                                         "compile_cache_saved", "settle_steps", "settle_s",
                                                         "precision", "attention", "step_time_s")}})
    engine.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="timed profile steps (~60 s on 2 shared cores)")
    parser.add_argument("--count", type=int, nargs="+", default=[1, 2], help="world sizes, one campaign each")
    parser.add_argument("--repo", type=Path, default=REPO, help="checkout whose benchctl and payload to run")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))  # the store queries of this checkout read the database
    rows = [run_cell(args.repo.resolve(), args.steps, count) for count in args.count]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"repo {args.repo.resolve()}, {args.steps} timed profile steps")
    print("rented: launch to terminate; payload: first to last event; phases: phase_start to phase_end;"
          " timed: profile steps + collectives iterations; untimed: rented - timed")
    print(f"{'ranks':>5} {'done':>5} {'rented s':>9} {'payload s':>9} {'preflight':>9} {'coll.':>6} {'profile':>8} "
          f"{'timed s':>8} {'untimed s':>9} {'efficiency':>10}")
    for r in rows:
        timed = r["profile_timed_s"] + r["collectives_timed_s"]
        print(f"{r['count']:>5} {r['outcome_done']!s:>5} {r['rented_s']:>9.2f} {r['payload_s']:>9.2f} "
              f"{r['preflight_phase_s']:>9.2f} {r['collectives_phase_s']:>6.2f} {r['profile_phase_s']:>8.2f} "
              f"{timed:>8.2f} {r['rented_s'] - timed:>9.2f} {r['efficiency']:>10.3f}")


if __name__ == "__main__":
    main()
