"""The real payload, ``python -m payload run job.json``, on CPU with gloo: events, exit codes, artifacts."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchctl.payload.job import Job
from tests.conftest import REPO

pytestmark = pytest.mark.slow

TINY_PROFILE: dict[str, Any] = {"model": "nanochat-d1", "vocab_size": 512, "device_batch_size": 2,
                                "sequence_len": 32, "total_batch_size": 128, "warmup_steps": 1, "steps": 3,
                                "seed": 0}


def _job(**overrides: Any) -> dict[str, Any]:
    job: dict[str, Any] = {"campaign": "tiny", "cell": "local/cpu/1", "attempt": 1, "token": "tok-123",
                           "gpu": "cpu", "count": 1, "phases": ["preflight", "profile"], "done_phases": [],
                           "profile": dict(TINY_PROFILE)}
    profile = overrides.pop("profile", {})
    job.update(overrides)
    job["profile"].update(profile)
    Job.from_dict(job)  # the file we write is a valid Job
    return job


def run_payload(workdir: Path, job: dict[str, Any], timeout: float = 120) -> tuple[int, list[dict[str, Any]], str]:
    """Run the payload in ``workdir``; return (exit code, events, output)."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "payload", "run", "job.json"], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=timeout)
    lines = (workdir / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]  # every line is valid JSON
    assert all(isinstance(e, dict) and isinstance(e["t"], float) and "kind" in e for e in events)
    return proc.returncode, events, proc.stdout + proc.stderr


def _profile_samples(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "sample" and e.get("phase") == "profile"]


STEPS = 7
"""Timed steps of the preflight and profile run: enough for the loss on the repeated batch to halve."""


