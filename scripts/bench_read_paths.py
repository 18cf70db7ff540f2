"""What the read paths cost on a large campaign: `status`, `leaderboard`, `report`, `import` (issue 31 item 13).

    .venv/bin/python scripts/bench_read_paths.py [--cells 10000] [--skip report,import] [--repeat 1]

Fills a fresh SQLite store directly (Core bulk inserts, no engine) with one campaign of ``--cells``
cells shaped like a real one: most ``done`` with a Result, attempt and events (preflight checks,
timed profile steps, a collectives sweep); a few failed, bad_node, preempted, running and pending.
Then runs each command as a subprocess (start-up included) and prints its wall time, CPU time
(user + system of that process), peak RSS and output size, next to `benchctl --help`:

- `status bench` (table), `status bench --format json`
- `leaderboard` (table, piped: every row), `leaderboard --format json`, `leaderboard --top 30`
- `report bench --out DIR` (the page's size too)
- `import` of the campaign's `leaderboard --format json` export (its rows with a result, 3,500 per
  file: a records file holds 4 MiB at most) into a fresh store, and into one already at the newest
  schema (what a second import finds: no migrations). With ``--import-db URL`` (a PostgreSQL
  database, e.g. postgresql://postgres@127.0.0.1:5432/test) each import goes to a fresh schema of
  that database instead (created for it, dropped after), through ``BENCHCTL_DB``.

``--tree DIR`` runs the commands from another checkout of the repository (e.g. an older commit
unpacked with ``git archive``), to compare before and after on the same machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.synthetic_campaign import fill  # noqa: E402

MIGRATE_CODE = "import sys; from benchctl.store.database import open_store; open_store(sys.argv[1])"
COLUMNS_CODE = "import json; from benchctl.results.leaderboard import COLUMNS; print(json.dumps(COLUMNS))"


def measured(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float) -> dict[str, float]:
    """Run ``cmd``: wall s, CPU s (user + system), peak RSS MiB, stdout bytes; exit code."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=cwd)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        size = out.seek(0, 2)
        err.seek(0)
        message = err.read().decode(errors="replace").strip().splitlines()[-1:] if proc.returncode else []
    return {"exit": proc.returncode, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_mib": usage.ru_maxrss / 1024, "stdout_mib": size / 2**20, "error": " ".join(message)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=8, help="timed profile steps per done cell")
    parser.add_argument("--skip", default="", help="comma-separated: status, leaderboard, report, import")
    parser.add_argument("--tree", type=Path, default=REPO, help="run the commands from this checkout")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a command is killed")
    parser.add_argument("--work", type=Path, help="keep the store, the records files and the page in this "
                        "(new) folder, e.g. to profile a command on them afterwards")
    parser.add_argument("--import-db", metavar="URL", help="import into fresh schemas of this PostgreSQL database "
                        "instead of SQLite files")
    parser.add_argument("--fill-only", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fill_only:
        fill(args.fill_only, args.cells, args.samples)
        return
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    tree = args.tree.resolve()
    python = str(REPO / ".venv" / "bin" / "python")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) if args.work is None else args.work.resolve()
        work.mkdir(mode=0o700, exist_ok=args.work is None)
        home = work / "home"
        home.mkdir(mode=0o700)
        start = time.perf_counter()  # filled in a child: this process stays small, so its children's peak RSS is theirs
        subprocess.run([python, __file__, "--fill-only", f"sqlite:///{home / 'benchctl.db'}", "--cells",
                        str(args.cells), "--samples", str(args.samples)], check=True)
        print(f"filled {args.cells:,} cells in {time.perf_counter() - start:.1f} s "
              f"({(home / 'benchctl.db').stat().st_size / 2**20:.0f} MiB)", flush=True)
        env = {**os.environ, "BENCHCTL_HOME": str(home), "PYTHONPATH": str(tree)}
        env.pop("BENCHCTL_DB", None)
        runs: list[tuple[str, list[str]]] = [("--help", ["--help"])]
        if "status" not in skip:
            runs += [("status", ["status", "bench"]), ("status --format json", ["status", "bench", "--format", "json"])]
        if "leaderboard" not in skip:
            runs += [("leaderboard (piped table)", ["leaderboard"]),
                     ("leaderboard --format json", ["leaderboard", "--format", "json"]),
                     ("leaderboard --top 30", ["leaderboard", "--top", "30"])]
        if "report" not in skip:
            runs += [("report", ["report", "bench", "--out", str(work / "page")])]
        results = []
        for name, argv in runs:
            got = measured([python, "-m", "benchctl", *argv], env, tree, args.timeout)
            if name == "report" and (work / "page" / "index.html").exists():
                got["page_mib"] = (work / "page" / "index.html").stat().st_size / 2**20
            results.append((name, got))
            print(json.dumps({"command": name, **{k: round(v, 3) if isinstance(v, float) else v
                                                  for k, v in got.items()}}), flush=True)
        if "import" not in skip:
            exported = subprocess.run([python, "-m", "benchctl", "leaderboard", "--format", "json"], env=env, cwd=tree,
                                      capture_output=True, text=True, check=True).stdout
            columns = json.loads(subprocess.run(  # the export's documented keys, read in a child (this one stays small)
                [python, "-c", COLUMNS_CODE], env=env, cwd=tree, capture_output=True, text=True, check=True).stdout)
            rows = [{k: r.get(k) for k in columns} for r in json.loads(exported)
                    if r.get("cost_to_train_usd") is not None]
            files = []
            per = 3_500  # a records file holds 4 MiB at most
            for k in range(0, len(rows), per):
                path = work / f"records-{k // per}.json"
                path.write_text(json.dumps(rows[k:k + per]))
                files.append(str(path))
            for store in ("fresh", "current"):  # a new store (migrated by the import), one already at the newest schema
                target = work / f"target-{store}"
                target.mkdir(mode=0o700)
                with _store_url(args.import_db, target) as url:
                    if store == "current":
                        subprocess.run([python, "-c", MIGRATE_CODE, url], env=env, cwd=tree, check=True)
                    got = measured([python, "-m", "benchctl", "import", *files, "--campaign", "bench"],
                                   {**env, "BENCHCTL_HOME": str(target), "BENCHCTL_DB": url}, tree, args.timeout)
                got["records"] = len(rows)
                where = "PostgreSQL" if args.import_db else "SQLite"
                results.append((f"import ({len(rows):,} records, {len(files)} files, {store} {where} store)", got))
                print(json.dumps({"command": f"import ({store} store)", **{
                    k: round(v, 3) if isinstance(v, float) else v for k, v in got.items()}}), flush=True)
        print(_table(results, args.cells))


@contextlib.contextmanager
def _store_url(server: str | None, folder: Path) -> Iterator[str]:
    """An SQLite file in ``folder``, or a fresh schema of the PostgreSQL database ``server`` (dropped after)."""
    if server is None:
        yield f"sqlite:///{folder / 'benchctl.db'}"
        return
    import sqlalchemy as sa

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{server}{'&' if '?' in server else '?'}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def _table(results: list[tuple[str, dict[str, float]]], cells: int) -> str:
    """The figures as the measurement docs show them (a Markdown table), CPU against ``--help``'s."""
    help_cpu = dict(results).get("--help", {}).get("cpu_s") or float("nan")
    load = os.getloadavg()
    lines = [f"{cells:,} cells; load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on "
             f"{os.cpu_count()} CPUs", "", "| command | CPU s | × --help | wall s | peak RSS MiB | stdout MiB | exit |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {name} | {got['cpu_s']:.3f} | {got['cpu_s'] / help_cpu:.1f} | {got['wall_s']:.2f} | "
              f"{got['peak_rss_mib']:.0f} | {got['stdout_mib']:.2f} | {got['exit']} |" for name, got in results]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
