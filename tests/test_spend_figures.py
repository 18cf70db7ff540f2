"""``plan`` and ``run``'s confirmation print the same spend figures; a provider that cannot be
asked or does not answer is one line (never a traceback, never a $0 worst case)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.store import queries as q
from tests.conftest import TINY_CAMPAIGN, cli_here, run_cli
from tests.fakes.runpod_fake import FakeRunPod, running_fake_runpod
from tests.local_campaign import home_store

PRICED = """\
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 2}
  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 3}
"""
WITH_RUNPOD = """\
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.01}
  - {provider: runpod, gpu: H100_SXM, count: 1, market: on-demand}
  - {provider: runpod, gpu: H100_PCIE, count: 1, market: on-demand}
"""


def _campaign(tmp_path: Path, matrix: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(TINY_CAMPAIGN.format(name="c", matrix=matrix, steps=3, max_attempts=2))
    return path


def _nothing_written(home: Path) -> bool:
    return not (home / "benchctl.db").exists() or q.campaigns(home_store(home)) == []


@pytest.fixture
def runpod_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunPod]:
    """RunPod's API refuses every call (401 after the offline key check passed)."""
    fake = FakeRunPod("rp", ssh_port=22, authorized_keys=tmp_path / "keys", workdir=tmp_path / "w")
    fake.faults = ["401"] * 50
    with running_fake_runpod(fake) as url:
        monkeypatch.setenv("RUNPOD_API_BASE_URL", url)
        monkeypatch.setenv("RUNPOD_API_KEY", "rp")
        yield fake


def test_plan_and_run_print_the_same_worst_case_and_run_shows_the_cells(home: Path, tmp_path: Path) -> None:
    path = _campaign(tmp_path, PRICED)
    plan = cli_here("plan", str(path), home=home)
    assert plan.returncode == 0, plan.stderr
    (spend,) = [line for line in plan.stdout.splitlines() if line.startswith("worst case $")]
    assert "over budget_usd $5.00, which caps the spend at $5.00" in spend
    run = cli_here("run", str(path), "--confirm-above", "1", home=home)
    assert run.returncode == 2, run.stderr
    assert f"campaign c: {spend}" in run.stderr, "run's figure is plan's"
    lines = run.stderr.splitlines()
    header = next(i for i, line in enumerate(lines) if "$/hr" in line)
    assert "expected" in lines[header] and "worst" in lines[header]
    assert "local:cpux1:on-demand  " in lines[header + 1] and "$2.00" in lines[header + 1]
    assert "local:cpux2:on-demand  " in lines[header + 2] and "$3.00" in lines[header + 2]
    assert "up to $5.00 may be spent, above $1.00: pass --yes" in run.stderr
    assert _nothing_written(home)


def test_plan_with_a_provider_down_is_one_line_unknown_spend_and_exit_1(home: Path, tmp_path: Path,
                                                                          runpod_down: FakeRunPod) -> None:
    result = cli_here("plan", str(_campaign(tmp_path, WITH_RUNPOD)), home=home)
    assert result.returncode == 1, (result.stdout, result.stderr)
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: runpod: offers failed: ") and "401" in line
    assert result.stdout.count("offers failed (below); not an offer") == 2, "priced from the catalog instead"
    assert "catalog price (not an offer): snapshot: skypilot-catalog runpod/vms.csv" in result.stdout
    assert "worst case $0.00" not in result.stdout


def test_run_with_a_provider_down_is_one_line_exit_1(home: Path, tmp_path: Path, runpod_down: FakeRunPod) -> None:
    result = cli_here("run", str(_campaign(tmp_path, WITH_RUNPOD)), "--yes", home=home)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: runpod: offers failed: ")
    assert _nothing_written(home)


def test_plan_without_credentials_shows_every_cell_with_what_it_needs(home: Path, tmp_path: Path) -> None:
    """A cell no catalog lists (RunPod A100 SXM here) says what its provider needs, has an unknown
    worst case, and keeps plan's exit 2; its neighbour that a catalog lists is priced from it."""
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config"), "RUNPOD_API_KEY": "",
           "SKY_RUNTIME_DIR": str(tmp_path / "no-sky")}
    path = _campaign(tmp_path, "  - {provider: runpod, gpu: [H100_SXM, A100_SXM], count: 1, market: on-demand}\n")
    result = run_cli("plan", str(path), "--format", "json", home=home, env=env)
    assert result.returncode == 2, result.stderr
    import json

    plan = json.loads(result.stdout)
    rows = {r["cell"]: r for r in plan["cells"]}
    assert rows["runpod:A100_SXMx1:on-demand"]["warning"].startswith("needs no API key: set RUNPOD_API_KEY")
    assert rows["runpod:A100_SXMx1:on-demand"]["price_source"] is None
    assert rows["runpod:H100_SXMx1:on-demand"]["price_source"] == "catalog"
    assert plan["worst_case_usd"] is None
    assert result.stderr.strip().splitlines() == [
        "error: runpod: no API key: set RUNPOD_API_KEY, or put api_key in ~/.runpod/config.toml (`runpod config`)"]


def test_a_cell_without_a_price_makes_run_ask_for_the_whole_budget(home: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from benchctl.provisioners.local.provider import LocalProvider

    real = LocalProvider.offers
    monkeypatch.setattr(LocalProvider, "offers",
                        lambda self, request: [] if request.count == 2 else real(self, request))
    path = _campaign(tmp_path, "  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.01}\n"
                               "  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.01}\n")
    run = cli_here("run", str(path), "--confirm-above", "1", home=home)
    assert run.returncode == 2, run.stderr
    assert "unknown for the 1 cell(s) without an offer; budget_usd $5.00 caps the spend" in run.stderr
    assert "up to $5.00 may be spent, above $1.00" in run.stderr, "an unknown price may cost up to the budget"
