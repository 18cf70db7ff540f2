"""Fail fast, end to end on the local provider with injected faults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchctl.store import queries as q
from benchctl.store.database import open_store
from tests.conftest import FAST_POLLS, cli_here, run_cli

FAULTY = """\
  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 1.0, faults: {shm_mb: 64}}
  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 1.0, env: {KNOB: numa}, faults: {numa: split, hosts: 4}}
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 1.0, faults: {cuda_init: error}}
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 1.0, env: {KNOB: shm},
     faults: {env: {NCCL_SHM_DISABLE: "1"}, hosts: 2}}
"""


@pytest.mark.slow
def test_bad_nodes_are_replaced_remembered_and_accounted(home: Path, write_campaign, standin_python: Path) -> None:
    # the verdicts are the real runner's, from the node's facts; only the ranks are stood in for
    result = run_cli("run", str(write_campaign(matrix=FAULTY, python=standin_python)), "--concurrency", "1",
                     "--poll-interval", "0.2", home=home)
    assert result.returncode == 0, result.stderr
    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    (campaign,) = q.campaigns(engine)
    cells = {c.key: c for c in q.cells(engine, campaign.id or 0)}
    assert {c.state for c in cells.values()} == {"done"}

    def history(key: str) -> list[tuple[str | None, str | None]]:
        return [(a.host, a.outcome) for a in q.attempts(engine, cells[key].id or 0)]

    # /dev/shm of 64 MB on local-0: failed, terminated, replaced by local-1
    assert history("local:cpux2:on-demand") == [("local-0", "bad_node"), ("local-1", "done")]
    # a NUMA split is a warning: the run goes on, and the leaderboard flags it
    assert history("local:cpux2:on-demand:env=KNOB=numa") == [("local-1", "done")]
    # local-0 is remembered campaign-wide: the injected CUDA error there is never met again
    assert history("local:cpux1:on-demand") == [("local-1", "done")]
    # NCCL_SHM_DISABLE=1 on local-0 and local-1: local-0 is avoided, local-1 fails, local-2 works
    assert history("local:cpux1:on-demand:env=KNOB=shm") == [("local-1", "bad_node"), ("local-2", "done")]

    first = q.attempts(engine, cells["local:cpux2:on-demand"].id or 0)[0]
    evidence = home / "artifacts" / "tiny" / "local:cpux2:on-demand" / "1" / "artifacts"
    report = json.loads((evidence / "preflight.json").read_text())
    assert report["verdict"] == "fail"
    assert {c["name"]: c["status"] for c in report["checks"]}["shm"] == "fail"
    assert (evidence / "facts" / "dev-shm.txt").read_text().splitlines()[1].split()[:2] == ["shm", "65536"]
    assert "shm:" in (first.detail or "")

    status = json.loads(cli_here("status", "--format", "json", home=home).stdout)["campaigns"][0]
    bad = [a.cost_usd or 0.0 for c in cells.values() for a in q.attempts(engine, c.id or 0) if a.outcome == "bad_node"]
    assert sum(bad) > 0 and status["bad_node_spent_usd"] == pytest.approx(sum(bad))
    assert status["spent_by_outcome_usd"]["done"] + status["bad_node_spent_usd"] == pytest.approx(status["spent_usd"])

    rows = {r["cell"]: r for r in json.loads(cli_here("leaderboard", "--format", "json", home=home).stdout)}
    assert rows["local:cpux2:on-demand:env=KNOB=numa"]["flags"] == ["numa_split"]
    assert rows["local:cpux2:on-demand"]["flags"] == ["bad_nodes×1"]
    assert rows["local:cpux1:on-demand"]["flags"] == []


def test_faults_are_for_the_local_provider_only(home: Path, write_campaign) -> None:
    matrix = "  - {provider: runpod, gpu: H100_SXM, count: 2, faults: {shm_mb: 64}}\n"
    result = cli_here("run", str(write_campaign(matrix=matrix)), *FAST_POLLS, home=home)  # refused before any node
    assert result.returncode == 2 and "faults are injected by the local provider only" in result.stderr


@pytest.mark.slow
def test_preflight_command(home: Path, tmp_path: Path) -> None:
    from tests.conftest import REPO

    fixtures = REPO / "tests" / "fixtures" / "preflight"
    # in this process (``cli_here``): preflight starts no node and installs no signal handler
    nvl = cli_here("preflight", "--replay", str(fixtures / "h100-nvl-pairs"), "--format", "json", home=home)
    assert nvl.returncode == 3
    report = json.loads(nvl.stdout)
    assert report["verdict"] == "fail" and report["expect"] == {"gpu": "H100_NVL", "count": 8}
    sold_as = cli_here("preflight", "--replay", str(fixtures / "h100-pcie"), "--expect", "gpu=H100_SXM,count=8",
                       home=home)
    assert sold_as.returncode == 3 and "verdict: fail" in sold_as.stdout
    here = cli_here("preflight", "--out", str(tmp_path / "facts"), "--format", "json", home=home)
    assert here.returncode == 0, here.stderr
    assert json.loads(here.stdout)["verdict"] in ("pass", "warn")
    assert (tmp_path / "facts" / "env.txt").is_file() and (tmp_path / "facts" / "probes.json").is_file()
    bad = cli_here("preflight", "--replay", str(fixtures / "cpu-only"), "--expect", "gpus=8", home=home)
    assert bad.returncode == 2 and "gpu=NAME" in bad.stderr
