"""The payload package in an attempt's stage: copied once per controller process into a private
snapshot, then hard-linked into each stage (one link per file, not a copy of each file per attempt).

A run ships the payload as it was when its first attempt was staged. The stage is only read (a
transport copies or archives it), never written in place, so linked files are safe to share;
where a link cannot be made (another file system), the snapshot is copied.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

from benchctl import payload

_lock = threading.Lock()
_snapshot: Path | None = None


def snapshot() -> Path:
    """This process's copy of the payload package (``__pycache__`` left out), made at the first call."""
    global _snapshot
    with _lock:
        if _snapshot is None or not _snapshot.is_dir():
            root = Path(tempfile.mkdtemp(prefix="benchctl-payload-"))
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            shutil.copytree(Path(payload.__file__).parent, root / "payload", symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            _snapshot = root / "payload"
        return _snapshot


def stage_payload(stage: Path) -> None:
    """Put the payload package at ``stage/payload``."""
    source = snapshot()
    try:
        shutil.copytree(source, stage / "payload", symlinks=True, copy_function=os.link)
    except OSError:
        shutil.rmtree(stage / "payload", ignore_errors=True)
        shutil.copytree(source, stage / "payload", symlinks=True)
