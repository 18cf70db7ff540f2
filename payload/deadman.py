"""The dead-man switch: the payload stops itself when the controller has stopped watching.

The controller touches ``heartbeat`` in the attempt directory every few seconds. When its mtime
(the payload's start if the file is missing) is older than ``job.max_idle_minutes``, the switch
records an ``error`` and a ``done`` event (exit code 4), kills every process the payload started,
runs ``job.idle_shutdown`` (the provider's way to stop billing, e.g. power the node off) and
exits with code 4. Nobody left watching means nobody can use the results of a still-running
node: stopping saves the money (the measured events stay on disk for a later ``resume``).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from .events import EventLog
from .job import EXIT_IDLE
from .reaper import end_descendants

HEARTBEAT = "heartbeat"


def heartbeat_age(workdir: Path, started: float, now: float | None = None) -> float:
    """Seconds since the controller's last heartbeat (since ``started`` when it never wrote one)."""
    now = time.time() if now is None else now
    try:
        last = (workdir / HEARTBEAT).stat().st_mtime
    except OSError:
        last = started
    return now - max(last, started)


def start_deadman(workdir: Path, max_idle_minutes: float, log: EventLog, shutdown: str | None) -> threading.Thread:
    """Watch the heartbeat in a daemon thread; on expiry stop the whole payload (see module doc)."""
    started = time.time()
    limit_s = max_idle_minutes * 60.0

    def watch() -> None:
        while True:
            age = heartbeat_age(workdir, started)
            if age > limit_s:
                break
            time.sleep(min(5.0, max(0.05, (limit_s - age) / 2)))
        log.emit("error", message=f"no heartbeat from the controller for {age:.0f} s (max_idle_minutes "
                 f"{max_idle_minutes:g}): the payload stopped itself; `benchctl resume` continues the cell",
                 idle=True)
        log.emit("done", exit_code=EXIT_IDLE)
        end_descendants()
        if shutdown:
            subprocess.Popen(["sh", "-c", shutdown], start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os._exit(EXIT_IDLE)

    thread = threading.Thread(target=watch, name="deadman", daemon=True)
    thread.start()
    return thread
