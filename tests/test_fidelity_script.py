"""scripts/fidelity_vs_upstream.py (issue 28 item 6): its CPU dry run against a fake upstream checkout
(tests/fixtures/fake_nanochat, which mimics only the interface the script uses: see its README)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "fidelity_vs_upstream.py"
FAKE = REPO / "tests" / "fixtures" / "fake_nanochat"


def test_the_dry_run_times_both_and_writes_the_ratio(tmp_path: Path) -> None:
    out = tmp_path / "fidelity.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--upstream", str(FAKE), "--cpu", "--warmup", "1",
                           "--steps", "2", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(out.read_text())
    assert found["dry_run"] is True and found["torch"]
    (row,) = found["rows"]
    assert (row["depth"], row["sequence_len"], row["attention"], row["timed_steps"]) == (2, 64, "sdpa", 2)
    assert row["ratio"] == row["payload_step_ms"] / row["upstream_step_ms"] > 0
    assert "ratio" in proc.stdout


def test_warm_ups_fill_the_caches_first_and_each_timed_run_still_runs(tmp_path: Path) -> None:
    out = tmp_path / "fidelity.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--upstream", str(FAKE), "--cpu", "--warmup", "1",
                           "--steps", "2", "--warm-gib", "100", "--budget-s", "600", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["errors"] == [] and row["payload_step_ms"] > 0 and row["upstream_step_ms"] > 0
    assert row["upstream"]["timed_steps"] == 2
    assert (row["warm_beside_payload"], row["warm_beside_upstream"]) == (0, 0)  # nothing beside a timed run


def test_a_path_that_is_no_checkout_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--upstream", str(tmp_path), "--cpu"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no nanochat checkout" in proc.stderr and "Traceback" not in proc.stderr
