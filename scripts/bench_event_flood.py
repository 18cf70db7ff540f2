"""Measure what a node that floods ``events.jsonl`` costs the controller: peak RSS and time of
`benchctl run` and of `benchctl logs` of the flooded cell.

    .venv/bin/python scripts/bench_event_flood.py [--lines 1000000 10000000] [--line x]

For each size, a fresh home and a two-cell local campaign (phases: command): one cell's command
appends LINES junk lines (``--line``, default ``x``: 2 bytes a line; or a valid event of
``--message-bytes``) to its ``events.jsonl``, the other cell's command sleeps 2 s and ends well
(it must not be stalled by its neighbour: its attempt's time is printed). Peak RSS
is the controller process's own ``VmHWM`` (``/proc/PID/status``), read until it exits. Prints one
line per size: run time, run peak RSS, the cells' final states, event rows stored, database size,
then `logs` time, peak RSS and lines printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CAMPAIGN = """\
name: flood
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 1}}
payload:
  phases: [command]
  timeout_minutes: 60
  command: {{run: {run}}}
matrix:
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5, env: {{FLOOD: "yes"}}}}
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5, env: {{FLOOD: "no"}}}}
"""


def _peak_rss(cmd: list[str], env: dict[str, str]) -> tuple[float, int, int, str]:
    """(seconds, peak RSS in bytes, exit code, stdout) of ``cmd``, polling its VmHWM."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        peak = 0
        while proc.poll() is None:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                peak = max(peak, next(int(line.split()[1]) * 1024 for line in status.splitlines()
                                      if line.startswith("VmHWM:")))
            except (OSError, StopIteration):
                pass
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        out.seek(0)
        return seconds, peak, proc.returncode, out.read().decode(errors="replace")


def bench(lines: int, line: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as tmp:
        work = Path(tmp)
        run = (f'if [ "$FLOOD" = yes ]; then yes {shlex.quote(line)} | head -n {lines} >> events.jsonl; '
               "else sleep 2; fi")
        campaign = work / "flood.yaml"
        campaign.write_text(CAMPAIGN.format(run=json.dumps(run)))
        env = {**os.environ, "BENCHCTL_HOME": str(work / "home"), "BENCHCTL_LOCAL_LOCK": str(work / "lock")}
        env.pop("BENCHCTL_DB", None)
        benchctl = str(REPO / ".venv/bin/benchctl")
        run_s, run_rss, run_rc, run_out = _peak_rss([benchctl, "run", str(campaign), "--poll-interval", "0.1",
                                                     "--status-interval", "0.5"], env)
        db = work / "home" / "benchctl.db"
        with sqlite3.connect(db) as conn:
            states = dict(conn.execute("SELECT json_extract(config_json, '$.env.FLOOD'), state FROM cell"))
            rows = conn.execute("SELECT count(*) FROM event").fetchone()[0]
            keys = dict(conn.execute("SELECT json_extract(config_json, '$.env.FLOOD'), key FROM cell"))
            quiet_s = conn.execute("SELECT a.terminated_at - a.launched_at FROM attempt a JOIN cell c ON "
                                   "a.cell_id = c.id WHERE json_extract(c.config_json, '$.env.FLOOD') = 'no'"
                                   ).fetchone()[0]
        db_bytes = sum(p.stat().st_size for p in db.parent.glob("benchctl.db*"))
        logs_s, logs_rss, logs_rc, logs_out = _peak_rss([benchctl, "logs", keys["yes"] or ""], env)
        return {"lines": lines, "run_s": round(run_s, 1), "run_peak_rss_mb": round(run_rss / 2**20),
                "run_exit": run_rc, "states": states, "quiet_cell_s": round(quiet_s, 1),
                "event_rows": rows, "db_mb": round(db_bytes / 2**20, 1),
                "logs_s": round(logs_s, 1), "logs_peak_rss_mb": round(logs_rss / 2**20), "logs_exit": logs_rc,
                "logs_lines": len(logs_out.splitlines()),
                "run_tail": run_out.strip().splitlines()[-3:] if run_rc else [],
                "logs_summary": [x for x in logs_out.splitlines() if " dropped " in x][:1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--line", default="x", help="the junk line (yes(1) repeats it)")
    parser.add_argument("--message-bytes", type=int, metavar="N",
                        help="instead of --line: a valid error event whose message is N bytes")
    args = parser.parse_args()
    line = args.line if args.message_bytes is None else json.dumps(
        {"t": 1, "kind": "error", "message": "x" * args.message_bytes})
    for lines in args.lines:
        print(json.dumps(bench(lines, line)), flush=True)


if __name__ == "__main__":
    main()
