"""What every cell of one ``run``/``resume`` shares, and how an attempt ended."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine

from benchctl.budget import READY_TIMEOUT_S, Budget
from benchctl.capacity import CapacityPolicy
from benchctl.lease import Leases
from benchctl.providers import Providers
from benchctl.spec import Campaign


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


class OutcomeKind(str, enum.Enum):
    """How an attempt ended; the value is what the store's ``attempts.outcome`` holds."""

    DONE = "done"
    BAD_NODE = "bad_node"
    PREEMPTED = "preempted"
    ERROR = "error"
    BUDGET = "budget"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"
    """This controller lost the cell's lease: someone else, or ``benchctl down``, owns it now (never stored)."""
    LAUNCH_FAILED = "launch_failed"
    """The provider refused the launch (written by the cell runner; no node to drive)."""
    LOST = "lost"
    """The controller stopped before the launch returned (written when reconciling)."""


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended, and why."""

    kind: OutcomeKind
    detail: str = ""
