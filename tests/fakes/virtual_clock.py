"""A clock that moves only when someone sleeps on it: a fake service and the client's rate limiter
read the same time, so whether a call came too soon depends on what the client did, never on how
busy the machine is."""

from __future__ import annotations

import threading


class VirtualClock:
    """``clock()`` reads the time; ``clock.sleep(s)`` moves it ``s`` on and returns at once."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += max(0.0, seconds)