@pytest.mark.parametrize("world", [1, 2])
def test_run_preflight_and_profile(tmp_path: Path, world: int) -> None:
    """One run is read twice: events, exit codes and artifacts here, the training itself in
    ``_assert_loss_falls_on_repeated_batch``."""
    workdir = tmp_path / "attempt"
    code, events, output = run_payload(workdir, _job(count=world, profile={"steps": STEPS}))
    assert code == 0, output
    assert (events[0]["kind"], events[0]["phase"]) == ("phase_start", "preflight")
    assert events[-1]["kind"] == "done" and events[-1]["exit_code"] == 0
    assert [e["kind"] for e in events].count("done") == 1
    assert not [e for e in events if e["kind"] == "error"]
    assert [(e["kind"], e["phase"]) for e in events if e["kind"] in ("phase_start", "phase_end")] == [
        ("phase_start", "preflight"), ("phase_end", "preflight"), ("phase_start", "profile"), ("phase_end", "profile")]

    checks = {e["name"]: e["status"] for e in events if e["kind"] == "sample" and e.get("phase") == "preflight"}
    assert checks["gpu_inventory"] == checks["cuda_init"] == "skip"  # a CPU cell needs no GPU
    assert checks["shm"] == checks["nccl_env"] == checks["cpu"] == "pass"
    assert "fail" not in checks.values()

    samples = _profile_samples(events)
    n = TINY_PROFILE["warmup_steps"] + STEPS
    assert len(samples) == n
    assert [s["step"] for s in samples] == list(range(n))
    assert [s["warmup"] for s in samples] == [True] + [False] * STEPS
    assert all(s["step_time_s"] > 0 for s in samples)
    assert all(math.isfinite(s["loss"]) and s["loss"] > 0 for s in samples)
    assert all(s["tokens"] == 128 for s in samples)
    for s in samples:  # the phase split is measured inside the step and fits in it
        parts = [s["fwd_bwd_s"], s["opt_phase1_s"], s["opt_phase2_s"], s["opt_phase3_s"]]
        assert all(p > 0 for p in parts) and sum(parts) <= s["step_time_s"]
        assert s["tokens_per_s"] == pytest.approx(128 / s["step_time_s"])
        assert s["mfu"] is None  # no GPU, no peak to compare against
    (profile_end,) = [e for e in events if e["kind"] == "phase_end" and e["phase"] == "profile"]
    assert profile_end["summary"]["timed_steps"] == STEPS
    timed = sorted(s["step_time_s"] for s in samples[1:])
    assert profile_end["summary"]["step_time_median_s"] == pytest.approx(timed[STEPS // 2])

    preflight = workdir / "artifacts" / "preflight.json"
    assert preflight.is_file()
    report = json.loads(preflight.read_text())
    assert report["verdict"] == "pass" and [c["name"] for c in report["checks"]] == list(checks)
    announced = {e["name"]: e for e in events if e["kind"] == "artifact"}
    assert (announced["preflight.json"]["path"], announced["preflight.json"]["bytes"]) == (
        "artifacts/preflight.json", preflight.stat().st_size)
    for fact in ("env.txt", "dev-shm.txt", "nproc.txt", "torch.json", "probes.json"):
        assert announced[fact]["path"] == f"artifacts/facts/{fact}"
    logs = workdir / "artifacts" / "logs"
    assert sorted(p.name for p in logs.glob("*.log")) == [f"attempt-rank{r}.log" for r in range(world)]
    assert not list(workdir.glob(".rendezvous-*"))
    _assert_loss_falls_on_repeated_batch(events)


def test_done_phases_are_skipped(tmp_path: Path) -> None:
    code, events, output = run_payload(tmp_path / "a", _job(done_phases=["preflight"], profile={"steps": 1}))
    assert code == 0, output
    assert not [e for e in events if e.get("phase") == "preflight"]
    assert (events[0]["kind"], events[0]["phase"]) == ("phase_start", "profile")
    assert len(_profile_samples(events)) == 2
    assert events[-1] == {**events[-1], "kind": "done", "exit_code": 0}
    assert not (tmp_path / "a" / "artifacts" / "preflight.json").exists()


def test_unknown_phase_is_an_error(tmp_path: Path) -> None:
    code, events, output = run_payload(tmp_path / "a", _job(phases=["warp-drive", "profile"]))
    assert code == 1, output
    assert [e["kind"] for e in events] == ["error", "done"]
    assert events[0]["phase"] == "warp-drive"
    assert "unknown phase 'warp-drive'" in events[0]["message"]
    assert events[-1]["exit_code"] == 1
    assert not _profile_samples(events)


def test_missing_gpus_make_a_bad_node(tmp_path: Path) -> None:
    code, events, output = run_payload(tmp_path / "a", _job(gpu="H100_SXM", count=8))
    assert code == 3, output
    checks = {e["name"]: e for e in events if e["kind"] == "sample" and e.get("phase") == "preflight"}
    assert checks["cuda_init"]["status"] == "fail"  # this torch has no CUDA at all
    assert checks["gpu_inventory"]["status"] == "skip" and "nvidia-smi-query.csv" in checks["gpu_inventory"]["hint"]
    (error,) = [e for e in events if e["kind"] == "error"]
    assert error["bad_node"] is True
    assert error["phase"] == "preflight"
    assert "cuda_init" in error["message"]
    assert events[-1]["kind"] == "done" and events[-1]["exit_code"] == 3
    assert not [e for e in events if e.get("phase") == "profile"]
    assert (tmp_path / "a" / "artifacts" / "preflight.json").is_file()
    assert not list((tmp_path / "a" / "artifacts").glob("logs/*rank*.log")), "no rank started once CUDA failed"


def test_indivisible_batch_is_an_error(tmp_path: Path) -> None:
    code, events, output = run_payload(tmp_path / "a", _job(phases=["profile"], profile={"total_batch_size": 100}))
    assert code == 1, output
    (error,) = [e for e in events if e["kind"] == "error"]
    assert error["phase"] == "profile"
    assert "total_batch_size" in error["message"]
    assert "bad_node" not in error
    assert events[-1]["kind"] == "done" and events[-1]["exit_code"] == 1
    assert not _profile_samples(events)
    assert not list((tmp_path / "a" / "artifacts" / "logs").glob("*rank*.log")), "no rank started to fail"


def _assert_loss_falls_on_repeated_batch(events: list[dict[str, Any]]) -> None:
    losses = [s["loss"] for s in _profile_samples(events)]
    assert len(losses) == 1 + STEPS
    assert losses[-1] < 0.5 * losses[0], losses


def test_a_hung_probe_fails_preflight_at_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("BENCHCTL_FAULTS", json.dumps({"cuda_init": "hang"}))
    job = _job(phases=["preflight"])
    job["preflight_thresholds"] = {"budget_s": 3}
    started = time.monotonic()
    code, events, output = run_payload(tmp_path / "a", job)
    assert code == 3, output
    assert time.monotonic() - started < 30
    (check,) = [e for e in events if e["kind"] == "sample" and e.get("name") == "cuda_init"]
    assert check["status"] == "fail" and check["hint"].startswith("timed out")
