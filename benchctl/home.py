"""Where local state lives: ``BENCHCTL_HOME`` (default ``~/.benchctl``) and the database URL."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def home() -> Path:
    """The state folder, made 0700 when missing: the database, node records and artifacts in it are the
    user's alone (whatever the umask). An existing folder keeps its mode, but one owned by another user
    or writable by the group or others is refused (UsageError): whoever can write there can plant a
    link where benchctl writes its database or artifacts."""
    path = Path(os.environ.get("BENCHCTL_HOME") or Path.home() / ".benchctl").expanduser()
    from benchctl.errors import UsageError

    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
    except OSError as exc:
        raise UsageError(f"cannot create BENCHCTL_HOME {path} ({exc.strerror or exc}): "
                         "set BENCHCTL_HOME to a folder you can write") from exc
    if info.st_uid != os.geteuid():
        raise UsageError(f"BENCHCTL_HOME {path} is owned by uid {info.st_uid}, not by you (uid {os.geteuid()}): "
                         f"chown it to yourself, or set BENCHCTL_HOME to a folder of your own")
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise UsageError(f"BENCHCTL_HOME {path} is writable by {'others' if info.st_mode & 0o002 else 'its group'} "
                         f"(mode {stat.S_IMODE(info.st_mode):04o}): chmod 700 {path}, or set BENCHCTL_HOME to a "
                         "private folder")
    return path


def private_dir(path: Path, below: Path | None = None) -> Path:
    """``path``, each missing folder under ``below`` (default ``home()``, checked as it says) made 0700;
    a part that is a symbolic link or not a folder is refused (UsageError) rather than followed, so
    nothing planted there redirects what benchctl writes."""
    current = home() if below is None else below
    for part in path.relative_to(current).parts:
        current = current / part
        with contextlib.suppress(FileExistsError):
            current.mkdir(mode=0o700)
        info = current.lstat()
        if not stat.S_ISDIR(info.st_mode):
            from benchctl.errors import UsageError

            what = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a folder"
            raise UsageError(f"{current} is {what}; benchctl does not follow links where it keeps its state: "
                             f"remove it (rm {current}) and run again")
    return path


def artifacts_dir(campaign: str) -> Path:
    """``$BENCHCTL_HOME/artifacts/<campaign>``, made as ``private_dir`` says."""
    return private_dir(home() / "artifacts" / campaign)


def database_url(option: str | None, environ: bool = True) -> str:
    """``--db`` wins over ``BENCHCTL_DB`` (read with ``environ``), which wins over SQLite at
    ``$BENCHCTL_HOME/benchctl.db``."""
    return option or (os.environ.get("BENCHCTL_DB") if environ else None) or f"sqlite:///{home() / 'benchctl.db'}"


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
