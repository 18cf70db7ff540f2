"""A campaign run in this process against ``MemoryProvider``: the real store (SQLite), leases,
budget, cell runner and attempt driver, with millisecond polls."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine

from benchctl.campaign.spec import load_campaign
from benchctl.cli.run import register_campaign
from benchctl.engine.budget import Budget, attempt_worst_case_s
from benchctl.engine.lease import Leases
from benchctl.engine.providers import Providers
from benchctl.engine.run_context import RunContext
from benchctl.provisioners.base import Offer, Provider
from benchctl.store import queries as q
from benchctl.store.database import open_store
from benchctl.store.models import Attempt, Cell
from tests.conftest import TINY_CAMPAIGN
from tests.fakes.memory_provider import MemoryProvider

ONE_CELL = "  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 2.0}\n"
KEY = "local:cpux2:on-demand"
LEASE_TTL_S = 0.3
"""Renewed every 50 ms: a lost lease is noticed within that."""


def offer(host: str = "host-a", hourly_usd: float = 2.0, count: int = 2, market: str = "on-demand") -> Offer:
    return Offer(provider="memory", offer_id=f"offer-{host}", gpu="cpu", count=count, vcpus=4, region="mem",
                 hourly_usd=hourly_usd, market=market, host=host)


class FakeProviders(Providers):
    """The registry, with every provider name answered by the given fakes."""

    def __init__(self, home: Path, fakes: dict[str, Provider]) -> None:
        super().__init__(home)
        self.fakes = fakes

    def _make(self, name: str) -> Provider:
        return self.fakes[name]


@dataclass
class MemoryRun:
    ctx: RunContext
    provider: MemoryProvider
    logged: list[str] = field(default_factory=list)

    @property
    def engine(self) -> Engine:
        return self.ctx.engine

    def cell(self, key: str = KEY) -> Cell:
        return next(c for c in q.cells(self.engine, self.ctx.campaign_id) if c.key == key)

    def attempts(self, key: str = KEY) -> list[Attempt]:
        return q.attempts(self.engine, self.cell(key).id or 0)

    def states(self, key: str = KEY) -> list[str]:
        """The cell's states in the order the runner logged them."""
        return [line.split(": ", 2)[1].split(" (")[0] for line in self.logged
                if line.startswith(f"{key}: ") and line.split(": ", 2)[1].split(" (")[0] in _STATES]


_STATES = {"pending", "provisioning", "preflight", "running", "collecting", "done", "preempted", "bad_node",
           "failed", "cancelled"}


def memory_run(tmp_path: Path, provider: MemoryProvider, matrix: str = ONE_CELL, steps: int = 3,
               max_attempts: int = 2, budget_usd: float = 5.0, db: str | None = None,
               phases: str = "[preflight, profile]") -> MemoryRun:
    """Register a tiny campaign (``matrix`` of ``local`` cells, served by ``provider``) in a fresh
    store and return the context ``run_campaign``/``CellRunner`` take, polling every millisecond."""
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_CAMPAIGN.format(name="tiny", matrix=matrix, steps=steps, max_attempts=max_attempts)
                    .replace("budget_usd: 5", f"budget_usd: {budget_usd}")
                    .replace("phases: [preflight, profile]", f"phases: {phases}"))
    campaign = load_campaign(path)
    engine = open_store(db or f"sqlite:///{tmp_path / 'store.db'}")
    row = register_campaign(engine, campaign, str(path))
    assert row.id is not None
    logged: list[str] = []
    ctx = RunContext(engine=engine, campaign=campaign, campaign_id=row.id, campaign_uid=row.uid,
                     providers=FakeProviders(tmp_path, {"local": provider}), artifacts_dir=tmp_path / "artifacts",
                     leases=Leases(engine, ttl_s=LEASE_TTL_S), budget=Budget(engine, row.id, budget_usd,
                                                                    attempt_worst_case_s(campaign.spec)),
                     poll_interval_s=0.001, status_interval_s=0.001, ready_timeout_s=5, log=logged.append)
    return MemoryRun(ctx, provider, logged)
