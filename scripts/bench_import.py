"""How long `benchctl import` takes for a records file of many results (issue: ~ what SQLite needs).

    .venv/bin/python scripts/bench_import.py [--rows 10000] [--files 1]

Fills a temporary store with ``--rows`` results (``bench_leaderboard.fill``), exports them with
``benchctl leaderboard --format json`` into ``--files`` records files, then times in-process
(1) reading and checking the files (``read_records``) and (2) writing them (``save_import``) into a
fresh SQLite store, and (3) the whole ``benchctl import`` command in a subprocess.
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

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_leaderboard import fill  # noqa: E402

from benchctl.results.records import read_records  # noqa: E402
from benchctl.store.database import open_store  # noqa: E402
from benchctl.store.imports import save_import  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=1, help="split the export into this many records files")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        source = work / "source"
        source.mkdir()
        fill(f"sqlite:///{source / 'benchctl.db'}", args.rows)
        env = {**os.environ, "BENCHCTL_HOME": str(source)}
        exported = subprocess.run([sys.executable, "-m", "benchctl", "leaderboard", "--format", "json"], cwd=REPO,
                                  env=env, check=True, capture_output=True, text=True).stdout
        rows = json.loads(exported)
        rows = rows["rows"] if isinstance(rows, dict) else rows
        per = -(-len(rows) // args.files)
        files = []
        for i in range(args.files):
            path = work / f"records-{i}.json"
            path.write_text(json.dumps(rows[i * per:(i + 1) * per]))
            files.append(path)
        size = sum(p.stat().st_size for p in files)
        start = time.perf_counter()
        read = [read_records(p)[0] for p in files]
        read_s = time.perf_counter() - start
        start = time.perf_counter()
        save_import(open_store(f"sqlite:///{work / 'inproc.db'}"), "bench", [str(p) for p in files],
                    [r for part in read for r in part], [])
        save_s = time.perf_counter() - start
        target = work / "target"
        target.mkdir()
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "benchctl", "import", *map(str, files), "--campaign", "bench"],
                              cwd=REPO, env={**os.environ, "BENCHCTL_HOME": str(target)}, capture_output=True,
                              text=True)
        command_s = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"import failed: {done.stderr.strip()}")
        print(f"records {len(rows)} in {args.files} file(s), {size / 2**20:.1f} MiB")
        print(f"read + check   {read_s:7.2f} s")
        print(f"write (SQLite) {save_s:7.2f} s")
        print(f"benchctl import {command_s:6.2f} s (subprocess, start-up included)")


if __name__ == "__main__":
    main()
