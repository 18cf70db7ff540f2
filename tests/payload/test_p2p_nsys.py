"""The p2p phase on a node without GPU pairs, and the profile phase under a (stand-in) nsys."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchctl.payload.comm.p2p import skip_reason
from benchctl.payload.job import Job
from tests.conftest import REPO

pytestmark = pytest.mark.slow

FAKE_NSYS = """#!/bin/sh
# Stand-in for Nsight Systems: record the options, write the report, run the rest of the command.
out=""
while [ "$1" != "${1#-}" ] || [ "$1" = "profile" ]; do
  case "$1" in -o) out="$2"; shift 2;; *) echo "$1" >> "$(dirname "$0")/nsys-args"; shift;; esac
done
echo report > "$out.nsys-rep"
exec "$@"
"""


def _run(tmp_path: Path, job: dict[str, Any], path_prefix: str = "") -> tuple[int, list[dict[str, Any]]]:
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = {"PYTHONPATH": str(REPO), "PATH": f"{path_prefix}/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "payload", "run", "job.json"], cwd=tmp_path, env=env, timeout=120,
                          capture_output=True, text=True)
    return proc.returncode, [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]


BASE = {"campaign": "t", "cell": "c", "attempt": 1, "token": "tok", "gpu": "cpu", "count": 1}
PROFILE = {"model": "nanochat-d1", "device_batch_size": 2, "sequence_len": 16, "total_batch_size": 32,
           "warmup_steps": 0, "steps": 1, "vocab_size": 256}


def test_p2p_is_skipped_with_a_reason(tmp_path: Path) -> None:
    code, events = _run(tmp_path, {**BASE, "phases": ["p2p"]})
    assert code == 0
    (sample,) = [e for e in events if e["kind"] == "sample"]
    assert (sample["status"], sample["reason"]) == ("skip", "a CPU cell has no GPU pairs")
    (end,) = [e for e in events if e["kind"] == "phase_end"]
    assert end["summary"] == {"skipped": "a CPU cell has no GPU pairs"}


def test_p2p_skip_reasons() -> None:
    gpu_job = Job(campaign="t", cell="c", attempt=1, token="t", gpu="H100_SXM", count=8, phases=["p2p"])
    assert skip_reason(gpu_job, 1) == "1 GPU visible; a pair needs two"
    assert skip_reason(gpu_job, 8) is None and skip_reason(gpu_job, None) is None
    one = Job(campaign="t", cell="c", attempt=1, token="t", gpu="H200", count=1, phases=["p2p"])
    assert skip_reason(one, None) == skip_reason(one, 8) == "a 1-GPU cell has no GPU pairs"


def test_a_1_gpu_cell_skips_p2p_without_starting_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchctl.payload import child
    from benchctl.payload.comm import p2p
    from benchctl.payload.events import EventLog

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError("a 1-GPU cell started the p2p child")

    monkeypatch.setattr(child, "run_in_child", no_child)
    one = Job(campaign="t", cell="c", attempt=1, token="t", gpu="H200", count=1, phases=["p2p"])
    with EventLog(tmp_path / "events.jsonl") as log:
        assert p2p.run_p2p(one, tmp_path / "job.json", log) == {"skipped": "a 1-GPU cell has no GPU pairs"}


def test_profile_runs_under_nsys_when_asked_and_present(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nsys = bin_dir / "nsys"
    nsys.write_text(FAKE_NSYS)
    nsys.chmod(nsys.stat().st_mode | stat.S_IEXEC)
    work = tmp_path / "attempt"
    work.mkdir()
    # one rank (a report per rank, ranks of their own: tests/payload/test_one_process.py)
    job = {**BASE, "count": 1, "phases": ["profile"], "profile": {**PROFILE, "total_batch_size": 64, "nsys": True}}
    code, events = _run(work, job, path_prefix=f"{bin_dir}{os.pathsep}")
    assert code == 0, events
    reports = sorted(e["name"] for e in events if e["kind"] == "artifact")
    assert reports == ["nsys-profile-rank0.nsys-rep"]
    assert "--trace=cuda,nvtx,osrt" in (bin_dir / "nsys-args").read_text()


def test_profile_without_nsys_says_so(tmp_path: Path) -> None:
    code, events = _run(tmp_path, {**BASE, "phases": ["profile"], "profile": {**PROFILE, "nsys": True}})
    assert code == 0
    (end,) = [e for e in events if e["kind"] == "phase_end"]
    assert "nsys is not on the node's PATH" in end["summary"]["nsys"]
