"""The commands users reach for after a run: logs, offers, check; completion, "did you mean",
case-insensitive --format, JSON output and the --all confirmation of down (issue 18, items 10, 11, 13).
Each test builds the store it needs with ``benchctl.store.queries``: no campaign runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.store import queries as q
from benchctl.store.database import open_store
from tests.conftest import cli_here
from tests.fakes.runpod_fake import FakeRunPod, running_fake_runpod


def _store(home: Path) -> tuple[object, int]:
    """A campaign ``c1`` with one cell whose first attempt failed preflight and second runs."""
    home.mkdir(parents=True, exist_ok=True)
    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    camp_id, _ = q.upsert_campaign(engine, "c1", "{}", "c1.yaml", 5.0,
                                   [q.NewCell("local:cpux1:on-demand", "local", "cpu", 1, "on-demand", "{}")])
    (cell,) = q.cells(engine, camp_id)
    assert cell.id is not None
    first = q.new_attempt(engine, cell.id, "tok1", "local", "on-demand", "r/{number}", 0.5, "node-a")
    assert first.id is not None
    q.record_events(engine, first.id, [{"t": 1.0, "kind": "check", "phase": "preflight", "name": "gpu_count",
                                        "ok": False, "msg": "saw 7 GPUs\x1b]0;pwned\x07"}], 0, 10)
    q.close_attempt(engine, first.id, "bad_node", "preflight failed: gpu_count saw 7 GPUs")
    second = q.new_attempt(engine, cell.id, "tok2", "local", "on-demand", "r/{number}", 0.5, "node-b")
    assert second.id is not None
    q.record_events(engine, second.id, [{"t": 2.0, "kind": "step", "phase": "train", "step": 1}], 0, 10)
    q.set_cell_state(engine, cell.id, "pending")
    return engine, second.id


def test_logs_shows_every_attempt_with_why_and_the_last_attempts_events(home: Path) -> None:
    _store(home)
    out = cli_here("logs", "local:cpux1:on-demand", home=home)
    assert out.returncode == 0, out.stderr
    assert "attempt 1 on node-a (local, on-demand, $" in out.stdout
    assert "bad_node: preflight failed: gpu_count saw 7 GPUs" in out.stdout
    assert "attempt 2 on node-b" in out.stdout and "running" in out.stdout
    assert "events of attempt 2:" in out.stdout and re.search(r"^  00:00:02  step +train +step=1$", out.stdout, re.M)
    assert "gpu_count" not in out.stdout.split("events of attempt 2:")[1]


def test_logs_attempt_n_shows_that_attempts_events_cleaned(home: Path) -> None:
    _store(home)
    out = cli_here("logs", "local:cpux1:on-demand", "--attempt", "1", "--campaign", "c1", home=home)
    assert out.returncode == 0, out.stderr
    events = out.stdout.split("events of attempt 1:")[1]
    assert re.search(r"check +preflight +name=gpu_count", events) and "ok=false" in events
    assert "saw 7 GPUs" in events and "\x1b" not in out.stdout and "\x07" not in out.stdout


def test_logs_bad_input_is_one_line_exit_2(home: Path) -> None:
    _store(home)
    for args, says in ((("nope",), "no cell 'nope'"),
                       (("local:cpux1:on-demand", "--attempt", "9"), "has no attempt 9"),
                       (("local:cpux1:on-demand", "--campaign", "c2"), "in campaign 'c2'")):
        out = cli_here("logs", *args, home=home)
        assert out.returncode == 2 and says in out.stderr, out.stderr
        assert "Traceback" not in out.stderr


def test_logs_follow_prints_new_events_until_the_attempt_closes(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                                ) -> None:
    engine, running = _store(home)
    polls = []

    def controller_writes(_: float) -> None:  # stands in for the controller between two polls
        polls.append(1)
        q.record_events(engine, running, [{"t": 3.0, "kind": "step", "phase": "train", "step": 2}], 10, 20)  # type: ignore[arg-type]
        q.close_attempt(engine, running, "done")  # type: ignore[arg-type]

    monkeypatch.setattr("benchctl.cli.logs.time.sleep", controller_writes)
    out = cli_here("logs", "local:cpux1:on-demand", "-f", home=home)
    assert out.returncode == 0, out.stderr
    assert polls == [1]
    assert out.stdout.count("step=1") == 1 and "step=2" in out.stdout
    assert out.stdout.rstrip().splitlines()[-1].endswith(": done")


def test_status_shows_why_the_last_attempt_failed(home: Path) -> None:
    engine, running = _store(home)
    q.close_attempt(engine, running, "error", "payload exited 1: CUDA out of memory")  # type: ignore[arg-type]
    table = cli_here("status", home=home)
    assert "attempt 2 error: payload exited 1: CUDA out of memory" in table.stdout
    cells = json.loads(cli_here("status", "--format", "JSON", home=home).stdout)["campaigns"][0]["cells"]
    assert cells[0]["reason"] == "attempt 2 error: payload exited 1: CUDA out of memory"


@pytest.fixture
def fake_runpod_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunPod]:
    """RunPod's API on loopback (as in tests/provisioners/conftest.py); the other clouds without keys."""
    for var in ("VAST_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # no ~/.aws, ~/.vast_api_key, ~/.runpod of the machine's
    server = FakeRunPod("rp-key", ssh_port=22, authorized_keys=tmp_path / "authorized_keys",
                        workdir=tmp_path / "pods", boot_s=0.0)
    with running_fake_runpod(server) as url:
        monkeypatch.setenv("RUNPOD_API_BASE_URL", url)
        monkeypatch.setenv("RUNPOD_API_KEY", "rp-key")
        yield server


def test_offers_lists_runpod_prices_and_skips_providers_without_credentials(home: Path,
                                                                          fake_runpod_api: FakeRunPod) -> None:
    out = cli_here("offers", "--gpu", "H100_SXM", "--count", "8", "--market", "On-Demand", "--format", "JSON",
                   home=home)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    runpod = [r for r in report["offers"] if r["provider"] == "runpod"]
    # the fake's H100 80GB HBM3 secure-cloud price per GPU (2.99; RunPodSettings' default cloud), times 8
    assert [(r["region"], r["hourly_usd"]) for r in runpod] == [("secure", pytest.approx(23.92))]
    assert all(r["count"] == 8 and r["market"] == "on-demand" for r in runpod)
    # local has no H100 here: an empty answer is no answer (issue 29 item 7)
    assert "runpod" in report["answered"] and "local" not in report["answered"]
    skipped = "\n".join(report["skipped"])
    assert "vastai: skipped: no API key: set VAST_API_KEY" in skipped and "aws: skipped: no credentials" in skipped
    assert "skypilot: skipped: pass --cloud" in skipped


def test_offers_a_provider_error_is_one_line(home: Path, fake_runpod_api: FakeRunPod,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNPOD_API_KEY", "wrong-key")
    out = cli_here("offers", "--provider", "runpod", home=home)
    assert out.returncode == 1, out.stdout
    lines = [line for line in out.stderr.splitlines() if line.startswith("runpod:")]
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "no provider answered" in out.stderr
    bad = cli_here("offers", "--provider", "nimbus", home=home)
    assert bad.returncode == 2 and "unknown provider 'nimbus'" in bad.stderr


def test_offers_without_credentials_lists_catalog_prices_not_offers(home: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """No Vast key, no network: the committed snapshot prices the node, marked catalog with its
    source and date, and one line says which key makes it a live offer (exit 0, not 'no answer')."""
    for var in ("VAST_API_KEY", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(tmp_path / "no-sky"))
    out = cli_here("offers", "--provider", "vastai", "--count", "8", "--market", "on-demand", home=home)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("vastai ")]
    assert rows == [["vastai", "H100_SXM", "8", "on-demand", "-", "-", "16", "catalog", "-"]]
    assert "catalog price (not an offer): snapshot: skypilot-catalog vast/vms.csv@01b8cdda, as of 2026-11-26" \
        in out.stdout
    assert out.stderr.strip().splitlines()[-1] == ("catalog prices are list prices, not offers; for live offers set "
                                                   "VAST_API_KEY (vastai)")
    spot = cli_here("offers", "--provider", "vastai", "--count", "8", "--market", "spot", "--format", "json",
                    home=home)
    assert spot.returncode == 1 and json.loads(spot.stdout)["offers"] == [], "the list has no spot price: none shown"


def test_offers_local_answers_without_a_price(home: Path) -> None:
    out = cli_here("offers", "--provider", "LOCAL", "--gpu", "cpu", "--market", "spot", home=home)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("local ")]
    assert rows and all(r[1:4] == ["cpu", "1", "spot"] and r[6] == "-" for r in rows)


def test_check_says_which_credentials_work(home: Path, fake_runpod_api: FakeRunPod,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    out = cli_here("check", "--format", "json", home=home)
    assert out.returncode == 0, out.stderr
    status = {r["provider"]: r for r in json.loads(out.stdout)["providers"]}
    assert status["runpod"]["ok"] is True and status["local"]["ok"] is True
    assert status["vastai"]["ok"] is False and "VAST_API_KEY" in status["vastai"]["detail"]
    assert status["skypilot"]["ok"] is None and "sky check" in status["skypilot"]["detail"]
    monkeypatch.setenv("RUNPOD_API_KEY", "wrong-key")  # the key is there, the API refuses it
    refused = cli_here("check", "runpod", home=home)
    assert refused.returncode == 1 and refused.stdout.startswith("runpod    no  ")
    assert len(refused.stdout.splitlines()) == 1 and "Traceback" not in refused.stderr
    none = cli_here("check", home=home)
    assert none.returncode == 1 and "no provider that rents nodes works" in none.stderr


def test_bash_completion_script_is_produced_and_completes_commands(home: Path) -> None:
    # the real console script: completion is read from the environment before any command runs
    benchctl = str(Path(sys.executable).with_name("benchctl"))
    env = {**os.environ, "BENCHCTL_HOME": str(home), "_BENCHCTL_COMPLETE": "bash_source"}
    script = subprocess.run([benchctl], capture_output=True, text=True, env=env, timeout=60)
    assert script.returncode == 0 and "_benchctl_completion()" in script.stdout
    assert "complete -o nosort -F _benchctl_completion benchctl" in script.stdout
    env.update({"_BENCHCTL_COMPLETE": "bash_complete", "COMP_WORDS": "benchctl lo", "COMP_CWORD": "1"})
    completed = subprocess.run([benchctl], capture_output=True, text=True, env=env, timeout=60)
    assert completed.stdout.split() == ["plain,logs"]


def test_a_mistyped_command_gets_did_you_mean(home: Path) -> None:
    out = cli_here("leaderbord", home=home)
    assert out.returncode == 2 and "Did you mean 'leaderboard'?" in out.stderr
    assert "Did you mean" not in cli_here("xyzzy", home=home).stderr


def test_an_unknown_campaign_key_gets_did_you_mean(tmp_path: Path) -> None:
    from benchctl.campaign.spec import parse_campaign
    from benchctl.errors import SpecError
    from tests.conftest import TINY_CAMPAIGN, TWO_LOCAL_CELLS

    text = TINY_CAMPAIGN.format(name="t", matrix=TWO_LOCAL_CELLS, steps=3, max_attempts=2)
    for right, wrong, where in (("budget_usd:", "budjet_usd:", "budjet_usd"),
                                ("max_attempts:", "max_attemps:", "defaults.max_attemps"),
                                ("provider:", "provder:", "matrix[0].provder"),
                                ("budget_usd:", "providers: {runpod: {clod: ALL}}\nbudget_usd:",
                                 "providers.runpod.clod")):
        with pytest.raises(SpecError) as err:
            parse_campaign(text.replace(right, wrong, 1), "c.yaml")
        suggested = right.rstrip(":") if "clod" not in wrong else "cloud"
        assert f"{where}: unknown key (did you mean {suggested!r}?)" in str(err.value), str(err.value)
    with pytest.raises(SpecError) as err:
        parse_campaign(text.replace("budget_usd:", "zzz: 1\nbudget_usd:", 1), "c.yaml")
    assert "zzz: unknown key; remove it" in str(err.value)


def test_format_takes_any_case_everywhere(home: Path) -> None:
    for args in (("status", "--format", "JSON"), ("leaderboard", "--format", "Json"), ("check", "local", "--format",
                 "JSON")):
        out = cli_here(*args, home=home)
        assert out.returncode == 0, (args, out.stderr)
        json.loads(out.stdout)
    market = cli_here("leaderboard", "--market", "SPOT", "--format", "json", home=home)
    assert "invalid value" not in market.stderr.lower() and "no results match --market spot" in market.stderr


def test_import_json_output(home: Path, tmp_path: Path) -> None:
    rows = tmp_path / "rows.yaml"
    rows.write_text("- {provider: lambda, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 23.92, "
                    "step_time_ms: 702, target: {model: nanochat-d26, target_param_data_ratio: 8.5, "
                    "total_batch_size: 524288}}\n")
    out = cli_here("import", str(rows), "--campaign", "published", "--format", "json", home=home)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"campaign": "published", "results": 1, "skipped": 0, "collectives": 0,
                                      "logs_read_as": [], "left_out": None}


def _runnable_campaign(home: Path, name: str) -> int:
    """A stored local campaign benchctl could run (its spec parses), with one open attempt."""
    from benchctl.campaign.spec import parse_campaign
    from tests.conftest import TINY_CAMPAIGN, TWO_LOCAL_CELLS

    home.mkdir(parents=True, exist_ok=True)
    engine = open_store(f"sqlite:///{home / 'benchctl.db'}")
    campaign = parse_campaign(TINY_CAMPAIGN.format(name=name, matrix=TWO_LOCAL_CELLS, steps=3, max_attempts=2),
                              f"{name}.yaml")
    camp_id, _ = q.upsert_campaign(engine, name, campaign.model_dump_json(), f"{name}.yaml", 5.0,
                                   [q.NewCell(c.key, c.provider, c.gpu or "cpu", c.world_size, c.market, "{}")
                                    for c in campaign.cells])
    first = q.cells(engine, camp_id)[0]
    assert first.id is not None
    q.set_cell_state(engine, first.id, "running")
    q.new_attempt(engine, first.id, f"tok-{name}", "local", "on-demand", "r/{number}", 0.5, "local-0")
    return camp_id


def test_down_all_refuses_without_a_terminal_unless_yes(home: Path) -> None:
    _runnable_campaign(home, "alpha")
    _runnable_campaign(home, "beta")
    refused = cli_here("down", "--all", home=home)
    assert refused.returncode == 2 and "pass --yes" in refused.stderr and "alpha, beta" in refused.stderr
    status = json.loads(cli_here("status", "--format", "json", home=home).stdout)
    assert [c["cells"][0]["state"] for c in status["campaigns"]] == ["running", "running"], "nothing stopped"
    done = cli_here("down", "--all", "--yes", "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["campaigns"]
    assert [(c["name"], c["closed_attempts"], c["cancelled_cells"]) for c in report] == [("alpha", 1, 2),
                                                                                        ("beta", 1, 2)]


def test_down_all_asks_on_a_terminal(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from benchctl.cli.main import cli

    _runnable_campaign(home, "alpha")
    monkeypatch.setattr("benchctl.cli.down._stdin_is_terminal", lambda: True)
    declined = CliRunner().invoke(cli, ["down", "--all"], input="n\n")
    assert declined.exit_code == 1 and "stop 1 campaign(s): alpha?" in declined.output
    assert "nothing stopped" in declined.output
    status = json.loads(cli_here("status", "--format", "json", home=home).stdout)
    assert status["campaigns"][0]["cells"][0]["state"] == "running"


def test_logs_shows_the_end_of_the_payload_log_brought_home(home: Path) -> None:
    _store(home)
    attempt_dir = home / "artifacts" / "c1" / "local:cpux1:on-demand" / "1"
    attempt_dir.mkdir(parents=True)
    (attempt_dir / "payload.log").write_text("".join(f"line {i}\n" for i in range(100)) +
                                             "RuntimeError: CUDA error\x1b[2J\n")
    out = cli_here("logs", "local:cpux1:on-demand", "--attempt", "1", "--lines", "3", home=home)
    assert out.returncode == 0, out.stderr
    tail = out.stdout.split("payload.log:")[1].split()
    assert tail == ["line", "98", "line", "99", "RuntimeError:", "CUDA", "error"]
    assert "payload.log" not in cli_here("logs", "local:cpux1:on-demand", home=home).stdout  # attempt 2 has none
