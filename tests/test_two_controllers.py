"""Two controllers on one PostgreSQL database never run the same cell twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchctl.campaign.spec import load_campaign
from benchctl.cli.run import register_campaign
from benchctl.store import queries as q
from benchctl.store.database import open_store
from tests.conftest import REPO, cli_here
from tests.local_campaign import no_live_nodes, wait_for

pytestmark = pytest.mark.slow

THREE_CELLS = """\
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.2}
  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.4}
  - {provider: local, gpu: cpu, count: 1, market: spot, price_usd_per_hour: 0.1}
"""


def _resume(home: Path, db: str) -> subprocess.Popen[str]:
    env = {**os.environ, "BENCHCTL_HOME": str(home), "BENCHCTL_DB": db}
    # --status-interval 0.5: a cell that finds the machine's local node lock taken by the other
    # controller waits one status interval before it asks again (5 s by default)
    return subprocess.Popen([sys.executable, "-m", "benchctl", "resume", "tiny", "--poll-interval", "0.1",
                             "--status-interval", "0.5"],
                            cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _registered(pg_url: str, path: Path):  # type: ignore[no-untyped-def]
    engine = open_store(pg_url)
    row = register_campaign(engine, load_campaign(path), str(path))
    return engine, row.id or 0


def _assert_each_cell_ran_once(engine, campaign_id: int) -> None:  # type: ignore[no-untyped-def]
    for cell in q.cells(engine, campaign_id):
        attempts = q.attempts(engine, cell.id or 0)
        assert cell.state == "done", (cell.key, cell.state, cell.reason)
        ran = [a for a in attempts if a.node_json is not None]
        assert [a.outcome for a in ran] == ["done"], (cell.key, [a.outcome for a in attempts])
        # the other controller can take the machine's local-node lock between this one's offer and its
        # launch: a capacity refusal, recorded with no node (not counted towards max_attempts)
        refused = [(a.outcome, a.detail) for a in attempts if a.node_json is None]
        assert all(outcome == "launch_failed" and "another process runs a local node" in (detail or "")
                   for outcome, detail in refused), (cell.key, refused)
        assert cell.lease_owner is None, "leases are given back"


def test_second_resume_waits_for_the_cells_the_first_holds(home: Path, pg_url: str, write_campaign,
                                                           standin_python: Path) -> None:
    # the first controller holds every cell's lease as soon as it runs (and runs them one at a time:
    # local nodes); the second one waits for them and ends complete, having run none
    engine, campaign_id = _registered(pg_url, write_campaign(matrix=THREE_CELLS, steps=20, python=standin_python))
    first = _resume(home, pg_url)
    wait_for(lambda: any(a.open for a in q.campaign_attempts(engine, campaign_id)))
    status = cli_here("--db", pg_url, "status", "tiny", "--format", "json", home=home)
    holders = [c["controller"] for c in json.loads(status.stdout)["campaigns"][0]["cells"]]
    assert len(set(holders) - {None}) == 1, "status names the one controller running the cells (None: done)"
    second = _resume(home, pg_url)
    _, second_err = second.communicate(timeout=300)
    assert second.returncode == 0, second_err
    assert "waiting: controller " in second_err or "complete" in second_err, second_err  # all done already
    assert "skipped" not in second_err and "Traceback" not in second_err, second_err
    _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    _assert_each_cell_ran_once(engine, campaign_id)
    no_live_nodes(home)


def test_two_resumes_started_together_share_the_cells(home: Path, pg_url: str, write_campaign,
                                                      standin_python: Path) -> None:
    engine, campaign_id = _registered(pg_url, write_campaign(matrix=THREE_CELLS, steps=5, python=standin_python))
    procs = [_resume(home, pg_url), _resume(home, pg_url)]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs  # each waits for the cells the other one runs
    assert not any("Traceback" in e or "controller error" in e for e in errs), errs
    _assert_each_cell_ran_once(engine, campaign_id)
    no_live_nodes(home)
