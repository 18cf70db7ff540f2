"""Database URL resolution and engine setup: SQLite (WAL) by default, any SQLAlchemy URL otherwise."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import ArgumentError, OperationalError

from benchctl.store.migrations import upgrade


class StoreError(Exception):
    """The database cannot be opened or used; the message says why and what to do."""


class BadDatabaseURL(StoreError):
    """The URL itself is wrong (not a reachability problem)."""


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
    instead of failing with SQLITE_BUSY when it upgrades a read snapshot in WAL mode."""
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def create_db_engine(url: str) -> Engine:
    url = normalize_url(url)
    try:
        if url.startswith("sqlite"):
            engine = sa.create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
            sa.event.listen(engine, "connect", _sqlite_pragmas)
            sa.event.listen(engine, "begin", _sqlite_begin)
        else:
            engine = sa.create_engine(url, pool_pre_ping=True)
    except (ArgumentError, ModuleNotFoundError, ImportError) as exc:
        raise BadDatabaseURL(f"cannot use database URL {_redact(url)}: {exc}. "
                         "Give an SQLAlchemy URL such as sqlite:///path/benchctl.db or "
                         "postgresql://user@host:5432/db (PostgreSQL needs benchctl[postgres])") from exc
    return engine


def open_store(url: str) -> Engine:
    """An engine on ``url`` with the schema migrated to the newest version."""
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        try:
            Path(path).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if path and path != ":memory:" and "?" not in path:
                _create_private(Path(path))
        except OSError as exc:
            raise StoreError(f"cannot create the folder or file of {url}: {exc}. Check BENCHCTL_HOME or --db") from exc
    engine = create_db_engine(url)
    try:
        upgrade(engine)
    except OperationalError as exc:
        engine.dispose()
        raise StoreError(f"cannot open the database {_redact(url)}: {exc.orig}. "
                         "Check the URL (--db / BENCHCTL_DB) and that the server is running") from exc
    except BaseException:
        engine.dispose()
        raise
    return engine


def _create_private(path: Path) -> None:
    """A new SQLite file is made empty and 0600 before SQLite opens it (its WAL files follow its mode);
    an existing one is left as it is."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))


def _redact(url: str) -> str:
    """The URL without its password."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"
