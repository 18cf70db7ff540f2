"""Ordered schema migrations, applied with alembic's operations (portable across SQLite and PostgreSQL).

Each migration has a version, a name and an ``upgrade(op)``; its DDL is frozen here (never built
from the current models) so that an old database upgrades the same way forever. The table
``schema_migrations`` records what has been applied. Add a migration at the end; never edit one
that has shipped.

A new database is not migrated step by step: the migrations are replayed into a ``MetaData``
(``_HeadSchema``, the same frozen DDL, so the same tables, columns in the same order, indexes and
constraints), created with ``create_all`` and stamped at the newest version, in one transaction and
without alembic (importing alembic and running nine migrations cost a new store 0.12–0.2 s).
``tests/store/test_new_store.py`` holds the two ways to the same schema on SQLite and PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

VERSION_TABLE = "schema_migrations"
_LOCK_KEY = 0x62656E6368  # "bench": the advisory lock that serialises migrations on PostgreSQL


class SchemaTooNew(Exception):
    """The database was migrated by a newer benchctl."""


class Operations(Protocol):
    """What a migration may do with its ``op``: alembic's ``Operations`` runs it as DDL on a database,
    ``_HeadSchema`` builds tables from it."""

    def create_table(self, table_name: str, *columns: sa.schema.SchemaItem) -> object: ...

    def add_column(self, table_name: str, column: sa.Column[Any]) -> object: ...

    def create_index(self, index_name: str, table_name: str, columns: Sequence[str]) -> object: ...


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    upgrade: Callable[[Operations], None]


def _v1_initial(op: Operations) -> None:
    op.create_table(
        "campaign",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String, nullable=False, unique=True),
        sa.Column("spec_json", sa.String, nullable=False),
        sa.Column("source_path", sa.String, nullable=False),
        sa.Column("budget_usd", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "cell",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("campaign_id", sa.Integer, sa.ForeignKey("campaign.id"), nullable=False),
        sa.Column("key", sa.String, nullable=False),
        sa.Column("provider", sa.String, nullable=False),
        sa.Column("gpu", sa.String, nullable=False),
        sa.Column("count", sa.Integer, nullable=False),
        sa.Column("market", sa.String, nullable=False),
        sa.Column("config_json", sa.String, nullable=False),
        sa.Column("state", sa.String, nullable=False),
        sa.Column("reason", sa.String, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("campaign_id", "key"),
    )
    op.create_index("ix_cell_campaign_id", "cell", ["campaign_id"])
    op.create_table(
        "attempt",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("cell_id", sa.Integer, sa.ForeignKey("cell.id"), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("token", sa.String, nullable=False, unique=True),
        sa.Column("provider", sa.String, nullable=False),
        sa.Column("node_json", sa.String, nullable=True),
        sa.Column("hourly_usd", sa.Float, nullable=True),
        sa.Column("market", sa.String, nullable=False),
        sa.Column("host", sa.String, nullable=True),
        sa.Column("open", sa.Boolean, nullable=False),
        sa.Column("outcome", sa.String, nullable=True),
        sa.Column("detail", sa.String, nullable=True),
        sa.Column("launched_at", sa.Float, nullable=True),
        sa.Column("terminated_at", sa.Float, nullable=True),
        sa.Column("cost_usd", sa.Float, nullable=True),
        sa.Column("remote_dir", sa.String, nullable=False),
        sa.Column("events_offset", sa.Integer, nullable=False),
        sa.Column("events_lines", sa.Integer, nullable=False),
    )
    op.create_index("ix_attempt_cell_id", "attempt", ["cell_id"])
    op.create_table(
        "event",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempt.id"), nullable=False),
        sa.Column("cell_id", sa.Integer, sa.ForeignKey("cell.id"), nullable=False),
        sa.Column("line", sa.Integer, nullable=False),
        sa.Column("t", sa.Float, nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("phase", sa.String, nullable=True),
        sa.Column("data_json", sa.String, nullable=False),
        sa.UniqueConstraint("attempt_id", "line"),
    )
    op.create_index("ix_event_attempt_id", "event", ["attempt_id"])
    op.create_index("ix_event_cell_id", "event", ["cell_id"])


def _v2_results_and_artifacts(op: Operations) -> None:
    op.create_table(
        "result",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("cell_id", sa.Integer, sa.ForeignKey("cell.id"), nullable=False, unique=True),
        sa.Column("step_time_ms", sa.Float, nullable=False),
        sa.Column("step_time_p10_ms", sa.Float, nullable=False),
        sa.Column("step_time_p90_ms", sa.Float, nullable=False),
        sa.Column("timed_steps", sa.Integer, nullable=False),
        sa.Column("hourly_usd", sa.Float, nullable=False),
        sa.Column("market", sa.String, nullable=False),
        sa.Column("target_steps", sa.Integer, nullable=False),
        sa.Column("train_hours", sa.Float, nullable=False),
        sa.Column("cost_to_train_usd", sa.Float, nullable=False),
        sa.Column("computed_at", sa.Float, nullable=False),
    )
    op.create_table(
        "artifact",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("attempt_id", sa.Integer, sa.ForeignKey("attempt.id"), nullable=False),
        sa.Column("cell_id", sa.Integer, sa.ForeignKey("cell.id"), nullable=False),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("remote_path", sa.String, nullable=False),
        sa.Column("local_path", sa.String, nullable=True),
        sa.Column("bytes", sa.Integer, nullable=True),
    )
    op.create_index("ix_artifact_attempt_id", "artifact", ["attempt_id"])
    op.create_index("ix_artifact_cell_id", "artifact", ["cell_id"])


def _v3_campaign_uid(op: Operations) -> None:
    # Campaigns made before v3 keep uid '' and with it their old node tag, so their live nodes
    # are still found after the upgrade.
    op.add_column("campaign", sa.Column("uid", sa.String, nullable=False, server_default=""))


def _v4_cell_lease(op: Operations) -> None:
    # Which controller runs the cell, until when: a second controller skips leased cells.
    op.add_column("cell", sa.Column("lease_owner", sa.String, nullable=True))
    op.add_column("cell", sa.Column("lease_expires_at", sa.Float, nullable=True))


def _v5_artifact_sha256(op: Operations) -> None:
    op.add_column("artifact", sa.Column("sha256", sa.String, nullable=True))


def _v6_result_evidence(op: Operations) -> None:
    # What the leaderboard shows next to cost-to-train, computed once with the result so that
    # ranking 10,000 rows is one query; and imported campaigns (kind 'imported') beside run ones.
    op.add_column("campaign", sa.Column("kind", sa.String, nullable=False, server_default="run"))
    for name, kind in (("model", sa.String), ("interconnect", sa.String), ("vcpus", sa.Integer),
                       ("numa", sa.String), ("optimizer_ms", sa.Float), ("optimizer_share", sa.Float),
                       ("comm_share", sa.Float), ("busbw_gbps", sa.Float), ("busbw_bytes", sa.BigInteger),
                       ("flags_json", sa.String)):
        op.add_column("result", sa.Column(name, kind, nullable=True))


def _v7_result_precision(op: Operations) -> None:
    # How the step was computed, so a bf16 step is never read as the fp8 record: NULL for older results.
    op.add_column("result", sa.Column("precision", sa.String, nullable=True))
    op.add_column("result", sa.Column("compiled", sa.Boolean, nullable=True))
    op.add_column("result", sa.Column("attention", sa.String, nullable=True))


def _v8_result_host_data(op: Operations) -> None:
    # Where the profile's batches came from (synthetic | tokenize on the host): NULL for older results.
    op.add_column("result", sa.Column("host_data", sa.String, nullable=True))


def _v9_result_timing(op: Operations) -> None:
    # How steady the timed steps were: the drift between their first and last quarter, and the
    # unrecorded steps (and seconds) run first until the clocks settled. NULL for older results.
    op.add_column("result", sa.Column("drift", sa.Float, nullable=True))
    op.add_column("result", sa.Column("settle_steps", sa.Integer, nullable=True))
    op.add_column("result", sa.Column("settle_s", sa.Float, nullable=True))


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial: campaign, cell, attempt, event", _v1_initial),
    Migration(2, "results and artifacts", _v2_results_and_artifacts),
    Migration(3, "campaign uid (part of the node tag)", _v3_campaign_uid),
    Migration(4, "cell lease (two controllers, one database)", _v4_cell_lease),
    Migration(5, "artifact sha256", _v5_artifact_sha256),
    Migration(6, "result evidence columns, campaign kind", _v6_result_evidence),
    Migration(7, "result precision, compiled, attention", _v7_result_precision),
    Migration(8, "result host_data", _v8_result_host_data),
    Migration(9, "result drift, settle steps and seconds", _v9_result_timing),
)
HEAD = MIGRATIONS[-1].version

_versions = sa.Table(
    VERSION_TABLE,
    sa.MetaData(),
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("applied_at", sa.Float, nullable=False),
)


def current_version(conn: Connection) -> int:
    if not sa.inspect(conn).has_table(VERSION_TABLE):
        return 0
    return conn.execute(sa.select(sa.func.max(_versions.c.version))).scalar() or 0


class _HeadSchema:
    """The migrations' ``op`` that builds tables instead of altering a database: the migrations
    replayed through it, in order, leave the newest schema in ``metadata``. It knows the operations
    the migrations use; a migration that needs another one adds it here."""

    def __init__(self) -> None:
        self.metadata = sa.MetaData()

    def create_table(self, table_name: str, *columns: sa.schema.SchemaItem) -> sa.Table:
        return sa.Table(table_name, self.metadata, *columns)

    def add_column(self, table_name: str, column: sa.Column[Any]) -> None:
        self.metadata.tables[table_name].append_column(column)

    def create_index(self, index_name: str, table_name: str, columns: Sequence[str]) -> sa.Index:
        table = self.metadata.tables[table_name]
        return sa.Index(index_name, *(table.c[name] for name in columns))


def _create_at_head(conn: Connection) -> list[int]:
    """Create every table of a new database at the newest schema and record every migration as applied."""
    schema = _HeadSchema()
    for migration in MIGRATIONS:
        migration.upgrade(schema)
    schema.metadata.create_all(conn, checkfirst=False)
    now = time.time()
    conn.execute(_versions.insert(), [{"version": m.version, "name": m.name, "applied_at": now} for m in MIGRATIONS])
    return [m.version for m in MIGRATIONS]


def upgrade(engine: Engine, target: int = HEAD) -> list[int]:
    """Apply every migration above the database's version up to ``target``; return those applied.

    A new database (no version) upgraded to ``HEAD`` is created at the newest schema and stamped in
    one transaction (``_create_at_head``); an older one, or an upgrade to an older ``target``, runs
    the migrations one by one. Each transaction holds a database-wide lock (PostgreSQL: an
    advisory lock; SQLite: the write lock its transactions take at BEGIN IMMEDIATE) and re-reads
    the version first, so two controllers opening the same database at once create or migrate it
    once."""
    applied: list[int] = []
    while True:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            _versions.create(conn, checkfirst=True)
            version = current_version(conn)
            if version > HEAD:
                raise SchemaTooNew(f"the database is at schema version {version}, newer than this benchctl "
                                   f"knows ({HEAD}): upgrade benchctl")
            if version == 0 and target == HEAD:
                return _create_at_head(conn)
            migration = next((m for m in MIGRATIONS if version < m.version <= target), None)
            if migration is None:
                return applied
            from alembic.migration import MigrationContext  # imported only when a migration runs: it is slow
            from alembic.operations import Operations as AlembicOperations

            migration.upgrade(AlembicOperations(MigrationContext.configure(conn)))
            conn.execute(_versions.insert().values(version=migration.version, name=migration.name,
                                                   applied_at=time.time()))
            applied.append(migration.version)
