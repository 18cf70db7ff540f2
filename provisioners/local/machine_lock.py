"""The local provider's one-node-at-a-time rule across processes: a lock on this machine.

Local nodes share the machine's CPUs and GPUs, so two controllers running local nodes at once
would skew each other's timings. The lock is an ``fcntl.flock`` on one file per user in the
system's temp directory (the same for every ``BENCHCTL_HOME`` of that user; ``BENCHCTL_LOCAL_LOCK``
names another file: e.g. a test suite's own). This process takes it when it launches a local node
and gives it back when its last node is terminated; the OS gives it back if the process dies.
Within one process the provider's ``max_parallel_nodes`` does the rest. The holder writes who it is
into the file (pid, campaign tag, home, since), so a waiting controller can name it (``holder``).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
import time
from pathlib import Path

_guard = threading.Lock()
_held: dict[Path, tuple[int, set[str]]] = {}
"""Lock file → (our descriptor, the tokens of our nodes holding it)."""


def lock_path() -> Path:
    configured = os.environ.get("BENCHCTL_LOCAL_LOCK")
    return Path(configured) if configured else Path(tempfile.gettempdir()) / f"benchctl-local-{os.getuid()}.lock"


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


def held_elsewhere(path: Path | None = None) -> bool:
    """True when another process holds the machine's lock (a local node of its runs)."""
    path = path or lock_path()
    with _guard:
        if path in _held:
            return False
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing the descriptor gives a lock taken here back
        return False


def take(token: str, path: Path | None = None, who: dict[str, str] | None = None) -> bool:
    """Hold the machine for node ``token``; False when another process holds it. ``who`` (e.g. the
    campaign tag and home) is written into the file with our pid and the time, for ``holder``."""
    path = path or lock_path()
    with _guard:
        if path in _held:
            _held[path][1].add(token)
            return True
        fd = _open(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), **(who or {}), "since": time.time()}).encode() + b"\n", 0)
        _held[path] = (fd, {token})
        return True


def give_back(token: str, path: Path | None = None) -> None:
    """Node ``token`` no longer needs the machine; the lock goes once no node of ours does."""
    path = path or lock_path()
    with _guard:
        if path not in _held:
            return
        fd, tokens = _held[path]
        tokens.discard(token)
        if not tokens:
            del _held[path]
            os.close(fd)


def holder(path: Path | None = None) -> str | None:
    """Who holds the lock, as its holder wrote it (``pid 123, campaign bc-x-…, home /h, since 14:02:11``),
    or None when the file says nothing readable (an older benchctl wrote only its pid, or nothing)."""
    try:
        data = json.loads((path or lock_path()).read_text(errors="replace")[:4096])
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or "pid" not in data:
        return None
    parts = [f"pid {data['pid']}"] + [f"{name} {data[name]}" for name in ("campaign", "home") if data.get(name)]
    if isinstance(data.get("since"), (int, float)):
        parts.append(f"since {time.strftime('%H:%M:%S', time.localtime(data['since']))}")
    return ", ".join(parts)
