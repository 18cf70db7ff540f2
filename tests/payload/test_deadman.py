"""The dead-man switch: a payload whose controller stopped sending heartbeats stops itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from benchctl.payload.deadman import heartbeat_age
from benchctl.payload.reaper import descendants
from tests.conftest import REPO


def _job(tmp_path: Path, run: str, max_idle_minutes: float) -> None:
    job = {"campaign": "t", "cell": "c", "attempt": 1, "token": "tok", "gpu": "cpu", "count": 1,
           "phases": ["command"], "command": {"run": run, "timeout_minutes": 5},
           "max_idle_minutes": max_idle_minutes, "idle_shutdown": "touch powered-off"}
    (tmp_path / "job.json").write_text(json.dumps(job))


def _payload(tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "payload", "run", "job.json"], cwd=tmp_path, text=True,
                            env={"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"]},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _events(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]


def _pids_running(marker: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_stale_heartbeat_stops_the_payload_its_children_and_powers_off(tmp_path: Path) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 100}.5"  # a unique sleep length finds the child again
    _job(tmp_path, f"sleep {marker}", max_idle_minutes=0.02)  # 1.2 s
    start = time.monotonic()
    proc = _payload(tmp_path)
    proc.wait(timeout=30)
    assert proc.returncode == 4
    assert time.monotonic() - start < 15
    events = _events(tmp_path)
    assert events[-1] == {**events[-1], "kind": "done", "exit_code": 4}
    assert any(e["kind"] == "error" and e.get("idle") and "heartbeat" in e["message"] for e in events)
    deadline = time.monotonic() + 5
    while _pids_running(f"sleep\0{marker}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _pids_running(f"sleep\0{marker}") == [], "the command the payload started was killed"
    deadline = time.monotonic() + 5
    while not (tmp_path / "powered-off").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "powered-off").exists(), "the provider's shutdown command ran"


@pytest.mark.slow
def test_fresh_heartbeats_keep_the_payload_running(tmp_path: Path) -> None:
    _job(tmp_path, "sleep 3", max_idle_minutes=0.02)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.2):
            (tmp_path / "heartbeat").touch()

    beater = threading.Thread(target=beat)
    beater.start()
    try:
        proc = _payload(tmp_path)
        proc.wait(timeout=30)
    finally:
        stop.set()
        beater.join()
    assert proc.returncode == 0, proc.stdout.read() if proc.stdout else ""
    assert not (tmp_path / "powered-off").exists()


def test_heartbeat_age_counts_from_start_until_the_first_beat(tmp_path: Path) -> None:
    assert heartbeat_age(tmp_path, started=100.0, now=130.0) == 30.0
    (tmp_path / "heartbeat").touch()
    os.utime(tmp_path / "heartbeat", (200.0, 200.0))
    assert heartbeat_age(tmp_path, started=100.0, now=230.0) == 30.0
    assert heartbeat_age(tmp_path, started=300.0, now=310.0) == 10.0, "an old file predating the start is ignored"


def test_descendants_finds_grandchildren() -> None:
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 5
        while len(descendants(os.getpid())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        found = descendants(os.getpid())
        assert proc.pid in found and len(found) >= 2
    finally:
        for pid in descendants(proc.pid):
            os.kill(pid, 9)
        proc.kill()
        proc.wait()
