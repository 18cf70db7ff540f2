"""How an attempt ended: the values the store's ``attempts.outcome`` holds, shared by the engine
(which writes them) and the results (which count them)."""

from __future__ import annotations

import enum


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
