"""Count what an engine asks of its database, at the DBAPI level: statements, round trips, rows fetched.

``count_dbapi(engine)`` makes the engine's new connections (its pool is emptied) through counting
subclasses of the driver's own classes, ``sqlite3.Connection``/``Cursor`` (the ``factory`` argument
of ``sqlite3.connect``) and ``psycopg.Connection``/``Cursor`` (``cursor_factory``). Round trips:
every ``execute``/``executemany`` (a pool pre-ping is one), and on PostgreSQL also the ``BEGIN``
psycopg 3 sends before the first statement of a transaction when the connection is not in
autocommit (psycopg's ``Connection._start_query``: a separate command), and each ``commit``/
``rollback`` that finds a transaction open (psycopg returns at once when the connection is idle:
``BaseConnection._commit_gen``/``_rollback_gen``). SQLite has no server; its figure counts the same calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine


@dataclass
class DbCounter:
    statements: int = 0
    """Statements SQLAlchemy sent (``before_cursor_execute``), BEGIN IMMEDIATE on SQLite included."""
    round_trips: int = 0
    rows: int = 0
    """Rows fetched from cursors."""

    def reset(self) -> None:
        self.statements = self.round_trips = self.rows = 0

    def snapshot(self) -> tuple[int, int, int]:
        return self.statements, self.round_trips, self.rows


def count_dbapi(engine: Engine) -> DbCounter:
    """Count from now on what ``engine`` sends and fetches (see the module's docstring)."""
    counter = DbCounter()
    if engine.dialect.name == "sqlite":
        factory: Any = _sqlite_classes(counter)
    else:
        factory = _psycopg_classes(counter)

    @sa.event.listens_for(engine, "do_connect")
    def connect(_dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        if engine.dialect.name == "sqlite":
            cparams["factory"] = factory
            return None  # SQLAlchemy connects, with our factory
        connection_class, cursor_class = factory
        cparams["cursor_factory"] = cursor_class
        return connection_class.connect(*cargs, **cparams)

    @sa.event.listens_for(engine, "before_cursor_execute")
    def statement(*_args: Any) -> None:
        counter.statements += 1

    engine.dispose()  # connections made before counting are not reused
    return counter


def _counting_fetches(base: type, counter: DbCounter) -> type:
    class Fetching(base):
        def fetchone(self) -> Any:
            row = super().fetchone()
            counter.rows += row is not None
            return row

        def fetchmany(self, *args: Any, **kwargs: Any) -> Any:
            rows = super().fetchmany(*args, **kwargs)
            counter.rows += len(rows)
            return rows

        def fetchall(self) -> Any:
            rows = super().fetchall()
            counter.rows += len(rows)
            return rows

    return Fetching


def _sqlite_classes(counter: DbCounter) -> type:
    import sqlite3

    class Cursor(_counting_fetches(sqlite3.Cursor, counter)):  # type: ignore[misc]
        def execute(self, *args: Any) -> Any:
            counter.round_trips += 1
            return super().execute(*args)

        def executemany(self, *args: Any) -> Any:
            counter.round_trips += 1
            return super().executemany(*args)

    class Connection(sqlite3.Connection):
        def cursor(self, *_args: Any, **_kwargs: Any) -> Any:
            return super().cursor(Cursor)

        def commit(self) -> None:
            counter.round_trips += self.in_transaction
            super().commit()

        def rollback(self) -> None:
            counter.round_trips += self.in_transaction
            super().rollback()

    return Connection


def _psycopg_classes(counter: DbCounter) -> tuple[type, type]:
    import psycopg
    from psycopg.pq import TransactionStatus

    class Cursor(_counting_fetches(psycopg.Cursor, counter)):  # type: ignore[misc]
        def _begins(self) -> int:
            conn = self.connection
            return int(not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE)

        def execute(self, *args: Any, **kwargs: Any) -> Any:
            counter.round_trips += 1 + self._begins()
            return super().execute(*args, **kwargs)

        def executemany(self, *args: Any, **kwargs: Any) -> Any:
            counter.round_trips += 1 + self._begins()
            return super().executemany(*args, **kwargs)

    class Connection(psycopg.Connection):
        def commit(self) -> None:
            counter.round_trips += self.info.transaction_status != TransactionStatus.IDLE
            super().commit()

        def rollback(self) -> None:
            counter.round_trips += self.info.transaction_status != TransactionStatus.IDLE
            super().rollback()

    return Connection, Cursor
