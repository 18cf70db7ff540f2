"""This controller's leases on the cells it runs, renewed in the background.

The owner id is ``host/pid/start`` (``start``: the process's start time in clock ticks, so a
reused pid is not mistaken for us). A lease whose owner ran on this host and whose process is
gone is taken over at once; any other lease only after it expires. A lease that fails to renew
(expired and taken over, or revoked by ``benchctl down``) is reported ``lost``: the cell's runner
stops touching the cell.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine

from benchctl.store import leases as store_leases

DEFAULT_TTL_S = 60.0


def _start_ticks(pid: int) -> str | None:
    """The process's start time (``/proc/<pid>/stat`` field 22); None when it is gone or a zombie."""
    if not Path("/proc/self/stat").exists():  # no procfs (macOS): a signal tells alive, not since when
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "0"
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def controller_id() -> str:
    pid = os.getpid()
    return f"{socket.gethostname()}/{pid}/{_start_ticks(pid) or 0}"


def holder_is_dead(owner: str) -> bool:
    """True only when ``owner`` ran on this host and its process is gone."""
    try:
        host, pid, start = owner.rsplit("/", 2)
        ticks = _start_ticks(int(pid))
    except ValueError:
        return False
    return host == socket.gethostname() and ticks != start


def _started_at(ticks: str) -> float | None:
    """Seconds since the epoch for a start time in clock ticks since boot (``/proc/stat`` btime)."""
    try:
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + int(ticks) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError):
        return None


@dataclass(frozen=True)
class Holder:
    """Who holds a lease, as ``status`` and ``resume`` show it."""

    owner: str
    host: str
    pid: str
    alive: bool | None
    """None when it runs on another host (alive while its lease is renewed)."""
    since: float | None
    """When its process started (this host only), seconds since the epoch."""

    def describe(self) -> str:
        where = f"{self.host} pid {self.pid}"
        if self.alive is None:
            return f"{where} (another host; alive while it renews its lease)"
        if not self.alive:
            return f"{where} (dead: its cells are free to resume)"
        since = f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.since))}" if self.since else ""
        return f"{where}{since} (alive)"


def holder(owner: str) -> Holder:
    """Describe the controller ``owner`` (an id from ``controller_id``)."""
    try:
        host, pid, start = owner.rsplit("/", 2)
    except ValueError:
        return Holder(owner, owner, "?", None, None)
    if host != socket.gethostname():
        return Holder(owner, host, pid, None, None)
    alive = not holder_is_dead(owner)
    return Holder(owner, host, pid, alive, _started_at(start) if alive and start != "0" else None)


class Leases:
    """Take, renew (every ttl/6 s, in a daemon thread) and give back cell leases."""

    def __init__(self, engine: Engine, ttl_s: float = DEFAULT_TTL_S, owner: str | None = None) -> None:
        self.engine, self.ttl_s = engine, ttl_s
        self.owner = owner or controller_id()
        self._held: set[int] = set()
        self._lost: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self, cell_id: int) -> str | None:
        """Lease the cell; None when taken, else the holder's id."""
        return self._holding(cell_id, store_leases.acquire(self.engine, cell_id, self.owner, self.ttl_s,
                                                           holder_is_dead))

    def take_over(self, cell_id: int) -> str | None:
        """Lease the cell from a holder that is gone, never a lease given back (``store.leases.take_over``);
        None when taken, else the holder's id (``""``: nobody's)."""
        return self._holding(cell_id, store_leases.take_over(self.engine, cell_id, self.owner, self.ttl_s,
                                                             holder_is_dead))

    def _holding(self, cell_id: int, holder: str | None) -> str | None:
        """``holder`` as the store answered; None (ours now): renewed from here on."""
        if holder is None:
            with self._lock:
                self._held.add(cell_id)
                self._lost.discard(cell_id)
            self._ensure_renewing()
        return holder

    def lost(self, cell_id: int) -> bool:
        with self._lock:
            return cell_id in self._lost

    def verify(self, cell_id: int) -> bool:
        """Renew now; False (and ``lost`` from now on) when the lease is no longer ours."""
        if self.lost(cell_id):
            return False
        if store_leases.renew(self.engine, cell_id, self.owner, self.ttl_s):
            return True
        with self._lock:
            self._lost.add(cell_id)
        return False

    def set_state(self, cell_id: int, state: str, reason: str | None = None) -> bool:
        """Set the cell's state and renew its lease, in one statement; False (and ``lost`` from now
        on), nothing written, when the lease is no longer ours."""
        if self.lost(cell_id):
            return False
        if store_leases.set_state(self.engine, cell_id, self.owner, self.ttl_s, state, reason):
            return True
        with self._lock:
            self._lost.add(cell_id)
        return False

    def give_back(self, cell_id: int) -> None:
        with self._lock:
            self._held.discard(cell_id)
            lost = cell_id in self._lost
        if not lost:
            store_leases.release(self.engine, cell_id, self.owner)

    def renew_now(self) -> None:
        with self._lock:
            held = sorted(self._held - self._lost)
        for cell_id in held:
            self.verify(cell_id)

    def close(self) -> None:
        self._stop.set()

    def _ensure_renewing(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._renew_loop, name="lease-renewal", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 6):
            try:
                self.renew_now()
            except Exception:  # the store may be briefly unreachable; the expiry gives us time
                continue
