"""Where local state lives: ``BENCHCTL_HOME`` (default ``~/.benchctl``) and the database URL."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("BENCHCTL_HOME") or Path.home() / ".benchctl").expanduser()


def database_url(option: str | None) -> str:
    """``--db`` wins over ``BENCHCTL_DB``, which wins over SQLite at ``$BENCHCTL_HOME/benchctl.db``."""
    return option or os.environ.get("BENCHCTL_DB") or f"sqlite:///{home() / 'benchctl.db'}"


def lease_ttl_s() -> float:
    """How long a controller's lease on a cell lasts without renewal (``BENCHCTL_LEASE_TTL_S``, default 60):
    after a controller on another host dies, its cells wait this long before another takes them."""
    raw = os.environ.get("BENCHCTL_LEASE_TTL_S", "60")
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        from benchctl.errors import UsageError

        raise UsageError(f"BENCHCTL_LEASE_TTL_S={raw!r} is not a positive number of seconds: fix or unset it")
    return value
