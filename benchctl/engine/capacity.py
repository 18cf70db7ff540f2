"""How a cell waits out a provider that has no capacity (``NoCapacity`` at launch).

A capacity refusal is not a failed attempt: it does not count towards ``max_attempts``. The offer
it came from is skipped for ``hold_s`` (the cell moves on to its next offer, after a bounded
exponential back-off); once every offer the provider lists is held, the cell backs off, forgets
the holds and asks for offers again. After ``give_up_after_s`` of refusals with no launch in
between, the cell fails with the reason. Waiting is the caller's (on ``RunContext.stop``, so
Ctrl-C ends it at once).
The shape follows SkyPilot's failover (sky/backends/cloud_vm_ray_backend.py: a zone or region
that raised ResourcesUnavailableError is blocked and the next one tried; with
``--retry-until-up``, once every place failed it waits ``_RETRY_UNTIL_UP_INIT_GAP_SECONDS``,
growing, before trying all again), with a bound on the total wait added.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from benchctl.provisioners.base import Offer

CAPACITY_WAIT_S = 30 * 60.0
"""How long a cell keeps trying while every launch is refused for capacity before it fails."""


@dataclass(frozen=True)
class CapacityPolicy:
    """The back-off after a capacity refusal: ``first_s`` doubling per refusal in a row, at most ``max_s``."""

    first_s: float = 5.0
    max_s: float = 120.0
    hold_s: float = 10 * 60.0
    """How long an offer that was refused stays skipped (unless every offer is, see the module)."""
    give_up_after_s: float = CAPACITY_WAIT_S

    def delay(self, refusals: int) -> float:
        """The wait after the ``refusals``-th refusal in a row (1, 2, …)."""
        return min(self.max_s, self.first_s * 2 ** max(0, refusals - 1))


def offer_identity(offer: Offer) -> tuple[str, str, str]:
    """What a refusal is remembered by: the offer at its host in its region."""
    return (offer.offer_id, offer.host, offer.region)


@dataclass
class CapacityWait:
    """One cell's memory of refused offers and of its current run of refusals."""

    policy: CapacityPolicy
    clock: Callable[[], float] = time.monotonic
    _held: dict[tuple[str, str, str], float] = field(default_factory=dict)
    _refusals: int = 0
    _since: float | None = None

    def refused(self, offer: Offer) -> float:
        """Remember ``offer`` as out of capacity; return how long to back off now."""
        now = self.clock()
        self._held[offer_identity(offer)] = now + self.policy.hold_s
        self._refusals += 1
        if self._since is None:
            self._since = now
        return self.policy.delay(self._refusals)

    def available(self, offers: list[Offer]) -> list[Offer]:
        """``offers`` less those held (a hold ends after ``hold_s``)."""
        now = self.clock()
        self._held = {k: until for k, until in self._held.items() if until > now}
        return [o for o in offers if offer_identity(o) not in self._held]

    def all_held(self) -> float:
        """Every offer is held: forget the holds (the next query starts afresh); return the back-off."""
        self._held.clear()
        self._refusals += 1
        if self._since is None:
            self._since = self.clock()
        return self.policy.delay(self._refusals)

    def launched(self) -> None:
        """A launch went through: the run of refusals is over (holds stay until they end)."""
        self._refusals, self._since = 0, None

    def exhausted(self) -> bool:
        """Refusals have lasted longer than ``give_up_after_s``."""
        return self._since is not None and self.clock() - self._since >= self.policy.give_up_after_s

    @property
    def waited_s(self) -> float:
        return 0.0 if self._since is None else self.clock() - self._since
