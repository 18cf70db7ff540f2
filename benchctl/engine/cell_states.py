"""The cell state machine. Every transition is committed to the store before its side effect.

pending → provisioning → preflight → running → collecting → done, with
preempted → provisioning (same cell, new attempt), bad_node → provisioning (next offer),
failed (retries exhausted, with the reason) and cancelled. ``done`` is reached exactly once.
"""

from __future__ import annotations

import enum


class CellState(str, enum.Enum):
    PENDING = "pending"
    PROVISIONING = "provisioning"
    PREFLIGHT = "preflight"
    RUNNING = "running"
    COLLECTING = "collecting"
    DONE = "done"
    PREEMPTED = "preempted"
    BAD_NODE = "bad_node"
    FAILED = "failed"
    CANCELLED = "cancelled"


_S = CellState
_ACTIVE = {_S.PROVISIONING, _S.PREFLIGHT, _S.RUNNING, _S.COLLECTING}
ALLOWED: dict[CellState, set[CellState]] = {
    _S.PENDING: {_S.PROVISIONING, _S.CANCELLED, _S.FAILED},
    _S.PROVISIONING: {_S.PROVISIONING, _S.PREFLIGHT, _S.RUNNING, _S.PREEMPTED, _S.FAILED, _S.CANCELLED},
    _S.PREFLIGHT: {_S.RUNNING, _S.COLLECTING, _S.BAD_NODE, _S.PREEMPTED, _S.FAILED, _S.CANCELLED, _S.PROVISIONING},
    _S.RUNNING: {_S.COLLECTING, _S.PREEMPTED, _S.FAILED, _S.CANCELLED, _S.PROVISIONING},
    _S.COLLECTING: {_S.DONE, _S.PREEMPTED, _S.FAILED, _S.CANCELLED, _S.PROVISIONING},
    _S.PREEMPTED: {_S.PROVISIONING, _S.FAILED, _S.CANCELLED},
    _S.BAD_NODE: {_S.PROVISIONING, _S.FAILED, _S.CANCELLED},
    _S.FAILED: {_S.PROVISIONING},
    _S.CANCELLED: {_S.PROVISIONING},
    _S.DONE: set(),
}
"""``provisioning → running`` serves campaigns without a preflight phase. ``x → provisioning`` from
an active state is a retry after an error; from failed/cancelled it is a resume. Nothing leaves
``done``."""

FINISHED = {_S.DONE, _S.FAILED, _S.CANCELLED}


class IllegalTransition(RuntimeError):
    pass


def check_transition(current: CellState, new: CellState) -> None:
    if new not in ALLOWED[current]:
        raise IllegalTransition(f"cell cannot go from {current.value} to {new.value}")


def is_active(state: CellState) -> bool:
    return state in _ACTIVE
