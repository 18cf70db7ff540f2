"""Measure what the controller costs per cell: CPU, SQL statements and database round trips, with
three controller processes sharing one database (issue 31 item 12).

    .venv/bin/python scripts/bench_controller_cost.py [--db sqlite,postgresql] [--cells 20,200,1000]
                                                      [--controllers 3] [--concurrency 8]

Each size registers a campaign of N one-node cells in a fresh store (a SQLite file in a temporary
folder; a fresh schema of the PostgreSQL database ``test`` at 127.0.0.1:5432, dropped afterwards),
then starts ``--controllers`` processes at once, each running ``run_campaign`` over the whole
campaign (cell leases share the cells out) against the in-memory provider of the tests
(``tests/fakes/memory_provider.py``: a scripted healthy payload, no subprocess, no sleep). Each
controller reports its process CPU time while it ran the campaign, the statements SQLAlchemy sent,
the round trips its DBAPI connections made (every execute, and on PostgreSQL the BEGIN psycopg
sends before the first statement of a transaction and every COMMIT/ROLLBACK that reaches the
server; a pool pre-ping is an execute), the new DBAPI connections its pool opened (the pool's
``connect`` event: each is a server fork, authentication and a psycopg connect on PostgreSQL) and
the most connections it had checked out at once, and the Attempt rows it loaded as ORM objects. The figures
printed are per cell (summed over the controllers). Afterwards every cell must be ``done`` with
exactly one attempt that got a node (no cell ran twice, none left unfinished).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PG_URL = os.environ.get("BENCHCTL_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
CAMPAIGN = """\
name: cost
budget_usd: 100000
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 2}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: 3}}
matrix:
{matrix}"""


SHOW_STATEMENTS = bool(os.environ.get("BENCH_SHOW_STATEMENTS"))
"""Print the statements a controller sent, most frequent first (to stderr)."""
PROFILE_DIR = os.environ.get("BENCH_PROFILE_DIR")
"""Where each controller writes a cProfile of its ``run_campaign`` (``controller-<pid>.prof``), when set."""


def counting_store(url: str, pool_size: int | None = None) -> tuple[Any, Any, collections.Counter[str]]:
    """``open_store(url)`` with counters listening: (engine, DbCounter, Attempt rows loaded, statements by
    text, "connections" opened and "most checked out" at once)."""
    import sqlalchemy as sa

    from benchctl.store.database import open_store
    from benchctl.store.models import Attempt
    from tests.store.db_counter import count_dbapi

    engine = open_store(url, pool_size=pool_size)
    counter = count_dbapi(engine)
    seen: collections.Counter[str] = collections.Counter()
    out = [0]

    @sa.event.listens_for(engine.pool, "connect")
    def connected(*_args: Any) -> None:
        seen["connections"] += 1

    @sa.event.listens_for(engine.pool, "checkout")
    def checkout(*_args: Any) -> None:
        out[0] += 1
        seen["most checked out"] = max(seen["most checked out"], out[0])

    @sa.event.listens_for(engine.pool, "checkin")
    def checkin(*_args: Any) -> None:
        out[0] -= 1

    @sa.event.listens_for(engine, "before_cursor_execute")
    def statement(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        if SHOW_STATEMENTS:
            seen[" ".join(sql.split())[:100]] += 1

    @sa.event.listens_for(Attempt, "load")
    def load(*_args: Any) -> None:
        seen["attempt rows loaded"] += 1

    return engine, counter, seen


def _profile_threads() -> list[Any]:
    """Profile this thread and every thread started from now on, in CPU time (cProfile sees one thread only)."""
    import cProfile
    import threading

    profiles = [cProfile.Profile(time.thread_time)]
    run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        profiles.append(profile)
        profile.runcall(run, self)

    threading.Thread.run = profiled  # type: ignore[method-assign]
    profiles[0].enable()
    return profiles


def controller(url: str, campaign_path: str, concurrency: int, poll_s: float, status_s: float) -> None:
    """One controller process: run the campaign, print its figures as JSON."""
    from benchctl.campaign.spec import load_campaign
    from benchctl.engine.budget import Budget, attempt_worst_case_s
    from benchctl.engine.lease import Leases
    from benchctl.engine.run_context import RunContext
    from benchctl.engine.scheduler import connections_for, run_campaign
    from benchctl.store import queries as q
    from tests.fakes.memory_provider import MemoryProvider
    from tests.memory_campaign import FakeProviders, offer

    engine, counter, seen = counting_store(url, connections_for(concurrency))  # as `benchctl run` opens it
    campaign = load_campaign(Path(campaign_path))
    (row,) = q.campaigns(engine, campaign.spec.name)
    assert row.id is not None
    work = Path(tempfile.mkdtemp(prefix="bench-controller-"))
    provider = MemoryProvider([offer(hourly_usd=0.01)])
    leases = Leases(engine)
    ctx = RunContext(engine=engine, campaign=campaign, campaign_id=row.id, campaign_uid=row.uid,
                     providers=FakeProviders(work, {"local": provider}), artifacts_dir=work / "artifacts",
                     leases=leases, budget=Budget(engine, row.id, campaign.spec.budget_usd,
                                                  attempt_worst_case_s(campaign.spec)),
                     poll_interval_s=poll_s, status_interval_s=status_s, ready_timeout_s=30,
                     log=lambda _line: None)
    counter.reset()
    seen.clear()
    profiles = _profile_threads() if PROFILE_DIR else []
    cpu, wall = time.process_time(), time.perf_counter()
    summary = run_campaign(ctx, concurrency)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if profiles:
        import pstats

        profiles[0].disable()
        pstats.Stats(*profiles).dump_stats(str(Path(PROFILE_DIR or ".") / f"controller-{os.getpid()}.prof"))
    leases.close()
    if SHOW_STATEMENTS:
        for text, n in seen.most_common(30):
            print(f"{n:7d} {text}", file=sys.stderr)
    print(json.dumps({"cpu_s": cpu, "wall_s": wall, "ran": summary.ran, "launched": len(provider.launched()),
                      "statements": counter.statements, "round_trips": counter.round_trips,
                      "attempt_rows": seen["attempt rows loaded"], "connections": seen["connections"],
                      "most_checked_out": seen["most checked out"]}))


def _fresh(db: str, work: Path) -> tuple[str, Any]:
    """A URL on a fresh store, and what drops it afterwards."""
    if db == "sqlite":
        return f"sqlite:///{work / 'store.db'}", lambda: None
    import sqlalchemy as sa

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))

    def drop() -> None:
        with admin.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()

    return f"{PG_URL}?options=-csearch_path%3D{schema}", drop


def _check(url: str, cells: int) -> tuple[int, int]:
    """(cells that ran twice, cells not done); raises when the campaign is not all there. The
    attempts of a cell that ran twice are printed to stderr."""
    from benchctl.store import queries as q
    from benchctl.store.database import open_store

    engine = open_store(url)
    try:
        (row,) = q.campaigns(engine, "cost")
        rows = q.cells(engine, row.id or 0)
        assert len(rows) == cells, (len(rows), cells)
        by_cell: dict[int, list[Any]] = {}
        for attempt in q.campaign_attempts(engine, row.id or 0):
            if attempt.node_json is not None:
                by_cell.setdefault(attempt.cell_id, []).append(attempt)
        twice = [attempts for attempts in by_cell.values() if len(attempts) > 1]
        for attempts in twice:
            print("ran twice: " + "; ".join(f"attempt {a.number}: {a.outcome} {a.detail or ''}" for a in attempts),
                  file=sys.stderr)
        return len(twice), sum(1 for c in rows if c.state != "done")
    finally:
        engine.dispose()


def measure(db: str, cells: int, controllers: int, concurrency: int, poll_s: float, status_s: float) -> dict[str, Any]:
    from benchctl.campaign.spec import load_campaign
    from benchctl.cli.run import register_campaign
    from benchctl.store.database import open_store

    with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp:
        work = Path(tmp)
        url, drop = _fresh(db, work)
        try:
            path = work / "cost.yaml"
            path.write_text(CAMPAIGN.format(matrix="".join(
                f"  - {{provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.01, env: {{BENCH_CELL: {i}}}}}\n"
                for i in range(cells))))
            engine = open_store(url)
            register_campaign(engine, load_campaign(path), str(path))
            engine.dispose()
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            started = time.perf_counter()
            procs = [subprocess.Popen([sys.executable, __file__, "--controller", url, str(path), str(concurrency),
                                       str(poll_s), str(status_s)], stdout=subprocess.PIPE, text=True, env=env,
                                      cwd=REPO) for _ in range(controllers)]
            outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
            wall = time.perf_counter() - started
            twice, unfinished = _check(url, cells)
        finally:
            drop()
    total = {k: sum(o[k] for o in outs)
             for k in ("cpu_s", "statements", "round_trips", "attempt_rows", "launched", "connections")}
    return {"db": db, "cells": cells, "controllers": controllers, "wall_s": round(wall, 1),
            "cpu_ms_per_cell": round(1000 * total["cpu_s"] / cells, 1),
            "statements_per_cell": round(total["statements"] / cells, 1),
            "round_trips_per_cell": round(total["round_trips"] / cells, 1),
            "attempt_rows_per_cell": round(total["attempt_rows"] / cells, 1),
            "connections_per_cell": round(total["connections"] / cells, 2),
            "connections_per_controller": [o["connections"] for o in outs],
            "most_checked_out": [o["most_checked_out"] for o in outs],
            "cells_per_controller": [o["launched"] for o in outs], "ran_twice": twice, "unfinished": unfinished}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--controller":
        url, path, concurrency, poll_s, status_s = sys.argv[2:7]
        controller(url, path, int(concurrency), float(poll_s), float(status_s))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("--cells", default="20,200,1000")
    parser.add_argument("--controllers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8, help="cells each controller runs at once")
    parser.add_argument("--poll-interval", type=float, default=0.01)
    parser.add_argument("--status-interval", type=float, default=0.05)
    args = parser.parse_args()
    rows = []
    for db in args.db.split(","):
        for cells in (int(n) for n in args.cells.split(",")):
            rows.append(measure(db, cells, args.controllers, args.concurrency, args.poll_interval,
                                args.status_interval))
            print(json.dumps(rows[-1]), flush=True)
    print(_table(rows, os.getloadavg()))


def _table(rows: list[dict[str, Any]], load: tuple[float, float, float]) -> str:
    """The figures as the measurement docs show them (a Markdown table), with the load average."""
    lines = [f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs", "",
             "| db | cells | CPU ms/cell | statements/cell | round trips/cell | Attempt rows/cell "
             "| new connections/cell (per controller; most checked out at once) | wall s | ran twice | unfinished |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['db']} | {r['cells']:,} | {r['cpu_ms_per_cell']} | {r['statements_per_cell']} | "
              f"{r['round_trips_per_cell']} | {r['attempt_rows_per_cell']} | {r['connections_per_cell']} "
              f"({', '.join(map(str, r['connections_per_controller']))}; "
              f"{', '.join(map(str, r['most_checked_out']))}) | {r['wall_s']} | {r['ran_twice']} | "
              f"{r['unfinished']} |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
