"""The command phase: a user's script on the node, its metrics as samples, its output as artifacts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FAST_POLLS, REPO, cli_here, run_cli

TRAIN = """\
import json, os, sys
with open(os.environ["BENCHCTL_METRICS"], "a") as metrics:
    for step in range(3):
        metrics.write(json.dumps({"step": step, "step_time_s": 0.5 + step, "t": 123}) + "\\n")
    metrics.write("not json\\n")
print("trained on", os.environ["BENCHCTL_WORLD_SIZE"], os.environ.get("NCCL_ALGO"))
print("a warning", file=sys.stderr)
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def _run(tmp_path: Path, env: dict[str, str]) -> tuple[int, list[dict[str, Any]]]:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text(TRAIN)
    job = {"campaign": "t", "cell": "c", "attempt": 1, "token": "tok", "gpu": "cpu", "count": 2,
           "phases": ["command"], "env": env, "command": {"run": f"{sys.executable} train.py", "timeout_minutes": 1}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, "-m", "payload", "run", "job.json"], cwd=tmp_path, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    return proc.returncode, [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_metrics_become_samples_and_output_comes_back(tmp_path: Path) -> None:
    code, events = _run(tmp_path, {"NCCL_ALGO": "Ring"})
    assert code == 0, events
    samples = [e for e in events if e["kind"] == "sample"]
    assert [(s["phase"], s["step"], s["step_time_s"], s["user_t"]) for s in samples] == [
        ("command", 0, 0.5, 123), ("command", 1, 1.5, 123), ("command", 2, 2.5, 123)]
    assert {e["name"] for e in events if e["kind"] == "artifact"} == {"command.stdout", "command.stderr",
                                                                     "metrics.jsonl"}
    assert (tmp_path / "artifacts" / "command.stdout").read_text() == "trained on 2 Ring\n"
    (end,) = [e for e in events if e["kind"] == "phase_end"]
    assert end["summary"] == {"exit_code": 0, "metric_samples": 3, "unparseable_metric_lines": 1}


@pytest.mark.slow
def test_non_zero_exit_fails_with_the_tail_of_stderr(tmp_path: Path) -> None:
    code, events = _run(tmp_path, {"EXIT": "3"})
    assert code == 1
    (error,) = [e for e in events if e["kind"] == "error"]
    assert "exited with code 3" in error["message"] and "a warning" in error["message"]
    assert len([e for e in events if e["kind"] == "sample"]) == 3, "metrics before the failure are kept"


@pytest.mark.slow
def test_command_cell_end_to_end(home: Path, tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "train.py").write_text(TRAIN)
    campaign = tmp_path / "cmd.yaml"
    campaign.write_text(f"""\
name: cmd
budget_usd: 10
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{max_attempts: 1}}
payload:
  phases: [command]
  command: {{run: "{sys.executable} train.py", upload: job}}
matrix:
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 1.0, env: [{{}}, {{EXIT: "5"}}]}}
""")
    result = run_cli("run", str(campaign), *FAST_POLLS, home=home)
    assert result.returncode == 1  # one of the two cells fails
    status = json.loads(run_cli("status", "cmd", "--format", "json", home=home).stdout)
    cells = {c["key"]: c for c in status["campaigns"][0]["cells"]}
    assert cells["local:cpux1:on-demand"]["state"] == "done"
    failed = cells["local:cpux1:on-demand:env=EXIT=5"]
    assert failed["state"] == "failed"
    assert "exited with code 5" in failed["reason"] and "a warning" in failed["reason"]
    stdout = home / "artifacts" / "cmd" / "local:cpux1:on-demand" / "1" / "artifacts" / "command.stdout"
    assert stdout.read_text() == "trained on 1 None\n"


def test_command_phase_needs_a_command(home: Path, tmp_path: Path) -> None:
    campaign = tmp_path / "c.yaml"
    campaign.write_text((REPO / "campaigns" / "local-smoke.yaml").read_text().replace(
        "phases: [preflight, collectives, profile]", "phases: [command]"))
    result = cli_here("run", str(campaign), home=home)
    assert result.returncode == 2 and "needs payload.command" in result.stderr
    missing = campaign.read_text().replace("phases: [command]", "phases: [command]\n  command: {run: x, upload: nope}")
    campaign.write_text(missing)
    result = cli_here("run", str(campaign), home=home)
    assert result.returncode == 2 and "payload.command.upload" in result.stderr and "not a directory" in result.stderr
