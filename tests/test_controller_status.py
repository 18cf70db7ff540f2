"""``status`` tells a live controller from a dead one (and since when it runs); a second
``resume`` names who runs the campaign and offers ``status --watch``."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.campaign.spec import load_campaign
from benchctl.cli.run import _not_complete, register_campaign
from benchctl.engine.lease import _start_ticks, holder
from benchctl.store import leases as store_leases
from benchctl.store import queries as q
from tests.conftest import REPO, cli_here
from tests.local_campaign import home_store


def _owner(pid: int) -> str:
    import socket

    return f"{socket.gethostname()}/{pid}/{_start_ticks(pid)}"


@pytest.fixture
def live_and_dead(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two controller ids of this host: a process that runs, and one that has exited."""
    live = subprocess.Popen(["sleep", "60"])
    dead = subprocess.Popen(["sleep", "60"])
    dead_owner = _owner(dead.pid)
    dead.kill()
    dead.wait()
    try:
        yield _owner(live.pid), dead_owner
    finally:
        live.kill()
        live.wait()


def test_status_shows_which_controller_is_alive_and_since_when(home: Path, write_campaign,  # type: ignore[no-untyped-def]
                                                               live_and_dead: tuple[str, str]) -> None:
    live, dead = live_and_dead
    engine = home_store(home)
    path = write_campaign()
    row = register_campaign(engine, load_campaign(path), str(path))
    first, second = q.cells(engine, row.id or 0)
    assert store_leases.acquire(engine, first.id or 0, live, 60) is None
    assert store_leases.acquire(engine, second.id or 0, dead, 60) is None
    table = cli_here("status", "tiny", home=home)
    assert table.returncode == 0, table.stderr
    started = time.strftime("%Y-%m-%d %H:%M", time.localtime(holder(live).since))
    live_line = next(line for line in table.stdout.splitlines() if line.startswith(first.key))
    assert f"pid {live.split('/')[1]} since {started}" in live_line and "(alive)" in live_line
    dead_line = next(line for line in table.stdout.splitlines() if line.startswith(second.key))
    assert f"pid {dead.split('/')[1]} (dead" in dead_line
    cells = json.loads(cli_here("status", "tiny", "--format", "json", home=home).stdout)["campaigns"][0]["cells"]
    assert [(c["controller"], c["controller_alive"]) for c in cells] == [(live, True), (dead, False)]
    assert cells[0]["controller_since"] == pytest.approx(time.time(), abs=120)


def test_a_second_resume_names_the_live_controller_and_offers_watch(live_and_dead: tuple[str, str]) -> None:
    live, _ = live_and_dead
    message = _not_complete("tiny", {"a": "done", "b": "running"}, {"b": live})
    assert f"b (running; run by controller {holder(live).describe()})" in message
    assert " since " in message and "(alive)" in message
    assert "`benchctl status --watch tiny`" in message and "resume tiny` tries again" not in message
    failed = _not_complete("tiny", {"a": "failed", "b": "running"}, {"b": live})
    assert "`benchctl resume tiny` tries again" in failed


def test_status_watch_refreshes_until_ctrl_c(home: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "benchctl", "status", "--watch", "--interval", "0.2"], cwd=REPO,
                            env={**os.environ, "BENCHCTL_HOME": str(home), "PYTHONUNBUFFERED": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + 60
    while seen.count(b"no campaigns yet") < 2:  # two refreshes seen: then Ctrl-C (no fixed wait)
        assert time.monotonic() < deadline and proc.poll() is None, seen
        if select.select([proc.stdout], [], [], 0.5)[0]:
            seen += os.read(proc.stdout.fileno(), 65536)
    proc.send_signal(signal.SIGINT)
    rest, err_bytes = proc.communicate(timeout=30)
    out, err = (seen + rest).decode(), err_bytes.decode()
    assert proc.returncode == 0, err
    assert out.count("no campaigns yet") >= 2, out
    assert "Ctrl-C stops" in out and "Traceback" not in err
