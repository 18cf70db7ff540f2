"""No process the payload started outlives it (Linux; stdlib only).

The runner makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)`` through ctypes,
Linux ≥ 3.4): a process below it whose parent exits (``nohup cmd &`` in a shell that returns, a
double fork, a daemon that calls ``setsid``) is re-parented to the runner instead of init. So
whatever it does to detach (a new session or process group, an environment without benchctl's
marker, a closed terminal), it stays a descendant, found through the parent links in /proc.
``end_descendants`` stops every descendant (SIGSTOP: none can fork meanwhile), kills it (SIGKILL)
and reaps the runner's children, sweep after sweep until none is left. The runner calls it when
its phases end, before it exits, and when it is told to stop (SIGTERM: the controller's
``terminate`` sends it, to the process group on ssh, to every process with the node's marker on
the local provider).

Limits: a process leaves the tree only through something outside it (a service manager such as
``systemd-run``, ``at``, a login over ssh, a container runtime), which only a cgroup of the
attempt's own could catch, and rented containers seldom let us make one. A runner killed with
SIGKILL cannot clean up: its orphans go to init, and only the controller's own kill (the process
group and session on ssh, the node's marker locally) reaches those that kept them. Where prctl
is refused (not Linux), the descendants still below the runner at its end are killed, orphans
already re-parented to init are not.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

PR_SET_CHILD_SUBREAPER = 36
"""From <linux/prctl.h>."""
SWEEPS_S = 10.0
"""How long ``end_descendants`` keeps sweeping a tree that keeps forking."""


def adopt_orphans() -> bool:
    """Make this process the subreaper of everything it starts; False where the OS refuses."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _processes() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, state) of every process in /proc."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            table[int(stat.parent.name)] = (int(fields[1]), fields[0])
    return table


def descendants(pid: int, live_only: bool = False) -> list[int]:
    """Every process below ``pid`` (``live_only``: zombies left out)."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            if not live_only or table[child][1] not in ("Z", "X"):
                found.append(child)
    return found


def reap() -> None:
    """Collect every child of this process that has exited (adopted orphans included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_descendants() -> int:
    """Stop, then kill every live descendant of this process, and reap, until none is left or
    ``SWEEPS_S`` passed. Returns how many kills were sent."""
    sent, deadline, pause = 0, time.monotonic() + SWEEPS_S, 0.001
    while (live := descendants(os.getpid(), live_only=True)) and time.monotonic() < deadline:
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in live:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
        sent += len(live)
        reap()
        time.sleep(pause)  # a killed process needs a moment to exit and reach its parent (or us)
        pause = min(pause * 2, 0.1)
    reap()
    return sent


def end_all_on_sigterm(exit_code: int = 128 + signal.SIGTERM) -> None:
    """On SIGTERM: ``end_descendants``, then exit at once with ``exit_code``."""
    def stop(signum: int, frame: FrameType | None) -> None:
        end_descendants()
        os._exit(exit_code)

    signal.signal(signal.SIGTERM, stop)
