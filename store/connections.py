"""How the store's connections talk to the database: few round trips, stale connections still caught.

On PostgreSQL every round trip counts (a controller reads the store on every poll of every cell):

- ``reader(engine)``: the engine for a read of ONE statement. On PostgreSQL it runs in autocommit:
  the statement alone, with no BEGIN before it and no ROLLBACK after (psycopg sends neither in
  autocommit). One statement in autocommit is its own transaction, so it reads exactly what it
  read inside BEGIN … ROLLBACK. On SQLite it opens a deferred transaction (a snapshot in WAL mode,
  no write lock, so reads do not queue behind another controller's writes).
- ``autocommit(engine)``: the engine for a write of ONE statement (a conditional UPDATE): on
  PostgreSQL in autocommit, the statement its own transaction (one round trip instead of BEGIN,
  the statement, COMMIT); on SQLite the engine itself (BEGIN IMMEDIATE … COMMIT, in process).
- ``ping_when_idle(engine)`` instead of ``pool_pre_ping``: a pooled connection is pinged at
  checkout only when it sat idle ``IDLE_PING_S`` or more (a server restart, an idle timeout or a
  dropped NAT entry happen to connections left alone); one that fails the ping is replaced before
  anyone uses it (``DisconnectionError``: the pool connects anew). A connection back in use within
  that time is not pinged: the pre-ping cost two round trips (psycopg opens a transaction for the
  ping's SELECT) before every short session. The pool hands out the most recently used connection
  first (``pool_use_lifo``), so the busy ones stay warm and the spare ones go idle, and connections
  are replaced after ``RECYCLE_S``. A disconnect the ping did not catch (the server went away in
  the last seconds) fails that one operation, as a statement in flight would under a pre-ping, and
  SQLAlchemy then replaces every connection of the pool.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DisconnectionError

IDLE_PING_S = 5.0
RECYCLE_S = 1800.0
READ_ONLY = "benchctl_read_only"
"""The execution option ``reader`` sets on SQLite: the BEGIN listener then takes no write lock."""

_readers: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()
_autocommits: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()


def reader(engine: Engine) -> Engine:
    """``engine`` for one-statement reads (see the module's docstring); same pool, same listeners."""
    found = _readers.get(engine)
    if found is None:
        options: dict[str, Any] = {READ_ONLY: True}
        if engine.dialect.name == "postgresql":
            options["isolation_level"] = "AUTOCOMMIT"
        found = _readers[engine] = engine.execution_options(**options)
    return found


def autocommit(engine: Engine) -> Engine:
    """``engine`` for a one-statement write (see the module's docstring); same pool, same listeners."""
    if engine.dialect.name != "postgresql":
        return engine
    found = _autocommits.get(engine)
    if found is None:
        found = _autocommits[engine] = engine.execution_options(isolation_level="AUTOCOMMIT")
    return found


def ping_when_idle(engine: Engine) -> None:
    """Ping a connection at checkout only when it was idle ``IDLE_PING_S`` or more (see above)."""

    @sa.event.listens_for(engine.pool, "checkin")
    def checkin(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info["idle_since"] = time.monotonic()

    @sa.event.listens_for(engine.pool, "checkout")
    def checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.pop("idle_since", None)
        if idle_since is None or time.monotonic() - idle_since < IDLE_PING_S:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
            dbapi_conn.rollback()  # the driver may have opened a transaction for the ping
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(f"connection idle for {time.monotonic() - idle_since:.0f} s failed its "
                                     f"ping: {exc}") from exc
