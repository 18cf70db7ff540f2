"""Cell leases: which controller runs a cell, until when.

A lease is ``(lease_owner, lease_expires_at)`` on the cell row. Taking one is one conditional
UPDATE, so two controllers on one database (PostgreSQL's row locks, SQLite's write lock) never
both hold a cell. A lease is free when it has no owner, has expired, or its owner is known dead
(``is_dead``: a controller on this host whose process is gone, so a resume after a crash need not
wait for the expiry).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchctl.store.connections import autocommit
from benchctl.store.models import Cell

_cell = Cell.__table__  # type: ignore[attr-defined]


def acquire(engine: Engine, cell_id: int, owner: str, ttl_s: float,
            is_dead: Callable[[str], bool] = lambda _owner: False) -> str | None:
    """Take (or renew) the cell's lease for ``owner``. Returns None when taken, else who holds it.
    A free lease (no owner, ``owner``'s, or expired) is taken by one conditional UPDATE (one round
    trip on PostgreSQL); only then is a held one read, and taken over when its holder is known dead
    (conditional on that holder still holding it)."""
    now = time.time()
    free = sa.or_(_cell.c.lease_owner.is_(None), _cell.c.lease_owner == owner, _cell.c.lease_expires_at < now)
    with autocommit(engine).begin() as conn:
        if _take(conn, cell_id, owner, now + ttl_s, free):
            return None
        holder, expires = conn.execute(sa.select(_cell.c.lease_owner, _cell.c.lease_expires_at)
                                       .where(_cell.c.id == cell_id)).one()
        if holder is None or holder == owner or (expires or 0) < now:  # given back (or expired) meanwhile
            return None if _take(conn, cell_id, owner, now + ttl_s, free) else str(holder or "another controller")
        if is_dead(holder) and _take(conn, cell_id, owner, now + ttl_s, _cell.c.lease_owner == holder):
            return None
    return str(holder)


def take_over(engine: Engine, cell_id: int, owner: str, ttl_s: float,
              is_dead: Callable[[str], bool] = lambda _owner: False) -> str | None:
    """Take the cell's lease from a holder that is gone (its lease expired, or ``is_dead``), never a
    lease nobody holds: that one was given back (its controller finished the cell, or stopped, or
    ``benchctl down`` revoked it while stopping the cell). Returns None when taken, else who holds
    it: ``""`` when nobody does. For a controller waiting for another one's cells."""
    now = time.time()
    with autocommit(engine).begin() as conn:
        holder, expires = conn.execute(sa.select(_cell.c.lease_owner, _cell.c.lease_expires_at)
                                       .where(_cell.c.id == cell_id)).one()
        if holder is None:
            return ""
        if holder == owner:
            return None
        gone = (expires or 0) < now or is_dead(holder)
        unchanged = sa.and_(_cell.c.lease_owner == holder, _cell.c.lease_expires_at == expires)  # not renewed since
        if gone and _take(conn, cell_id, owner, now + ttl_s, unchanged):
            return None
    return str(holder)


def _take(conn: sa.Connection, cell_id: int, owner: str, expires_at: float, where: Any) -> bool:
    return conn.execute(sa.update(_cell).where(_cell.c.id == cell_id).where(where)
                        .values(lease_owner=owner, lease_expires_at=expires_at)).rowcount == 1


def renew(engine: Engine, cell_id: int, owner: str, ttl_s: float) -> bool:
    """Extend a lease ``owner`` still holds; False when it was taken over or revoked."""
    with autocommit(engine).begin() as conn:  # one UPDATE: one round trip on PostgreSQL
        return conn.execute(sa.update(_cell).where(_cell.c.id == cell_id).where(_cell.c.lease_owner == owner)
                            .values(lease_expires_at=time.time() + ttl_s)).rowcount == 1


def set_state(engine: Engine, cell_id: int, owner: str, ttl_s: float, state: str, reason: str | None) -> bool:
    """Set the state of a cell ``owner`` still holds and renew its lease, in one UPDATE (one round
    trip on PostgreSQL); False, nothing written, when it was taken over or revoked."""
    now = time.time()
    with autocommit(engine).begin() as conn:
        return conn.execute(sa.update(_cell).where(_cell.c.id == cell_id).where(_cell.c.lease_owner == owner)
                            .values(state=state, reason=reason, updated_at=now,
                                    lease_expires_at=now + ttl_s)).rowcount == 1


def release(engine: Engine, cell_id: int, owner: str) -> None:
    """Give the lease up (only if ``owner`` holds it)."""
    with autocommit(engine).begin() as conn:  # one UPDATE: one round trip on PostgreSQL
        conn.execute(sa.update(_cell).where(_cell.c.id == cell_id).where(_cell.c.lease_owner == owner)
                     .values(lease_owner=None, lease_expires_at=None))


def revoke_all(engine: Engine, campaign_id: int) -> int:
    """Clear every lease of a campaign (``benchctl down``): holders find out at their next renewal."""
    with engine.begin() as conn:
        return conn.execute(sa.update(_cell).where(_cell.c.campaign_id == campaign_id)
                            .where(_cell.c.lease_owner.is_not(None))
                            .values(lease_owner=None, lease_expires_at=None)).rowcount
