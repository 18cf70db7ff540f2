"""Measure start-up: `benchctl --help` and `benchctl plan` of a local campaign against a bare
`python -c pass` (goal: <= 0.25 s above it), and which heavy modules each loads.

    .venv/bin/python scripts/bench_startup.py [--runs 20] [--tree DIR]

Each command runs ``--runs`` times as a subprocess; the medians of wall time and CPU time (user +
system of that process) are printed. ``--tree DIR`` runs them from another checkout (e.g. an older
commit unpacked with ``git archive``) to compare on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv" / "bin"
HEAVY = ("pydantic", "sqlalchemy", "sqlmodel", "benchctl.store.models", "yaml", "rich", "matplotlib")
PROBE = ("import sys\nfrom benchctl.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
         f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n")


def timed(cmd: list[str], runs: int, env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Median wall and CPU seconds of ``runs`` runs (after one that warms the file cache)."""
    subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=cwd)
    walls, cpus = [], []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        walls.append(time.perf_counter() - start)
        cpus.append(usage.ru_utime + usage.ru_stime)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(cmd)} failed")
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tree", type=Path, default=REPO, help="run the commands from this checkout")
    args = parser.parse_args()
    tree = args.tree.resolve()
    python = str(VENV / "python")
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "BENCHCTL_HOME": home, "PYTHONPATH": str(tree)}
        env.pop("BENCHCTL_DB", None)
        plan = ["plan", str(REPO / "campaigns" / "local-smoke.yaml")]
        out: dict[str, object] = {"runs": args.runs, "tree": str(tree)}
        for name, cmd in (("python -c pass", [python, "-c", "pass"]), ("--help", [python, "-m", "benchctl", "--help"]),
                          ("plan local-smoke", [python, "-m", "benchctl", *plan])):
            wall, cpu = timed(cmd, args.runs, env, tree)
            out[name] = {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4)}
        for name, argv in (("--help", ["--help"]), ("plan local-smoke", plan)):
            loaded = subprocess.run([python, "-c", PROBE, *argv], env=env, cwd=tree, capture_output=True, text=True)
            out[f"{name} loads"] = loaded.stderr.strip().splitlines()[-1]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
