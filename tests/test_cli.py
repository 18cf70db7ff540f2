"""The CLI end to end: run, run again, resume, status, leaderboard in every format, --db."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FAST_POLLS, REPO, TINY_CAMPAIGN, TWO_LOCAL_CELLS, cli_here, copy_home, run_cli, run_once

LEADERBOARD_KEYS = ["rank", "campaign", "cell", "provider", "gpu", "count", "nodes", "interconnect", "vcpus", "numa",
                    "market", "env", "model", "precision", "compiled", "attention", "host_data", "hourly_usd",
                    "step_time_ms", "step_time_p10_ms", "step_time_p90_ms", "timed_steps", "drift", "settle_steps",
                    "settle_s", "optimizer_ms", "optimizer_share",
                    "comm_share", "busbw_gbps", "busbw_bytes", "target_steps", "train_hours", "cost_to_train_usd",
                    "spot_usd_per_hour", "on_demand_usd_per_hour", "cost_spot_usd", "cost_on_demand_usd", "flags",
                    "status", "no_result"]


@pytest.fixture
def finished(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny two-cell campaign, run once per test run; each test gets its own copy of the store."""
    shared_home, path, output = run_once(tmp_path_factory, "tiny", TINY_CAMPAIGN.format(
        name="tiny", matrix=TWO_LOCAL_CELLS, steps=3, max_attempts=2))
    assert output.startswith("exit 0\n"), output
    assert "cost-to-train" in output and "local:cpux2:on-demand" in output
    copy_home(shared_home, home)
    return path


@pytest.mark.slow
def test_second_run_reruns_nothing(home: Path, finished: Path) -> None:
    before = json.loads(cli_here("status", "--format", "json", home=home).stdout)
    again = run_cli("run", str(finished), home=home)
    assert again.returncode == 0, again.stderr
    assert "campaign tiny is complete" in again.stdout
    after = json.loads(cli_here("status", "--format", "json", home=home).stdout)
    assert after == before, "no attempt, no spend, no state change"
    assert [c["attempts"] for c in after["campaigns"][0]["cells"]] == [1, 1]


@pytest.mark.slow
def test_status_json_shape(home: Path, finished: Path) -> None:
    status = json.loads(cli_here("status", "--format", "json", home=home).stdout)
    (campaign,) = status["campaigns"]
    assert campaign["name"] == "tiny"
    assert campaign["spent_usd"] > 0 and campaign["remaining_usd"] == pytest.approx(5 - campaign["spent_usd"])
    assert [(c["key"], c["state"], c["attempts"]) for c in campaign["cells"]] == [
        ("local:cpux1:on-demand", "done", 1), ("local:cpux2:on-demand", "done", 1)]


def test_status_and_resume_on_an_empty_store(home: Path) -> None:
    assert json.loads(cli_here("status", "--format", "json", home=home).stdout) == {"campaigns": []}
    resumed = cli_here("resume", home=home)
    assert resumed.returncode == 0 and "nothing to resume" in resumed.stdout
    missing = cli_here("resume", "nope", home=home)
    assert missing.returncode == 2 and "no campaign named 'nope'" in missing.stderr
    assert "Traceback" not in missing.stderr


