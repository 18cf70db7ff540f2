"""One process per rank for the whole attempt: every distributed phase runs in the same rank
processes (one process-group init each), a failing rank still ends the attempt with an error and
no process left behind, and a resumed attempt runs only its pending phases."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.payload.test_p2p_nsys import FAKE_NSYS
from tests.payload.test_runner import TINY_PROFILE, run_payload

pytestmark = pytest.mark.slow

COLLECTIVES = {"ops": ["all_reduce"], "min_bytes": 8, "max_bytes": 64, "factor": 8, "warmup_iters": 1, "iters": 2}
LINE = re.compile(r"^rank (\d+) pid (\d+): (.*)$", re.MULTILINE)


def _job(world: int, phases: list[str], **extra: Any) -> dict[str, Any]:
    return {"campaign": "t", "cell": "local/cpu/2", "attempt": 1, "token": "tok", "gpu": "cpu", "count": world,
            "phases": phases, "done_phases": [], "profile": dict(TINY_PROFILE), "collectives": dict(COLLECTIVES),
            **extra}


def _rank_lines(workdir: Path) -> dict[str, list[tuple[int, int, str]]]:
    """(rank, pid, what) of every line the rank processes wrote about themselves, per log file."""
    return {log.name: [(int(r), int(p), what) for r, p, what in LINE.findall(log.read_text())]
            for log in sorted((workdir / "artifacts" / "logs").glob("*.log"))}


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _profile_samples(workdir: Path) -> list[dict[str, Any]]:
    """The profile samples written so far; a last line still being written (no newline yet) is left out."""
    text = (workdir / "events.jsonl").read_text() if (workdir / "events.jsonl").exists() else ""
    lines = text.splitlines(keepends=True)
    complete = [line for line in lines if line.endswith("\n")]
    return [e for e in map(json.loads, complete) if e["kind"] == "sample" and e.get("phase") == "profile"]


def test_every_distributed_phase_runs_in_one_process_per_rank(tmp_path: Path) -> None:
    workdir = tmp_path / "a"
    code, events, output = run_payload(workdir, _job(2, ["preflight", "collectives", "profile"]))
    assert code == 0, output
    assert [(e["kind"], e.get("phase")) for e in events if e["kind"] in ("phase_start", "phase_end", "done")] == [
        ("phase_start", "preflight"), ("phase_end", "preflight"), ("phase_start", "collectives"),
        ("phase_end", "collectives"), ("phase_start", "profile"), ("phase_end", "profile"), ("done", None)]
    lines = _rank_lines(workdir)
    assert sorted(lines) == ["attempt-rank0.log", "attempt-rank1.log"]  # no log of a per-phase process
    for rank in (0, 1):
        seen = lines[f"attempt-rank{rank}.log"]
        # preflight asks the ranks for torch's view of the node (the runner never imports torch)
        assert [what for _, _, what in seen] == ["joined the gloo group of 2", "phase preflight_torch",
                                                 "phase collectives", "phase profile"]
        assert {(r, pid) for r, pid, _ in seen} == {(rank, seen[0][1])}  # one process, one group init
        assert not _alive(seen[0][1])
    # each phase's samples came out of its process while the phases ran one after the other
    starts = {e["phase"]: e["t"] for e in events if e["kind"] == "phase_start"}
    first_profile = min(e["t"] for e in events if e["kind"] == "sample" and e["phase"] == "profile")
    last_collective = max(e["t"] for e in events if e["kind"] == "sample" and e["phase"] == "collectives")
    assert starts["collectives"] < last_collective < starts["profile"] < first_profile
    assert not list(workdir.glob(".rendezvous-*"))


def test_a_rank_failing_in_the_second_phase_ends_the_attempt(tmp_path: Path) -> None:
    workdir = tmp_path / "a"
    broken = {**COLLECTIVES, "ops": ["all_reduce", "warp"]}
    code, events, output = run_payload(workdir, _job(2, ["profile", "collectives"], collectives=broken))
    assert code == 1, output
    assert [e["phase"] for e in events if e["kind"] == "phase_end"] == ["profile"]
    (error,) = [e for e in events if e["kind"] == "error"]
    assert error["phase"] == "collectives"
    assert re.search(r"collectives rank [01] exited with code 1: .*unknown collective 'warp'", error["message"])
    assert events[-1] == {**events[-1], "kind": "done", "exit_code": 1}
    pids = {pid for seen in _rank_lines(workdir).values() for _, pid, _ in seen}
    assert len(pids) == 2 and not any(_alive(pid) for pid in pids)
    assert not list(workdir.glob(".rendezvous-*"))


def test_a_killed_rank_ends_the_attempt_and_no_rank_is_left(tmp_path: Path) -> None:
    workdir = tmp_path / "a"
    workdir.mkdir()
    job = _job(2, ["collectives", "profile"], profile={**TINY_PROFILE, "steps": 100_000})
    (workdir / "job.json").write_text(json.dumps(job))
    proc = subprocess.Popen([sys.executable, "-m", "payload", "run", "job.json"], cwd=workdir,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(_profile_samples(workdir)) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, "the profile never got going"
            time.sleep(0.1)
        pids = {rank: pid for seen in _rank_lines(workdir).values() for rank, pid, _ in seen}
        os.kill(pids[1], signal.SIGKILL)
        assert proc.wait(timeout=60) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in {pid for seen in _rank_lines(workdir).values() for _, pid, _ in seen if _alive(pid)}:
            os.kill(pid, signal.SIGKILL)  # a failing test leaves nothing running either
    events = [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]
    (error,) = [e for e in events if e["kind"] == "error"]
    assert error["phase"] == "profile" and re.search(r"profile rank [01] exited with code", error["message"])
    assert events[-1] == {**events[-1], "kind": "done", "exit_code": 1}
    assert not _alive(pids[0]), "rank 0 outlived the attempt"


def test_a_resumed_attempt_runs_only_its_pending_phases_from_its_next_step(tmp_path: Path) -> None:
    workdir = tmp_path / "a"
    job = _job(2, ["preflight", "collectives", "profile"], done_phases=["preflight", "collectives"],
               profile_steps_done=2)
    code, events, output = run_payload(workdir, job)
    assert code == 0, output
    assert {e.get("phase") for e in events if e["kind"] != "done"} == {"profile"}
    samples = [e for e in events if e["kind"] == "sample"]
    assert [(s["warmup"], s["timed_index"]) for s in samples] == [(True, None), (False, 2)]
    for rank in (0, 1):
        seen = _rank_lines(workdir)[f"attempt-rank{rank}.log"]
        assert [what for _, _, what in seen] == ["joined the gloo group of 2", "phase profile"]


def test_the_ranks_are_gone_before_the_command_phase(tmp_path: Path) -> None:
    workdir = tmp_path / "a"
    check = ("for pid in $(sed -n 's/^rank [0-9]* pid \\([0-9]*\\):.*/\\1/p' artifacts/logs/attempt-rank*.log "
             "| sort -u); do echo seen $pid; kill -0 $pid 2>/dev/null && echo alive $pid; done; true")
    code, _, output = run_payload(workdir, _job(2, ["collectives", "command"], command={"run": check}))
    assert code == 0, output
    said = (workdir / "artifacts" / "command.stdout").read_text().split("\n")
    assert len([s for s in said if s.startswith("seen ")]) == 2, said
    assert not [s for s in said if s.startswith("alive ")], said


def test_a_profile_under_nsys_gets_ranks_of_its_own(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nsys = bin_dir / "nsys"
    nsys.write_text(FAKE_NSYS)
    nsys.chmod(nsys.stat().st_mode | stat.S_IEXEC)
    workdir = tmp_path / "a"
    workdir.mkdir()
    (workdir / "job.json").write_text(json.dumps(_job(2, ["collectives", "profile"],
                                                      profile={**TINY_PROFILE, "nsys": True})))
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "payload", "run", "job.json"], cwd=workdir, env=env, timeout=120,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]
    assert sorted(e["name"] for e in events if e["kind"] == "artifact" and e["phase"] == "profile") == [
        "nsys-profile-rank0.nsys-rep", "nsys-profile-rank1.nsys-rep"]
    lines = _rank_lines(workdir)
    assert sorted(lines) == ["attempt-rank0.log", "attempt-rank1.log", "profile-rank0.log", "profile-rank1.log"]
    assert [what for _, _, what in lines["attempt-rank0.log"]] == ["joined the gloo group of 2", "phase collectives"]
    assert [what for _, _, what in lines["profile-rank0.log"]] == ["joined the gloo group of 2", "phase profile"]
    assert lines["attempt-rank0.log"][0][1] != lines["profile-rank0.log"][0][1]
    assert [e["phase"] for e in events if e["kind"] == "phase_end"] == ["collectives", "profile"]


def test_preflight_runs_its_all_reduce_on_the_attempts_ranks_with_its_nccl_log_and_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchctl.payload.comm.ranks import Ranks
    from benchctl.payload.job import Job
    from benchctl.payload.node import preflight

    calls: list[tuple[str, float | None, str | None, str | None]] = []
    monkeypatch.setattr(Ranks, "run", lambda self, phase, timeout_s=None: calls.append(
        (phase, timeout_s, os.environ.get("NCCL_DEBUG"), os.environ.get("NCCL_DEBUG_FILE"))))
    job = Job(campaign="t", cell="c", attempt=1, token="t", gpu="H100_SXM", count=8, phases=["preflight"])
    preflight._allreduce(job, tmp_path / "job.json", tmp_path, time.monotonic() + 60, {}, Ranks(tmp_path, 8))
    ((phase, timeout_s, debug, debug_file),) = calls
    assert (phase, debug, debug_file) == ("preflight_allreduce", "INFO", str(tmp_path / "nccl-debug.%h.%p.log"))
    assert timeout_s is not None and 50 < timeout_s <= 60


def test_the_runner_never_imports_torch_when_it_has_ranks(tmp_path: Path) -> None:
    """torch.json comes from the attempt's ranks (which import torch for the later phases anyway):
    the runner process itself stays free of torch, one import less per attempt."""
    workdir = tmp_path / "a"
    workdir.mkdir()
    (workdir / "job.json").write_text(json.dumps(_job(1, ["preflight"])))
    probe = ("import runpy, sys; sys.argv = ['payload', 'run', 'job.json']\n"
             "try:\n    runpy.run_module('payload', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print('TORCH_IN_RUNNER', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=workdir, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert "TORCH_IN_RUNNER False" in out, out
    torch_json = json.loads((workdir / "artifacts" / "facts" / "torch.json").read_text())
    assert torch_json["torch"].startswith("2.") and torch_json["cuda_available"] is False
