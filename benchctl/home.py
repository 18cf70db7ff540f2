"""Where local state lives: ``BENCHCTL_HOME`` (default ``~/.benchctl``) and the database URL."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The state folder, made 0700 when missing: the database, node records and artifacts in it are the
    user's alone (whatever the umask). An existing folder keeps its mode."""
    path = Path(os.environ.get("BENCHCTL_HOME") or Path.home() / ".benchctl").expanduser()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        from benchctl.errors import UsageError

        raise UsageError(f"cannot create BENCHCTL_HOME {path} ({exc.strerror or exc}): "
                         "set BENCHCTL_HOME to a folder you can write") from exc
    return path


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
