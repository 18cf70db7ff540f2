"""Database URL resolution and engine setup: SQLite (WAL) by default, any SQLAlchemy URL otherwise."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import ArgumentError, OperationalError

from benchctl.store.connections import READ_ONLY, RECYCLE_S, ping_when_idle
from benchctl.store.migrations import HEAD, SchemaTooNew, current_version, upgrade
from benchctl.store.sqlite_url import BadSQLiteURL, UnsafeSQLiteFile, check_file, sqlite_target


class StoreError(Exception):
    """The database cannot be opened or used; the message says why and what to do."""


class BadDatabaseURL(StoreError):
    """The URL itself is wrong (not a reachability problem), or the file it names is not to be opened."""


class ReadOnlyStore(StoreError):
    """A write to a database opened with ``mode=ro``."""

    exit_code = 2


class DamagedStore(StoreError):
    """SQLite says the file is damaged (a page overwritten, a truncated file): the message names the
    file and how to save what it holds; nothing a command does will get past it."""

    exit_code = 2


def _damaged(context: Any) -> None:
    """``handle_error`` of an SQLite engine: a damaged file raises ``DamagedStore`` (not a traceback)."""
    original = context.original_exception
    if "malformed" not in str(original):  # "file is not a database": refused at open (cli.options)
        return
    engine = context.engine
    path = engine.url.database if engine is not None else None
    raise DamagedStore(f"the database {path or '(SQLite)'} is damaged ({original}). Save what it still holds "
                       f"with `sqlite3 {path} .recover | sqlite3 {path}.recovered`, then move the recovered file "
                       "in its place (keep the damaged one), or give another database with --db / BENCHCTL_DB") \
        from original


def default_url(home: Path) -> str:
    return f"sqlite:///{home / 'benchctl.db'}"


def normalize_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 when psycopg2 is not installed."""
    if url.startswith("postgresql://") and importlib.util.find_spec("psycopg2") is None:
        return "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return url


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # SQLAlchemy emits BEGIN itself (see _sqlite_begin)
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _sqlite_begin(conn: Any) -> None:
    """Take the write lock at BEGIN: DDL becomes transactional, and a writer waits (busy timeout)
    instead of failing with SQLITE_BUSY when it upgrades a read snapshot in WAL mode. A read
    (``connections.reader``) takes a snapshot only: it writes nothing, so it waits for no writer."""
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")


def _sqlite_read_only(dbapi_conn: Any, _record: Any) -> None:
    """A read-only connection: no journal mode to set (that is a write), a plain BEGIN (no write lock)."""
    dbapi_conn.isolation_level = None
    dbapi_conn.execute("PRAGMA foreign_keys=ON")


def _refuse_writes(context: Any) -> None:
    original = context.original_exception
    if "readonly database" in str(original):  # SQLITE_READONLY: "attempt to write a readonly database"
        raise ReadOnlyStore("the database was opened read-only (mode=ro in its URL) and this command writes to "
                            "it: drop mode=ro from --db / BENCHCTL_DB to run it") from original


def create_db_engine(url: str | URL, read_only: bool = False, pool_size: int | None = None) -> Engine:
    """``read_only``: an SQLite URL that SQLite opens read-only (``sqlite_url``); a write raises ReadOnlyStore.
    ``pool_size``: the connections a server database's pool keeps (SQLAlchemy's default, 5, when None):
    as many as the command's threads use at once, or every connection beyond it is opened and closed
    again for each use (a server fork, authentication and a driver connect); at most 10 more open
    for a burst. SQLite opens a file in process: its pool is left as SQLAlchemy sets it."""
    url = normalize_url(url) if isinstance(url, str) else url
    try:
        if str(url).startswith("sqlite") and read_only:
            engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
            sa.event.listen(engine, "connect", _sqlite_read_only)
            sa.event.listen(engine, "begin", lambda conn: conn.exec_driver_sql("BEGIN"))
            sa.event.listen(engine, "handle_error", _refuse_writes)
            sa.event.listen(engine, "handle_error", _damaged)
        elif str(url).startswith("sqlite"):
            engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
            sa.event.listen(engine, "connect", _sqlite_pragmas)
            sa.event.listen(engine, "begin", _sqlite_begin)
            sa.event.listen(engine, "handle_error", _damaged)
        else:
            sizing = {} if pool_size is None else {"pool_size": pool_size}
            engine = sa.create_engine(url, pool_use_lifo=True, pool_recycle=RECYCLE_S, **sizing)
            ping_when_idle(engine)  # not pool_pre_ping: two round trips before every session (connections.py)
    except (ArgumentError, ModuleNotFoundError, ImportError) as exc:
        shown = str(url)
        example = f"sqlite:///{os.path.abspath(shown)}" if "://" not in shown else "sqlite:///path/benchctl.db"
        raise BadDatabaseURL(f"cannot use database URL {_redact(shown)}: {exc}. "
                         f"Give an SQLAlchemy URL such as {example} or "
                         "postgresql://user@host:5432/db (PostgreSQL needs benchctl[postgres])") from exc
    return engine


def open_store(url: str, make_folders: bool = True, pool_size: int | None = None) -> Engine:
    """An engine on ``url`` with the schema migrated to the newest version. SQLite URLs go through
    ``sqlite_url``: no stray files, no links, a new file 0600 (in a missing folder only with
    ``make_folders``); ``mode=ro`` opens read-only, checks the schema is the newest instead of
    migrating, and a write raises ReadOnlyStore. ``pool_size``: see ``create_db_engine``."""
    try:
        target = sqlite_target(url)
    except BadSQLiteURL as exc:
        raise BadDatabaseURL(f"cannot use database URL {_redact(url)}: {exc}") from exc
    read_only = target is not None and target.read_only
    engine = create_db_engine(url if target is None else target.url, read_only, pool_size)
    try:
        if target is not None:
            check_file(target, make_folders)
        if read_only:
            _check_schema(engine)
        else:
            upgrade(engine)
    except (BadSQLiteURL, UnsafeSQLiteFile) as exc:
        engine.dispose()
        raise BadDatabaseURL(f"cannot use database URL {_redact(url)}: {exc}") from exc
    except OSError as exc:
        engine.dispose()
        raise StoreError(f"cannot create the folder or file of {url}: {exc}. Check BENCHCTL_HOME or --db") from exc
    except OperationalError as exc:
        engine.dispose()
        raise StoreError(f"cannot open the database {_redact(url)}: {exc.orig}. "
                         "Check the URL (--db / BENCHCTL_DB) and that the server is running") from exc
    except BaseException:
        engine.dispose()
        raise
    return engine


def _check_schema(engine: Engine) -> None:
    """A read-only database is read as it is: its schema must be the one this benchctl writes."""
    with engine.connect() as conn:
        version = current_version(conn)
    if version > HEAD:
        raise SchemaTooNew(f"the database is at schema version {version}, newer than this benchctl knows ({HEAD}): "
                           "upgrade benchctl")
    if version < HEAD:
        raise BadDatabaseURL(f"the database is at schema version {version}, older than this benchctl reads "
                             f"({HEAD}), and mode=ro forbids migrating it: open it once without mode=ro, then read "
                             "it with mode=ro")


def _redact(url: str) -> str:
    """The URL without its password."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except ArgumentError:  # shown as typed (a bare path), less what could be a password
        return re.sub(r"(://[^:@/]*):[^@/]*@", r"\1:***@", url, count=1)
