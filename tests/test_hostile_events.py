"""A node that writes garbage where the controller reads (events.jsonl, exit_code), and cells whose
names make paths too long: the node is terminated, the attempt closed, the garbage recorded as
error events, and `benchctl resume` works afterwards. Real CLI, real local nodes; the "node" is
the campaign's own command phase, which runs in the attempt's directory."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchctl.engine.attempt_driver import AttemptDriver
from benchctl.engine.event_sync import MAX_LINE_BYTES
from benchctl.engine.run_context import Outcome, OutcomeKind
from benchctl.provisioners.base import Node, Offer
from benchctl.store import queries as q
from benchctl.store.database import open_store
from tests.conftest import cli_here, run_cli
from tests.local_campaign import home_store, no_live_nodes, only_cell, start, wait_for

CAMPAIGN = """\
name: hostile
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 2}}
payload:
  phases: [command]
  command: {{run: {run}}}
matrix:
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5{extra}}}
"""
FAST = ("--poll-interval", "0.1", "--status-interval", "0.3")
FIRST_ATTEMPT = '[ "$(basename "$PWD")" = 1 ]'
"""True in the command of the cell's first attempt only (its directory is named by the attempt number)."""

HOSTILE_LINES = [
    b'{"t": "not-a-time", "kind": "sample", "phase": "profile"}',
    b"not json \x1b[2J\x1b]0;owned\x07",
    b"[1, 2, 3]",
    b'{"t": NaN, "kind": "error", "message": "x"}',
    b'{"t": 1e999, "kind": "error", "message": "x"}',
    b'{"t": ' + b"9" * 400 + b', "kind": "error", "message": "x"}',
    b'{"t": true, "kind": "error", "message": "x"}',
    b'{"t": 1, "kind": "no-such-kind"}',
    b'{"t": 1, "kind": "sample", "phase": {"x": 1}}',
    b'{"t": 1, "kind": "sample", "phase": "profile", "timed_index": "zero", "step_time_s": 0.1, "warmup": false}',
    b'{"t": 1, "kind": "sample", "phase": "profile", "timed_index": 0, "step_time_s": "fast", "warmup": false}',
    b'{"t": 1, "kind": "artifact", "name": "x", "path": 7}',
    b'{"t": 1, "kind": "artifact", "name": "x", "path": "a\\u0000b"}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"t": 1, "kind": "error", "message": "' + b"a" * (MAX_LINE_BYTES + 10) + b'"}',
    b"\xff\xfe not utf-8",
]


def _campaign(tmp_path: Path, run: str, extra: str = "") -> Path:
    path = tmp_path / "hostile.yaml"
    path.write_text(CAMPAIGN.format(run=json.dumps(run), extra=extra))
    return path


def _malformed(engine, cell_id: int) -> list[str]:  # type: ignore[no-untyped-def]
    errors = [json.loads(e.data_json) for e in q.events(engine, cell_id, kind="error")]
    return [e["message"] for e in errors if e.get("malformed_event")]


def _all_closed(engine, cell_id: int) -> list[str | None]:  # type: ignore[no-untyped-def]
    attempts = q.attempts(engine, cell_id)
    assert attempts and not any(a.open for a in attempts), "every attempt is closed"
    assert all(a.terminated_at is not None and a.cost_usd is not None for a in attempts)
    return [a.outcome for a in attempts]


@pytest.mark.slow
def test_malformed_event_lines_become_error_events_and_the_cell_finishes(home: Path, tmp_path: Path) -> None:
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_bytes(b"".join(line + b"\n" for line in HOSTILE_LINES))
    result = run_cli("run", str(_campaign(tmp_path, f"cat {hostile} >> events.jsonl")), *FAST, home=home)
    assert result.returncode == 0, result.stderr
    engine, cell = only_cell(home)
    assert cell.state == "done", cell.reason
    assert _all_closed(engine, cell.id or 0) == ["done"]
    messages = _malformed(engine, cell.id or 0)
    assert len(messages) == len(HOSTILE_LINES), messages
    assert "'t' is not a finite number" in messages[0] and "not-a-time" in messages[0]
    assert "not JSON" in messages[1] and "\x1b" not in messages[1] and "\\x1b[2J" in messages[1], "quoted, escaped"
    assert "not an object" in messages[2]
    assert "'kind' is not one of" in messages[7] and "'phase' is not a string" in messages[8]
    assert "'timed_index'" in messages[9] and "'step_time_s'" in messages[10] and "'path'" in messages[11]
    assert f"longer than {MAX_LINE_BYTES} bytes" in messages[14] and len(messages[14]) < 400, "truncated"
    assert all(len(m) < 400 for m in messages)
    assert q.events(engine, cell.id or 0, kind="phase_end"), "the honest events around them are stored too"
    no_live_nodes(home)
    assert cli_here("resume", home=home).returncode == 0


@pytest.mark.slow
def test_an_exit_code_that_is_no_number_is_an_attempt_error_and_the_cell_retries(home: Path, tmp_path: Path) -> None:
    run = f"{FIRST_ATTEMPT} && {{ printf 'x1b; rm -rf /\\n' > exit_code; sleep 30; }}; true"
    result = run_cli("run", str(_campaign(tmp_path, run)), *FAST, home=home)
    assert result.returncode == 0, result.stderr
    engine, cell = only_cell(home)
    assert cell.state == "done", cell.reason
    assert _all_closed(engine, cell.id or 0) == ["error", "done"], "retried like any failed attempt"
    first = q.attempts(engine, cell.id or 0)[0]
    assert first.detail is not None and "not an exit status" in first.detail, first.detail
    no_live_nodes(home)


