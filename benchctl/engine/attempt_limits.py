"""How long one attempt may live: the wait for its node, the payload's timeout, the collection.

Pure arithmetic on the campaign spec (no store, no SQLAlchemy): ``plan`` prices the worst case
from here without opening the database; ``benchctl.engine.budget`` enforces it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchctl.campaign.spec import CampaignSpec

COLLECT_ALLOWANCE_S = 600.0
"""Time allowed after the payload for syncing, collecting artifacts and terminating."""
COLLECT_MIN_S = 10.0
"""The shortest deadline a collection gets, however short the payload's timeout."""
READY_TIMEOUT_S = 900.0
"""How long a launched node may take to be ready before the attempt gives up on it."""


def attempt_worst_case_s(spec: CampaignSpec) -> float:
    """The longest one attempt can bill: node start-up, the payload's timeout, collection."""
    return READY_TIMEOUT_S + spec.payload.timeout_minutes * 60.0 + COLLECT_ALLOWANCE_S


def collect_timeout_s(spec: CampaignSpec) -> float:
    """The deadline of collecting one attempt's files: ``payload.timeout_minutes``, clamped to
    ``COLLECT_MIN_S`` .. ``COLLECT_ALLOWANCE_S`` (so the worst case above still holds)."""
    return min(max(spec.payload.timeout_minutes * 60.0, COLLECT_MIN_S), COLLECT_ALLOWANCE_S)
