"""Where local state lives: ``BENCHCTL_HOME`` (default ``~/.benchctl``) and the database URL."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("BENCHCTL_HOME") or Path.home() / ".benchctl").expanduser()


def database_url(option: str | None) -> str:
    """``--db`` wins over ``BENCHCTL_DB``, which wins over SQLite at ``$BENCHCTL_HOME/benchctl.db``."""
    return option or os.environ.get("BENCHCTL_DB") or f"sqlite:///{home() / 'benchctl.db'}"
