"""Measure `benchctl --help` start-up time against a bare `python -c pass` (goal: <= 0.25 s above it).

    .venv/bin/python scripts/bench_startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

VENV = Path(__file__).resolve().parent.parent / ".venv" / "bin"


def timed(cmd: list[str], runs: int) -> list[float]:
    subprocess.run(cmd, check=True, capture_output=True)  # warm the file cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    bare = timed([str(VENV / "python"), "-c", "pass"], args.runs)
    helped = timed([str(VENV / "benchctl"), "--help"], args.runs)
    print(json.dumps({"runs": args.runs, "python_pass_median_s": statistics.median(bare),
                      "benchctl_help_median_s": statistics.median(helped),
                      "overhead_s": statistics.median(helped) - statistics.median(bare)}, indent=2))


if __name__ == "__main__":
    main()
