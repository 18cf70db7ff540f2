"""What every cell of one ``run``/``resume`` shares, and how an attempt ended."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine

from benchctl.campaign.spec import Campaign
from benchctl.engine.budget import READY_TIMEOUT_S, Budget
from benchctl.engine.capacity import CapacityPolicy
from benchctl.engine.lease import Leases
from benchctl.engine.providers import Providers
from benchctl.outcomes import OutcomeKind


@dataclass
class RunContext:
    engine: Engine
    campaign: Campaign
    campaign_id: int
    campaign_uid: str
    providers: Providers
    artifacts_dir: Path
    leases: Leases
    budget: Budget
    stop: threading.Event = field(default_factory=threading.Event)
    poll_interval_s: float = 1.0
    """Between reads of a running payload's events."""
    status_interval_s: float = 5.0
    """Between asks of the provider for the node's state (preemption), heartbeats and budget checks."""
    ready_timeout_s: float = READY_TIMEOUT_S
    capacity: CapacityPolicy = field(default_factory=CapacityPolicy)
    """How cells back off and give up while the provider refuses launches for capacity."""
    log: Callable[[str], None] = print
    hard_exit: Callable[[], None] = lambda: None
    """Called just before a second Ctrl-C ends the process with ``os._exit`` (a live view restores the terminal)."""

    @property
    def campaign_tag(self) -> str:
        return campaign_tag(self.campaign.spec.name, self.campaign_uid)


def campaign_tag(name: str, uid: str) -> str:
    """Carried by every node of the campaign; the uid keeps two stores' same-named campaigns apart."""
    return f"bc-{name}-{uid}" if uid else f"bc-{name}"




@dataclass(frozen=True)
class Outcome:
    """How an attempt ended, and why."""

    kind: OutcomeKind
    detail: str = ""
    bad_host: str | None = None
    """A ``bad_node`` outcome of a cluster whose preflight named the bad member (``bad_node_rank``):
    that member's host, excluded from the next cluster (None: node 0's, the attempt's host)."""
