"""A controller's store pool keeps as many PostgreSQL connections as its threads use at once: steady
work opens no new connection (each is a server fork, authentication and a psycopg connect)."""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa
from click.testing import CliRunner

from benchctl.cli.options import CliState
from benchctl.cli.run import resume
from benchctl.engine.scheduler import connections_for


def test_a_run_keeps_every_connection_its_threads_use_at_once(pg_url: str) -> None:
    state = CliState(db=pg_url)
    result = CliRunner().invoke(resume, ["--concurrency", "9"], obj=state)  # opens the store as `run` does
    assert result.exit_code == 0, result.output
    engine = state.engine()
    engine.dispose()
    opened = []
    sa.event.listen(engine, "connect", lambda *_args: opened.append(1))
    threads = connections_for(9)
    assert threads > 5 + 1  # above SQLAlchemy's default pool: the old pool opened the rest anew each round
    together = threading.Barrier(threads, timeout=60)

    def hold() -> None:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
            together.wait()  # every thread holds its connection at once

    errors: list[Any] = []
    for _ in range(4):
        workers = [threading.Thread(target=lambda: _catching(hold, errors)) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert errors == []
    assert len(opened) == threads
    engine.dispose()


def _catching(fn: Any, errors: list[Any]) -> None:
    try:
        fn()
    except Exception as exc:
        errors.append(exc)
