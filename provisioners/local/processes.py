"""The processes of a local node, found by the marker every one of them carries in its environment.

Each process a local node runs (its leader, every command, whatever those start) inherits
``BENCHCTL_LOCAL_NODE=<token>``, and otherwise only the allow-listed, non-secret part of the
controller's environment (``payload.env_policy.node_environment``). The marker finds them from
any session and after a controller restart, where a process group could not be joined. Linux
only (reads /proc).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from benchctl.payload.env_policy import node_environment

MARKER = "BENCHCTL_LOCAL_NODE"


def node_env(token: str) -> dict[str, str]:
    """The allow-listed, non-secret part of the controller's environment (a provider's API key, the
    store's URL or a proxy's credentials must not reach a node, its logs or its artifacts), plus
    the node's marker."""
    return {**node_environment(os.environ), MARKER: token}


def node_processes(token: str) -> list[int]:
    """Live (non-zombie) pids carrying the node's marker."""
    needle = f"{MARKER}={token}".encode()
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if needle not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            pids.append(int(proc.name))
    return pids


def process_alive(pid: int, token: str) -> bool:
    """``pid`` is alive and is one of the node's (guards against pid reuse)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own dead child
    return pid in node_processes(token)


def kill_node_processes(token: str, grace_s: float = 5.0) -> None:
    """SIGTERM every process of the node, then SIGKILL what is left after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = node_processes(token)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and node_processes(token):
            time.sleep(0.05)
