"""The controller's identity and its liveness check, used to take over a crashed controller's cells."""

from __future__ import annotations

import socket
import subprocess
import sys

from benchctl.engine.lease import controller_id, holder_is_dead


def test_a_live_controller_is_alive_and_a_finished_one_is_dead() -> None:
    assert not holder_is_dead(controller_id())
    code = "from benchctl.engine.lease import controller_id; print(controller_id())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert holder_is_dead(proc.stdout.strip()), "a controller whose process exited holds nothing"


def test_other_hosts_and_reused_pids_are_not_declared_dead() -> None:
    host, pid, start = controller_id().rsplit("/", 2)
    assert not holder_is_dead(f"another-{host}/999999/1"), "another host's controller: only its expiry tells"
    assert holder_is_dead(f"{host}/{pid}/{int(start) + 1}"), "same pid, other start time: a reused pid"
    assert socket.gethostname() == host
    assert not holder_is_dead("garbage")
