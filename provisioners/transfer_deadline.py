"""How long a transfer to or from a node may take: a point in monotonic time, and what ends a
transfer that passes it.

A ``Deadline`` can also be cancelled (the budget watchdog does, when the campaign's spend reaches
its budget during a collection); it then reads as passed. A transfer that passes its deadline
raises ``TransferTimeout``, a ``ProviderError``: the attempt ends like any failed provider call.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

from benchctl.provisioners.base import ProviderError

CHECK_EVERY_S = 0.1
"""How often a watched process is checked against its deadline."""


class TransferTimeout(ProviderError):
    """A transfer passed its deadline (or its deadline was cancelled); what it moved so far stays."""


class Deadline:
    """``seconds`` from now on the monotonic clock, or earlier if ``cancel``led."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self._cancelled = threading.Event()
        self.why = ""
        """Why it was cancelled ("" while it was not)."""

    @classmethod
    def of(cls, timeout: float | Deadline) -> Deadline:
        """``timeout`` itself when it is a Deadline, else a new one of ``timeout`` seconds."""
        return timeout if isinstance(timeout, Deadline) else cls(float(timeout))

    def cancel(self, why: str) -> None:
        self.why = why
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def remaining(self) -> float:
        """Seconds left (0 once passed or cancelled)."""
        return 0.0 if self.cancelled else max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def check(self, what: str) -> None:
        """Raise ``TransferTimeout`` naming ``what`` once the deadline has passed."""
        if self.expired():
            raise self.timeout(what)

    def timeout(self, what: str) -> TransferTimeout:
        if self.cancelled:
            return TransferTimeout(f"{what} stopped: {self.why}")
        return TransferTimeout(f"{what} did not finish within {self.seconds:.0f} s; stopped")


@contextlib.contextmanager
def killed_at(deadline: Deadline, proc: subprocess.Popen[Any]) -> Iterator[None]:
    """Run the block while a thread kills ``proc`` once ``deadline`` passes; whatever happens in
    the block, ``proc`` is killed (if still running) and reaped when it ends."""
    finished = threading.Event()

    def watch() -> None:
        while not finished.wait(min(CHECK_EVERY_S, max(deadline.remaining(), 0.001))):
            if deadline.expired():
                with contextlib.suppress(OSError):
                    proc.kill()
                return

    watcher = threading.Thread(target=watch, name="transfer-deadline", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        watcher.join()
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
        proc.wait()
