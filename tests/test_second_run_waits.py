"""A second ``run`` of a campaign another controller is running in the same store (two checkouts
on one machine, both in the default ``~/.benchctl``: issue 29 item 6) waits for that controller's
cells, naming it and the store, instead of failing with an empty leaderboard; a cell its holder
finished is left as it is, one its holder let go unfinished (it died) is run here."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.campaign.spec import load_campaign
from benchctl.cli.run import register_campaign
from benchctl.engine.lease import _start_ticks
from benchctl.store import leases as store_leases
from benchctl.store import queries as q
from tests.conftest import REPO
from tests.local_campaign import home_store, no_live_nodes

pytestmark = pytest.mark.slow


def _owner(pid: int) -> str:
    import socket

    return f"{socket.gethostname()}/{pid}/{_start_ticks(pid)}"


@pytest.fixture
def two_holders() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two live processes of this host, standing for the controller of another checkout."""
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(2)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _read_until(proc: subprocess.Popen[str], text: str, timeout: float = 120.0) -> str:
    """stderr of ``proc`` until it holds ``text`` (fails if it exits first). Read from the pipe itself:
    a buffered ``readline`` can take several lines into its buffer at once, after which ``select``
    sees an empty pipe and the line wanted is never looked at (seen under load)."""
    import time

    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    seen = b""
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        assert proc.poll() is None, f"exited {proc.returncode} before saying {text!r}:\n{seen.decode()}"
        assert time.monotonic() < deadline, f"not said in {timeout:.0f} s: {text!r}:\n{seen.decode()}"
        if select.select([fd], [], [], 0.5)[0]:
            seen += os.read(fd, 65536)
    return seen.decode()


def test_a_second_run_waits_for_the_cells_another_controller_holds(
        home: Path, write_campaign, standin_python: Path,  # type: ignore[no-untyped-def]
        two_holders: list[subprocess.Popen[bytes]]) -> None:
    engine = home_store(home)
    path = write_campaign(python=standin_python)
    row = register_campaign(engine, load_campaign(path), str(path))
    first, second = q.cells(engine, row.id or 0)
    owners = [_owner(p.pid) for p in two_holders]
    for cell, owner in zip((first, second), owners, strict=True):
        assert store_leases.acquire(engine, cell.id or 0, owner, 600) is None

    env = {**os.environ, "BENCHCTL_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("BENCHCTL_DB", None)
    proc = subprocess.Popen([sys.executable, "-m", "benchctl", "run", str(path), "--poll-interval", "0.1",
                             "--status-interval", "0.2"], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        said = _read_until(proc, "waiting for 2 cell(s)")
        # The holders stop: the second one as a controller interrupted with Ctrl-C does (its cell
        # cancelled, the lease given back), the first one dies with its cell unfinished.
        q.set_cell_state(engine, second.id or 0, "cancelled", "interrupted")
        store_leases.release(engine, second.id or 0, owners[1])
        two_holders[0].kill()
        two_holders[0].wait()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = said + err
    for cell, holder in zip((first, second), two_holders, strict=True):
        assert f"{cell.key}: waiting: controller " in err and f" pid {holder.pid} is running it" in err, err
    assert str(home / "benchctl.db") in err and "its own BENCHCTL_HOME (or --db)" in err, err
    assert "skipped" not in err and "Traceback" not in err, err
    assert proc.returncode == 1, err  # the cancelled cell is not run again: not complete
    assert f"{second.key} (cancelled" in err and "`benchctl resume tiny` tries again" in err, err
    assert q.cell(engine, first.id or 0).state == "done", err  # taken over from its dead holder, run here
    assert [a.outcome for a in q.attempts(engine, first.id or 0)] == ["done"]
    assert q.attempts(engine, second.id or 0) == [], "a cell its controller finished is not run again"
    assert "cpu×1" in out and "no result (cancelled)" in out, out  # the leaderboard is printed
    no_live_nodes(home)
