"""The local provider's one-node-at-a-time rule across processes: a lock on this machine.

Local nodes share the machine's CPUs and GPUs, so two controllers running local nodes at once
would skew each other's timings. The lock is an ``fcntl.flock`` on one file per user in the
system's temp directory (the same for every ``BENCHCTL_HOME`` of that user; ``BENCHCTL_LOCAL_LOCK``
names another file). This process takes it when it launches a local node and gives it back when
its last node is terminated; the OS gives it back if the process dies. Within one process the
provider's ``max_parallel_nodes`` does the rest.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
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


def take(token: str, path: Path | None = None) -> bool:
    """Hold the machine for node ``token``; False when another process holds it."""
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
        os.write(fd, f"{os.getpid()}\n".encode())
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