@pytest.mark.slow
def test_events_file_replaced_by_a_directory_ends_the_attempt_not_the_controller(home: Path, tmp_path: Path) -> None:
    run = f"{FIRST_ATTEMPT} && {{ rm events.jsonl; mkdir events.jsonl; sleep 30; }}; true"
    result = run_cli("run", str(_campaign(tmp_path, run)), *FAST, home=home)
    assert result.returncode == 0, result.stderr
    engine, cell = only_cell(home)
    assert cell.state == "done", cell.reason
    assert _all_closed(engine, cell.id or 0) == ["error", "done"]
    no_live_nodes(home)


@pytest.mark.slow
def test_a_long_env_value_makes_no_path_too_long(home: Path, tmp_path: Path) -> None:
    value = "v" * 300  # the cell's key holds it: a 300-byte directory name would be refused by the file system
    result = run_cli("run", str(_campaign(tmp_path, "true", extra=f", env: {{KNOB: {value}}}")), *FAST, home=home)
    assert result.returncode == 0, result.stderr
    engine, cell = only_cell(home)
    assert cell.state == "done", cell.reason
    assert value in cell.key
    assert _all_closed(engine, cell.id or 0) == ["done"]
    (attempt,) = q.attempts(engine, cell.id or 0)
    assert all(len(part.encode()) <= 120 for part in attempt.remote_dir.split("/"))
    (collected,) = (home / "artifacts" / "hostile").iterdir()
    assert (collected / "1" / "events.jsonl").is_file(), "the artifacts came home under the short name"
    no_live_nodes(home)


@pytest.mark.slow
def test_resume_reattaches_past_a_malformed_line(home: Path, tmp_path: Path) -> None:
    proc = start(home, "run", str(_campaign(tmp_path, "sleep 3")), *FAST)

    def command_started() -> bool:
        if not (home / "benchctl.db").exists():
            return False
        engine = home_store(home)
        return any(q.events(engine, c.id or 0, kind="phase_start", phase="command")
                   for campaign in q.campaigns(engine) for c in q.cells(engine, campaign.id or 0))

    wait_for(command_started, timeout=30)
    proc.send_signal(signal.SIGKILL)  # the controller dies; the node runs on
    proc.wait()
    engine, cell = only_cell(home)
    (attempt,) = q.attempts(engine, cell.id or 0)
    events = home / "nodes" / attempt.token / "home" / attempt.remote_dir / "events.jsonl"
    with events.open("ab") as handle:
        handle.write(b'{"t": "not-a-time"}\n')
    resumed = run_cli("resume", *FAST, home=home)
    assert resumed.returncode == 0, resumed.stderr
    engine, cell = only_cell(home)
    assert cell.state == "done", cell.reason
    assert _all_closed(engine, cell.id or 0) == ["done"], "re-attached to the same attempt, which finished"
    assert len(_malformed(engine, cell.id or 0)) == 1
    no_live_nodes(home)


def test_whatever_fails_at_the_end_the_node_is_terminated_and_the_attempt_closed(tmp_path: Path) -> None:
    engine = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    cell = q.NewCell(key="k", provider="local", gpu="cpu", count=1, market="on-demand", config_json="{}")
    campaign_id, _ = q.upsert_campaign(engine, "c", "{}", "/tmp/c.yaml", 10.0, [cell])
    (row,) = q.cells(engine, campaign_id)
    attempt = q.new_attempt(engine, row.id or 0, token="tok", provider="local", market="on-demand", remote_dir="x",
                            hourly_usd=1.0, host="h")
    terminated: list[Node] = []

    class Failing:  # every call the end of an attempt makes fails, each its own way
        def transport(self, node: Node) -> None:
            raise OSError(36, "File name too long")

        def terminate(self, node: Node) -> None:
            terminated.append(node)
            raise RuntimeError("the provider's answer changed shape")

        def ended_at(self, node: Node) -> float:
            raise KeyError("terminated_at")

    logs: list[str] = []
    ctx = SimpleNamespace(engine=engine, log=logs.append)
    driver = AttemptDriver(ctx, row.id or 0, "k", None, Failing(), lambda state: None, lambda: None)
    offer = Offer(provider="local", offer_id="o", gpu="cpu", count=1, vcpus=1, region="r", hourly_usd=1.0, market="m")
    node = Node(provider="local", node_id="n", token="tok", campaign_tag="c", offer=offer)
    driver.end(attempt, node, Outcome(OutcomeKind.ERROR, "payload exit 1"))
    assert terminated == [node], "terminate ran although the last sync raised"
    (closed,) = q.attempts(engine, row.id or 0)
    assert not closed.open and closed.outcome == "error" and closed.terminated_at is not None
    assert (closed.detail or "").startswith("payload exit 1; the last read of its events failed: OSError")
    assert "terminating its node failed: RuntimeError" in (closed.detail or "")
    assert len(logs) == 3, logs
