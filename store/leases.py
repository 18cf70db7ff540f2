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

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchctl.store.connections import autocommit
from benchctl.store.models import Cell

_cell = Cell.__table__  # type: ignore[attr-defined]


def acquire(engine: Engine, cell_id: int, owner: str, ttl_s: float,
            is_dead: Callable[[str], bool] = lambda _owner: False) -> str | None:
    """Take (or renew) the cell's lease for ``owner``. Returns None when taken, else who holds it."""
    now = time.time()
    with engine.begin() as conn:
        holder, expires = conn.execute(sa.select(_cell.c.lease_owner, _cell.c.lease_expires_at)
                                       .where(_cell.c.id == cell_id)).one()
        free = sa.or_(_cell.c.lease_owner.is_(None), _cell.c.lease_owner == owner, _cell.c.lease_expires_at < now)
        if holder is not None and holder != owner and (expires or 0) >= now and is_dead(holder):
            free = sa.or_(free, _cell.c.lease_owner == holder)
        taken = conn.execute(sa.update(_cell).where(_cell.c.id == cell_id).where(free)
                             .values(lease_owner=owner, lease_expires_at=now + ttl_s)).rowcount
    return None if taken == 1 else str(holder)


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
