"""Cell leases on SQLite and PostgreSQL: one holder at a time, expiry, dead holders, revocation."""

from __future__ import annotations

import time

import pytest
from sqlalchemy.engine import Engine

from benchctl.store import leases
from benchctl.store import queries as q
from benchctl.store.database import open_store


@pytest.fixture
def cell_ids(db_url: str) -> tuple[Engine, list[int]]:
    engine = open_store(db_url)
    campaign_id, _ = q.upsert_campaign(engine, "c", "{}", "c.yaml", 5.0, [
        q.NewCell(key=k, provider="local", gpu="cpu", count=1, market="spot", config_json="{}") for k in ("a", "b")])
    return engine, [c.id or 0 for c in q.cells(engine, campaign_id)]


def test_one_holder_at_a_time_until_released(cell_ids: tuple[Engine, list[int]]) -> None:
    engine, (a, b) = cell_ids
    assert leases.acquire(engine, a, "host/1/1", 60) is None
    assert leases.acquire(engine, a, "host/2/2", 60) == "host/1/1", "a live lease names its holder"
    assert leases.acquire(engine, b, "host/2/2", 60) is None, "leases are per cell"
    assert leases.acquire(engine, a, "host/1/1", 60) is None, "the holder may take it again (renewal)"
    assert leases.renew(engine, a, "host/1/1", 60)
    assert not leases.renew(engine, a, "host/2/2", 60), "only the holder renews"
    leases.release(engine, a, "host/2/2")  # not the holder: no effect
    assert leases.acquire(engine, a, "host/2/2", 60) == "host/1/1"
    leases.release(engine, a, "host/1/1")
    assert leases.acquire(engine, a, "host/2/2", 60) is None


def test_expired_and_dead_holders_are_taken_over(cell_ids: tuple[Engine, list[int]]) -> None:
    engine, (a, b) = cell_ids
    assert leases.acquire(engine, a, "host/1/1", 0.2) is None
    time.sleep(0.3)
    assert leases.acquire(engine, a, "host/2/2", 60) is None, "an expired lease is free"
    assert not leases.renew(engine, a, "host/1/1", 60), "the old holder learns it lost the cell"
    assert leases.acquire(engine, b, "host/1/1", 60) is None
    assert leases.acquire(engine, b, "host/3/3", 60, is_dead=lambda owner: owner == "host/1/1") is None
    assert leases.acquire(engine, b, "host/4/4", 60, is_dead=lambda owner: False) == "host/3/3"


def test_revoke_all_frees_every_cell_and_holders_lose_them(cell_ids: tuple[Engine, list[int]]) -> None:
    engine, (a, b) = cell_ids
    leases.acquire(engine, a, "host/1/1", 60)
    leases.acquire(engine, b, "host/1/1", 60)
    campaign_id = q.cell(engine, a).campaign_id
    assert leases.revoke_all(engine, campaign_id) == 2
    assert not leases.renew(engine, a, "host/1/1", 60)
    assert leases.acquire(engine, b, "host/2/2", 60) is None


def test_take_over_takes_a_gone_holders_lease_never_one_given_back(cell_ids: tuple[Engine, list[int]]) -> None:
    """What a controller waiting for another one's cells asks (``engine.scheduler``): a lease given
    back (the cell finished, or ``benchctl down`` revoked it) is not taken; a dead or expired holder's is."""
    engine, (a, b) = cell_ids
    assert leases.take_over(engine, a, "host/2/2", 60) == "", "nobody holds it: not taken"
    assert q.cell(engine, a).lease_owner is None
    assert leases.acquire(engine, a, "host/1/1", 60) is None
    assert leases.take_over(engine, a, "host/2/2", 60) == "host/1/1", "a live holder keeps it"
    assert leases.take_over(engine, a, "host/2/2", 60, is_dead=lambda owner: owner == "host/1/1") is None
    assert q.cell(engine, a).lease_owner == "host/2/2"
    assert leases.acquire(engine, b, "host/1/1", -1) is None  # already expired
    assert leases.take_over(engine, b, "host/3/3", 60) is None, "an expired holder's lease is taken over"
    assert not leases.renew(engine, b, "host/1/1", 60)
    leases.release(engine, b, "host/3/3")
    assert leases.take_over(engine, b, "host/1/1", 60) == ""
