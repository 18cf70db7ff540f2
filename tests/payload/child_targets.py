"""Targets for ``benchctl.payload.child.run_in_child`` in the tests: a spawned child imports the
target's module, and this one imports only the standard library, so the child is up in a fraction
of a second (a test module that imports torch costs the child seconds on a loaded machine)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any


def report_pid(report: Callable[[Any], None], extra: str) -> None:
    report(os.getpid())
    report(extra)


def hang(report: Callable[[Any], None]) -> None:
    report("started")
    time.sleep(3600)


def fail(report: Callable[[Any], None]) -> None:
    report("first")
    raise ValueError("boom")
