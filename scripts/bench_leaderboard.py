"""How long `benchctl leaderboard` takes on a store with many result rows (goal: ≤ 0.5 s at 10,000).

    .venv/bin/python scripts/bench_leaderboard.py [--rows 10000] [--db URL] [--repeat 5]

Fills a fresh store (a temporary SQLite file unless --db names an empty database) with ``--rows``
imported results across providers, markets and configurations, in one transaction; then times
(1) ``leaderboard_rows`` in-process, (2) ranking plus rendering as a table, and (3) the whole
command, ``benchctl leaderboard --format json`` in a subprocess (Python start-up included).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchctl.report.render import render  # noqa: E402
from benchctl.results.leaderboard import TABLE_COLUMNS, display_row, leaderboard_rows  # noqa: E402
from benchctl.store.database import open_store  # noqa: E402
from benchctl.store.imports import CellResult, save_import  # noqa: E402


def fill(url: str, rows: int) -> None:
    rng = random.Random(7)
    results = []
    for i in range(rows):
        provider = ("runpod", "vastai", "aws", "lambda", "local")[i % 5]
        market = ("spot", "on-demand")[(i // 5) % 2]
        gpu = ("H100_SXM", "H100_PCIE", "H100_NVL", "A100_SXM")[(i // 10) % 4]
        step_ms = rng.uniform(600, 1400)
        price = rng.uniform(8, 30)
        hours = step_ms / 1000 * 14_889 / 3600
        key = f"{provider}:{gpu}x8:{market}:env=RUN={i // 10}"
        results.append(CellResult(key=key, provider=provider, gpu=gpu, count=8, market=market,
                                  config_json='{"env": {}}',
                                  result={"step_time_ms": step_ms, "step_time_p10_ms": step_ms * 0.98,
                                          "step_time_p90_ms": step_ms * 1.03, "timed_steps": 10, "hourly_usd": price,
                                          "market": market, "target_steps": 14_889, "train_hours": hours,
                                          "cost_to_train_usd": hours * price, "model": "nanochat-d26",
                                          "interconnect": "nvswitch_mesh NV18", "vcpus": 192, "numa": "2 nodes",
                                          "optimizer_ms": step_ms * 0.2, "optimizer_share": 0.2,
                                          "comm_share": 0.08, "busbw_gbps": 470.0, "busbw_bytes": 8 << 30,
                                          "flags_json": "[]"}))
    save_import(open_store(url), "bench", ["bench"], results, [])


def timed(fn, repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--db", help="an empty database URL (default: a temporary SQLite file)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{tmp}/bench.db"
        start = time.perf_counter()
        fill(url, args.rows)
        print(f"filled {args.rows} result rows in {time.perf_counter() - start:.1f} s ({url.split(':')[0]})")
        engine = open_store(url)
        assert len(leaderboard_rows(engine)) == args.rows
        ranked = timed(lambda: leaderboard_rows(engine), args.repeat)
        table = timed(lambda: render([display_row(r) for r in leaderboard_rows(engine)], TABLE_COLUMNS, "table"),
                      args.repeat)
        env = {**os.environ, "BENCHCTL_DB": url}
        cli = timed(lambda: subprocess.run([sys.executable, "-m", "benchctl", "leaderboard", "--format", "json"],
                                           cwd=REPO, env=env, check=True, capture_output=True), args.repeat)
    for name, times in (("leaderboard_rows (in-process)", ranked), ("rows + table render (in-process)", table),
                        ("`benchctl leaderboard --format json` (subprocess)", cli)):
        print(f"{name}: median {statistics.median(times):.3f} s, min {min(times):.3f} s over {len(times)} runs")


if __name__ == "__main__":
    main()
