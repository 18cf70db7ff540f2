"""No process survives the attempt (issue 31 item 7), on the local provider end to end: a command
that detaches processes every way it can (``nohup … &``, ``setsid``, a double fork, and one that
unsets ``BENCHCTL_LOCAL_NODE``, the local node's marker) leaves none running once ``run`` exits.
``BENCHCTL_*`` names are refused in a campaign's ``env``. The ssh provider: ``test_ssh_hygiene.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli_here, run_cli
from tests.local_campaign import no_live_nodes, only_cell
from tests.payload.test_reaper import detaching_command, kill_left, markers, none_left

CAMPAIGN = """\
name: hygiene
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 1}}
payload:
  phases: [command]
  command: {{run: {run}}}
matrix:
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5{extra}}}
"""


def _campaign(tmp_path: Path, run: str, extra: str = "") -> Path:
    path = tmp_path / "hygiene.yaml"
    path.write_text(CAMPAIGN.format(run=json.dumps(run), extra=extra))
    return path


@pytest.mark.slow
def test_no_process_a_local_command_detached_survives_run(home: Path, tmp_path: Path) -> None:
    marks = markers()
    try:
        result = run_cli("run", str(_campaign(tmp_path, detaching_command(marks))), "--poll-interval", "0.1",
                         "--status-interval", "0.3", home=home)
        assert result.returncode == 0, result.stderr
        _, cell = only_cell(home)
        assert cell.state == "done", cell.reason  # the command returned: every detached process had started
        assert none_left(marks) == [], "a process the command detached outlived the attempt"
        no_live_nodes(home)
    finally:
        kill_left(marks)


@pytest.mark.parametrize("name", ["BENCHCTL_LOCAL_NODE", "BENCHCTL_METRICS", "benchctl_cell"])
def test_benchctl_names_are_refused_in_env(home: Path, tmp_path: Path, name: str) -> None:
    result = cli_here("plan", str(_campaign(tmp_path, "true", extra=f", env: {{{name}: x}}")), home=home)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "matrix[0].env" in line and f"the name {name}: BENCHCTL_* names are benchctl's own" in line, line
