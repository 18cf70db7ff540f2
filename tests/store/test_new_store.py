"""A new store is created at the newest schema in one transaction, without alembic, and its schema is
the one replaying every migration builds (SQLite and PostgreSQL); two controllers creating the same
new store at once create it once."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from benchctl.store.database import create_db_engine, open_store
from benchctl.store.migrations import _LOCK_KEY, HEAD, MIGRATIONS, VERSION_TABLE, upgrade
from tests.conftest import pg_schema_url


@contextmanager
def _other_url(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A second new database beside ``db_url``, of the same kind."""
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'replayed.db'}"
    else:
        with pg_schema_url() as url:
            yield url


def _schema(engine: Engine) -> dict[str, Any]:
    """Everything a schema is made of, as the database reports it: per table its columns in order (type,
    nullability, default), primary key, indexes, unique constraints, foreign keys and checks; the
    sequences; the versions recorded (without their times)."""
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        found: dict[str, Any] = {}
        for table in sorted(inspector.get_table_names()):
            found[table] = {
                "columns": [(c["name"], str(c["type"]), c["nullable"], c["default"], c.get("autoincrement"))
                            for c in inspector.get_columns(table)],
                "primary key": inspector.get_pk_constraint(table),
                "indexes": sorted((i["name"], tuple(i["column_names"]), i["unique"])
                                  for i in inspector.get_indexes(table)),
                "unique": sorted((u["name"] or "", tuple(u["column_names"]))
                                 for u in inspector.get_unique_constraints(table)),
                "foreign keys": sorted((f["name"] or "", tuple(f["constrained_columns"]), f["referred_table"],
                                        tuple(f["referred_columns"]), sorted(f["options"].items()))
                                       for f in inspector.get_foreign_keys(table)),
                "checks": sorted((c["name"] or "", c["sqltext"]) for c in inspector.get_check_constraints(table)),
            }
        if engine.dialect.name == "postgresql":
            found["sequences"] = sorted(inspector.get_sequence_names())
        found["versions"] = [tuple(row) for row in conn.execute(
            sa.text(f"SELECT version, name FROM {VERSION_TABLE} ORDER BY version"))]
    return found


def test_a_new_store_has_the_schema_every_migration_replayed_builds(db_url: str, tmp_path: Path) -> None:
    created = open_store(db_url)
    with _other_url(db_url, tmp_path) as other:
        replayed = create_db_engine(other)
        try:
            for version in range(1, HEAD + 1):  # one migration at a time, as an old store upgrades
                assert upgrade(replayed, target=version) == [version]
            assert _schema(created) == _schema(replayed)
        finally:
            replayed.dispose()
            created.dispose()


def test_a_new_store_is_created_in_one_transaction_without_alembic(db_url: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("alembic.migration", "alembic.operations"):
        monkeypatch.setitem(sys.modules, module, None)  # importing them raises ImportError
    engine = create_db_engine(db_url)
    begins: list[int] = []
    sa.event.listen(engine, "begin", lambda _conn: begins.append(1))
    try:
        assert upgrade(engine) == [m.version for m in MIGRATIONS]
        assert len(begins) == 1
        assert upgrade(engine) == []
        with engine.connect() as conn:
            versions = conn.execute(sa.text(f"SELECT version, name FROM {VERSION_TABLE} ORDER BY version")).all()
        assert [tuple(v) for v in versions] == [(m.version, m.name) for m in MIGRATIONS]
    finally:
        engine.dispose()


@contextmanager
def _holding_the_migration_lock(engine: Engine) -> Iterator[Connection]:
    """What ``upgrade`` waits for: PostgreSQL's advisory lock, SQLite's write lock (BEGIN IMMEDIATE)."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:key)"), {"key": _LOCK_KEY})
            conn.commit()
            try:
                yield conn
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": _LOCK_KEY})
                conn.commit()
    else:
        with engine.begin() as conn:
            yield conn


def _setter(event: threading.Event) -> Any:
    def engine_connect(_conn: Connection) -> None:
        event.set()

    return engine_connect


def test_two_controllers_creating_one_new_store_at_once_create_it_once(db_url: str) -> None:
    """Both wait on the lock the test holds, then go: one creates the store, the other finds it made."""
    holder = create_db_engine(db_url)
    engines = [create_db_engine(db_url) for _ in range(2)]
    waiting = [threading.Event() for _ in engines]
    backend_pids: list[int] = []
    for engine, event in zip(engines, waiting, strict=True):
        # a connection is made, then BEGIN (IMMEDIATE): set just before it waits for the lock
        sa.event.listen(engine, "engine_connect", _setter(event))
        if engine.dialect.name == "postgresql":
            sa.event.listen(engine, "connect", lambda dbapi, _record: backend_pids.append(dbapi.info.backend_pid))
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def create(engine: Engine) -> None:
        try:
            results.append(upgrade(engine))
        except BaseException as exc:  # shown by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(engine,)) for engine in engines]
    try:
        with _holding_the_migration_lock(holder) as conn:
            for thread in threads:
                thread.start()
            for event in waiting:
                assert event.wait(60)
            if holder.dialect.name == "postgresql":  # both are seen waiting for the advisory lock
                deadline = time.monotonic() + 60
                while conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                                           "AND pid = ANY(:pids)"), {"pids": backend_pids}).scalar() != 2:
                    assert time.monotonic() < deadline, "the two controllers never waited for the lock"
                    time.sleep(0.05)
                conn.commit()
        for thread in threads:
            thread.join(120)
        assert errors == []
        assert sorted(results) == [[], [m.version for m in MIGRATIONS]]
        with holder.connect() as check:
            versions = check.execute(sa.text(f"SELECT version FROM {VERSION_TABLE} ORDER BY version")).scalars().all()
        assert versions == [m.version for m in MIGRATIONS]
    finally:
        for engine in (holder, *engines):
            engine.dispose()
