"""EC2's spot interruption notice: the payload's watch (payload.spot_notice) against a fake IMDSv2
on 127.0.0.1 (tests/fakes/aws_fake.py FakeIMDS), and the real payload on CPU stopping at a step
boundary with every measured step in events.jsonl."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchctl.payload.spot_notice import NOTICE_FILE_ENV, SpotWatch, noticed
from tests.conftest import REPO
from tests.fakes.aws_fake import FakeIMDS, running_fake_imds
from tests.local_campaign import wait_for
from tests.payload.test_runner import _job


def test_the_watch_reads_the_notice_with_an_imdsv2_token(tmp_path: Path) -> None:
    imds = FakeIMDS()
    with running_fake_imds(imds) as url:
        watch = SpotWatch(tmp_path, endpoint=url)
        assert watch.poll() is None, "404 before EC2 posts a notice"
        imds.notify("terminate", "2026-11-23T13:02:00Z")
        assert watch.poll() == {"action": "terminate", "time": "2026-11-23T13:02:00Z"}
        imds.expire_tokens()
        assert watch.poll() is None, "401: the token expired"
        assert watch.poll() == {"action": "terminate", "time": "2026-11-23T13:02:00Z"}, "a new token"
    assert [r for r in imds.requests if r[0] == "PUT"] == [("PUT", "/latest/api/token")] * 2


def test_the_watch_writes_the_notice_once_and_an_absent_service_is_no_notice(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert SpotWatch(tmp_path, endpoint=closed, timeout_s=0.5).poll() is None
    imds = FakeIMDS()
    with running_fake_imds(imds) as url:
        watch = SpotWatch(tmp_path, endpoint=url, poll_s=0.05).start()
        try:
            time.sleep(0.3)
            assert noticed(watch.path) is None
            imds.notify("stop", "2026-11-23T13:05:00Z")
            wait_for(lambda: noticed(watch.path) is not None, timeout=5)
        finally:
            watch.stop()
        assert noticed(watch.path) == {"action": "stop", "time": "2026-11-23T13:05:00Z"}
    assert NOTICE_FILE_ENV not in os.environ, "the watch leaves this process's environment alone"


def _start(workdir: Path, url: str, **job_fields: object) -> subprocess.Popen[bytes]:
    workdir.mkdir()
    (workdir / "job.json").write_text(json.dumps(_job(spot_notice=True, **job_fields)))
    env = {**os.environ, "PYTHONPATH": str(REPO), "AWS_EC2_METADATA_SERVICE_ENDPOINT": url}
    return subprocess.Popen([sys.executable, "-m", "payload", "run", "job.json"], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _events(workdir: Path) -> list[dict[str, object]]:
    path = workdir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.slow  # the real payload, 2 ranks
def test_the_payload_stops_at_a_step_boundary_on_the_notice_and_loses_nothing(tmp_path: Path) -> None:
    workdir = tmp_path / "attempt"

    def events() -> list[dict[str, object]]:
        return _events(workdir)

    def timed() -> list[int]:
        return [int(str(e["timed_index"])) for e in events() if e["kind"] == "sample" and not e["warmup"]]

    imds = FakeIMDS()
    with running_fake_imds(imds) as url:
        proc = _start(workdir, url, count=2, phases=["profile"], profile={"steps": 100000, "warmup_steps": 1})
        try:
            wait_for(lambda: len(timed()) >= 3, timeout=120)
            imds.notify()
            wait_for(lambda: any(e["kind"] == "preempt_notice" for e in events()), timeout=60)
            measured = timed()
            time.sleep(1.5)
            assert proc.poll() is None, "it waits for EC2 to end the node, so the controller reads a preemption"
            assert timed() == measured == list(range(len(measured))), "whole steps, none after the notice"
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # EC2 ends the node
            proc.wait()
    (notice,) = [e for e in events() if e["kind"] == "preempt_notice"]
    assert (notice["phase"], notice["action"], notice["notice_time"], notice["timed_steps"]) == (
        "profile", "terminate", "2026-11-23T13:02:00Z", len(measured))
    assert not [e for e in events() if e["kind"] in ("phase_end", "error")], "the profile is not done"
    assert (workdir / "spot_notice.json").exists()


def test_after_a_notice_no_phase_starts(tmp_path: Path) -> None:
    workdir = tmp_path / "attempt"
    imds = FakeIMDS()
    imds.notify()  # before the payload starts: the preflight runs on, the profile never starts
    with running_fake_imds(imds) as url:
        proc = _start(workdir, url, phases=["preflight", "profile"])
        try:
            wait_for(lambda: any(e["kind"] == "preempt_notice" for e in _events(workdir)), timeout=120)
            assert proc.poll() is None
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert [(e["kind"], e.get("phase"), e.get("timed_steps")) for e in _events(workdir)
            if e["kind"] in ("phase_start", "phase_end", "preempt_notice") or e.get("phase") == "profile"] == [
        ("phase_start", "preflight", None), ("phase_end", "preflight", None), ("preempt_notice", "profile", 0)]
