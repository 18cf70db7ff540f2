"""``benchctl plan``: offers and worst-case spend per cell from the providers' APIs, no launch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tests.fakes.runpod_fake import FakeRunPod, running_fake_runpod
from tests.fakes.vastai_fake import FakeVast, running_fake_vast


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[tuple[FakeRunPod, FakeVast, dict[str, str]]]:
    runpod = FakeRunPod("rp", ssh_port=22, authorized_keys=tmp_path / "keys", workdir=tmp_path / "w")
    vast = FakeVast("va", ssh_port=22, authorized_keys=tmp_path / "keys", workdir=tmp_path / "w")
    with running_fake_runpod(runpod) as runpod_url, running_fake_vast(vast) as vast_url:
        yield runpod, vast, {"RUNPOD_API_BASE_URL": runpod_url, "RUNPOD_API_KEY": "rp", "VAST_URL": vast_url,
                             "VAST_API_KEY": "va"}


def test_the_h100_matrix_is_planned_from_the_providers_offers(home: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    runpod, vast, env = fakes
    result = run_cli("plan", str(REPO / "campaigns" / "h100-matrix.yaml"), "--format", "json", home=home, env=env)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    rows = {r["cell"]: r for r in plan["cells"]}
    assert rows["runpod:H100_SXMx8:on-demand"]["hourly_usd"] == pytest.approx(2.99 * 8)
    assert rows["runpod:H100_PCIEx8:spot"]["hourly_usd"] == pytest.approx(1.35 * 8)
    assert rows["vastai:H100_SXMx8:spot:min_vcpus=128"]["offer"] == "1001", "the 96-vCPU machine is filtered out"
    hours = (15 + 30 + 10) / 60
    assert rows["runpod:H100_NVLx8:on-demand"]["worst_case_usd"] == pytest.approx(3 * 2.79 * 8 * hours, rel=1e-3)
    assert plan["worst_case_usd"] == pytest.approx(sum(r["worst_case_usd"] for r in plan["cells"]))
    assert any("over budget_usd" in w for w in plan["warnings"]), "3 attempts × 7 cells exceed $150 at worst"
    assert runpod.inventory() == [] and vast.inventory() == [], "nothing was rented"
    assert not (home / "benchctl.db").exists(), "nothing was written"


def test_a_cell_without_offer_is_a_warning(home: Path, tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    _, _, env = fakes
    path = tmp_path / "p.yaml"
    path.write_text((REPO / "campaigns" / "h100-matrix.yaml").read_text().replace("min_vcpus: 128", "min_vcpus: 512"))
    result = run_cli("plan", str(path), home=home, env=env)
    assert result.returncode == 0, result.stderr
    assert "warning: vastai:H100_SXMx8:spot:min_vcpus=512: no offer now" in result.stdout
    assert "worst case $" in result.stdout


def test_missing_credentials_are_one_line_per_provider(home: Path, tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config"), "RUNPOD_API_KEY": "",
           "VAST_API_KEY": ""}
    result = run_cli("plan", str(REPO / "campaigns" / "h100-matrix.yaml"), home=home, env=env)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, lines
    assert "runpod: no API key: set RUNPOD_API_KEY, or put api_key in ~/.runpod/config.toml" in lines[0]
    assert lines[1].startswith("vastai: no API key: set VAST_API_KEY")