@pytest.mark.slow
def test_leaderboard_json_is_sorted_and_its_arithmetic_checks_out(home: Path, finished: Path) -> None:
    rows = json.loads(cli_here("leaderboard", "--format", "json", home=home).stdout)
    assert [list(r) for r in rows] == [LEADERBOARD_KEYS] * 2
    assert [r["cost_to_train_usd"] for r in rows] == sorted(r["cost_to_train_usd"] for r in rows)
    prices = {"local:cpux1:on-demand": 0.5, "local:cpux2:on-demand": 1.0}
    for row in rows:
        # nanochat-d1, vocab 512: dim 128; 12·128² block matrices + one ve_gate (1×32) + 512·128 lm_head
        assert row["target_steps"] == int(8.5 * (12 * 128**2 + 32 + 512 * 128) // 128) == 17_410
        assert row["hourly_usd"] == prices[row["cell"]]
        assert row["step_time_p10_ms"] <= row["step_time_ms"] <= row["step_time_p90_ms"]
        assert row["train_hours"] == pytest.approx(row["step_time_ms"] / 1000 * row["target_steps"] / 3600)
        assert row["cost_to_train_usd"] == pytest.approx(row["train_hours"] * row["hourly_usd"])
        assert row["status"] == "done"
        # the evidence beside the number: preflight's facts and the step's split (no collectives phase here)
        assert row["model"] == "nanochat-d1" and row["vcpus"] == os.cpu_count()
        assert row["numa"].endswith(("node", "nodes"))
        assert 0 < row["comm_share"] <= row["optimizer_share"] < 1
        assert row["optimizer_ms"] == pytest.approx(row["optimizer_share"] * row["step_time_ms"], rel=0.5)
        assert row["busbw_gbps"] is None and row["interconnect"] is None
        assert (row["precision"], row["compiled"], row["attention"]) == ("f32", False, "sdpa")  # how it computed


@pytest.mark.slow
def test_leaderboard_csv_md_table_and_filter(home: Path, finished: Path) -> None:
    parsed = list(csv.DictReader(io.StringIO(cli_here("leaderboard", "--format", "csv", home=home).stdout)))
    assert len(parsed) == 2 and list(parsed[0]) == LEADERBOARD_KEYS
    md = cli_here("leaderboard", "--format", "md", home=home).stdout.splitlines()
    assert md[0] == "| rank | model | configuration | provider | market | step ms | cost-to-train $ | flags |"
    assert md[1] == "|---|---|---|---|---|---|---|---|"
    assert len(md) == 4
    table = cli_here("leaderboard", home=home).stdout
    assert "rank" in table and "cost-to-train $" in table and "\x1b[" not in table, "plain text when piped"
    only = cli_here("leaderboard", "--campaign", "tiny", "--format", "json", home=home)
    assert [r["campaign"] for r in json.loads(only.stdout)] == ["tiny", "tiny"]


@pytest.mark.slow
def test_run_on_postgresql_with_db_option(home: Path, write_campaign, pg_url: str, standin_python: Path) -> None:
    matrix = "  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}\n"
    path = write_campaign(matrix=matrix, python=standin_python)
    result = run_cli("--db", pg_url, "run", str(path), *FAST_POLLS, home=home)
    assert result.returncode == 0, result.stderr
    assert not (home / "benchctl.db").exists(), "everything went to PostgreSQL"
    rows = json.loads(run_cli("--db", pg_url, "leaderboard", "--format", "json", home=home).stdout)
    assert [(r["cell"], r["status"]) for r in rows] == [("local:cpux1:on-demand", "done")]
    via_env = run_cli("status", "--format", "json", home=home, env={"BENCHCTL_DB": pg_url})
    assert json.loads(via_env.stdout)["campaigns"][0]["cells"][0]["state"] == "done"


def test_unreachable_database_is_a_clear_error(home: Path, write_campaign) -> None:
    result = cli_here("--db", "postgresql://postgres@127.0.0.1:1/test", "status", home=home)
    assert result.returncode == 1
    assert "cannot open the database" in result.stderr and "Traceback" not in result.stderr
    debug = run_cli("--debug", "--db", "postgresql://postgres@127.0.0.1:1/test", "status", home=home)
    assert "Traceback" in debug.stderr


def test_start_up_path_imports_no_heavy_module() -> None:
    code = ("import sys, benchctl.cli.main as m; "
            "print(sorted(x for x in ('torch', 'sqlalchemy', 'sqlmodel', 'pydantic', 'rich', 'yaml', 'boto3') "
            "if x in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"
    help_out = subprocess.run([sys.executable, "-m", "benchctl", "--help"], capture_output=True, text=True, cwd=REPO)
    assert help_out.returncode == 0
    for command in ("run", "resume", "status", "leaderboard"):
        assert command in help_out.stdout


def test_bad_database_arguments(home: Path, tmp_path: Path) -> None:
    for url in ("foo", "nosuchdialect://x/y"):
        result = cli_here("--db", url, "status", home=home)
        assert result.returncode == 2 and "cannot use database URL" in result.stderr, result.stderr
    blocked = tmp_path / "file"
    blocked.write_text("")
    result = cli_here("--db", f"sqlite:///{blocked}/x.db", "status", home=home)
    assert result.returncode == 1 and "cannot create the folder" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_leaderboard_of_an_unknown_campaign(home: Path, finished: Path) -> None:
    result = cli_here("leaderboard", "--campaign", "nope", home=home)
    assert result.returncode == 2 and "no results match --campaign nope; known: tiny" in result.stderr


@pytest.mark.slow
def test_the_quick_start_campaign_runs_end_to_end(home: Path) -> None:
    from benchctl.store import queries as q
    from benchctl.store.database import open_store

    result = run_cli("run", str(REPO / "campaigns" / "local-smoke.yaml"), home=home)
    assert result.returncode == 0, result.stderr
    # not a terminal: progress is plain timestamped lines on stderr, no live table (tests/test_progress.py has it)
    for stream in (result.stdout, result.stderr):
        assert "\x1b" not in stream and not set("│┃━─┏┓┗┛") & set(stream)
    for key in ("local:cpux1:on-demand", "local:cpux2:on-demand"):
        for state in ("provisioning", "preflight", "running", "collecting", "done"):
            assert re.search(rf"^\d\d:\d\d:\d\d {re.escape(key)}: {state}$", result.stderr, re.M), (key, state)
    assert "last event" not in result.stderr
    rows = json.loads(cli_here("leaderboard", "--format", "json", home=home).stdout)
    assert [(r["cell"], r["status"]) for r in sorted(rows, key=lambda r: r["cell"])] == [
        ("local:cpux1:on-demand", "done"), ("local:cpux2:on-demand", "done")]
    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    (campaign,) = q.campaigns(engine)
    for cell in q.cells(engine, campaign.id or 0):
        collectives = q.events(engine, cell.id or 0, kind="sample", phase="collectives")
        # 6 sizes (8 B … 256 KiB, ×8) × (all_reduce in place + all_gather and reduce_scatter both ways)
        assert len(collectives) == 6 * 5
        assert all(json.loads(e.data_json)["wrong"] == 0 for e in collectives)
        profile = q.events(engine, cell.id or 0, kind="sample", phase="profile")
        assert len(profile) == 10
        artifacts = {a.name for a in q_artifacts(engine, cell.id or 0)}
        assert {"preflight.json", "collectives.txt"} <= artifacts


def q_artifacts(engine, cell_id: int):  # type: ignore[no-untyped-def]
    from sqlmodel import Session, select

    from benchctl.store.models import Artifact

    with Session(engine) as s:
        return list(s.exec(select(Artifact).where(Artifact.cell_id == cell_id)))
