"""What a cloud does to an evicted container: every process in it dies at once.

The fakes' nodes share one sshd, so "the container" is the process groups the SSH transport
recorded for the node's token under the node's work dir (``.benchctl/<token>.pids``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


def kill_container(workdir: Path, token: str) -> None:
    pids = workdir / ".benchctl" / f"{token}.pids"
    for line in pids.read_text().split() if pids.exists() else []:
        try:
            os.killpg(int(line), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            continue
