"""``benchctl plan``: offers and worst-case spend per cell from the providers' APIs, no launch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.provisioners import vastai
from tests.conftest import REPO, cli_here, run_cli
from tests.fakes.aws_fake import FakeAWS, running_fake_aws
from tests.fakes.runpod_fake import FakeRunPod, running_fake_runpod
from tests.fakes.skypilot_standin import SkyPilotStandIn
from tests.fakes.sshd import running_sshd
from tests.fakes.vastai_fake import RATE_LIMITS, FakeVast, running_fake_vast

VAST_RATE_SCALE = 0.05
"""``plan`` runs in this process, where Vast's rate limiter (one per API key) outlives a call: the
fake enforces Vast's intervals ×0.05 and the provider keeps them ×0.075, as in test_vastai.py."""


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeRunPod, FakeVast, dict[str, str]]]:
    """RunPod, Vast.ai and moto's EC2 on loopback, their URLs and keys in this process's environment
    (``plan`` runs in this process: ``cli_here``) and in the returned dict (for a ``run_cli``)."""
    runpod = FakeRunPod("rp", ssh_port=22, authorized_keys=tmp_path / "keys", workdir=tmp_path / "w")
    vast = FakeVast("va", ssh_port=22, authorized_keys=tmp_path / "keys", workdir=tmp_path / "w",
                    rate_scale=VAST_RATE_SCALE)
    for endpoint, interval in RATE_LIMITS.items():
        monkeypatch.setitem(vastai.MIN_INTERVAL_S, endpoint, interval * VAST_RATE_SCALE * 1.5)
    aws = FakeAWS(tmp_path / "keys", tmp_path / "w")
    with running_fake_runpod(runpod) as runpod_url, running_fake_vast(vast) as vast_url, running_fake_aws(aws):
        env = {"RUNPOD_API_BASE_URL": runpod_url, "RUNPOD_API_KEY": "rp", "VAST_URL": vast_url, "VAST_API_KEY": "va"}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        yield runpod, vast, env


@pytest.mark.slow
def test_the_h100_matrix_is_planned_from_the_providers_offers(home: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    runpod, vast, _ = fakes  # and moto's EC2 for the aws cell, through AWS_ENDPOINT_URL
    result = cli_here("plan", str(REPO / "campaigns" / "h100-matrix.yaml"), "--format", "json", home=home)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    rows = {r["cell"]: r for r in plan["cells"]}
    assert {r["price_source"] for r in rows.values()} == {"offer"}, "live offers win over any catalog"
    assert rows["runpod:H100_SXMx8:on-demand"]["hourly_usd"] == pytest.approx(2.99 * 8)
    assert rows["runpod:H100_PCIEx8:on-demand"]["hourly_usd"] == pytest.approx(2.39 * 8)
    assert rows["vastai:H100_SXMx8:spot:min_vcpus=128"]["offer"] == "1001", "the 96-vCPU machine is filtered out"
    aws = rows["aws:p5.48xlarge:spot:region=us-east-1"]
    assert (aws["offer"], aws["hourly_usd"], aws["vcpus"]) == ("p5.48xlarge|us-east-1d", 29.9, 192), "cheapest zone"
    hours = (15 + 30 + 10) / 60
    assert rows["runpod:H100_NVLx8:on-demand"]["worst_case_usd"] == pytest.approx(3 * 2.79 * 8 * hours, rel=1e-3)
    assert plan["worst_case_usd"] == pytest.approx(sum(r["worst_case_usd"] for r in plan["cells"]))
    assert any("over budget_usd" in w for w in plan["warnings"]), "3 attempts × 5 cells exceed $150 at worst"
    assert runpod.inventory() == [] and vast.inventory() == [], "nothing was rented"
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    assert ec2_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].all_reservations() == [], "no EC2 instance either"
    assert not (home / "benchctl.db").exists(), "nothing was written"


@pytest.mark.slow
def test_a_cell_without_offer_is_a_warning(home: Path, tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "p.yaml"
    path.write_text((REPO / "campaigns" / "h100-matrix.yaml").read_text().replace("min_vcpus: 128", "min_vcpus: 512"))
    result = cli_here("plan", str(path), home=home)
    assert result.returncode == 0, result.stderr
    assert "warning: vastai:H100_SXMx8:spot:min_vcpus=512: no offer now" in result.stdout
    assert "worst case $" in result.stdout


@pytest.mark.slow
def test_a_region_aws_does_not_have_stops_plan_naming_the_cell(home: Path, tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "p.yaml"
    path.write_text((REPO / "campaigns" / "h100-matrix.yaml").read_text().replace(
        "instance_type: p5.48xlarge, region: us-east-1", "instance_type: p5.48xlarge, region: us_east_1"))
    result = cli_here("plan", str(path), home=home)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == ("error: aws:p5.48xlarge:spot:region=us_east_1: aws has no region 'us_east_1' "
                                     "(e.g. us-east-1, us-west-2, eu-west-1); fix `region`")
    assert not (home / "benchctl.db").exists()


def test_without_credentials_every_cell_has_a_catalog_price_and_plan_exits_0(home: Path, tmp_path: Path) -> None:
    """No credentials, no network: each cell is priced from the committed snapshot (provisioners/
    catalog_prices.json), marked catalog with its source and date, and one line says which
    credentials would make the prices live offers."""
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config"), "RUNPOD_API_KEY": "",
           "VAST_API_KEY": "", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
           "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
           "AWS_EC2_METADATA_DISABLED": "true", "SKY_RUNTIME_DIR": str(tmp_path / "no-sky")}
    result = run_cli("plan", str(REPO / "campaigns" / "h100-matrix.yaml"), home=home, env=env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    cells = [line for line in result.stdout.splitlines() if line.startswith(("runpod:", "vastai:", "aws:"))]
    assert len(cells) == 5 and all(" catalog " in line and "not an offer" in line for line in cells), cells
    assert "catalog price (not an offer): snapshot: skypilot-catalog runpod/vms.csv@01acdfd4, as of 2026-11-26" \
        in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("catalog prices are list prices, not offers; for live offers set")
    assert all(name in lines[0] for name in ("RUNPOD_API_KEY", "VAST_API_KEY", "AWS credentials"))
    data = run_cli("plan", str(REPO / "campaigns" / "h100-matrix.yaml"), "--format", "json", home=home, env=env)
    assert data.returncode == 0, data.stderr
    rows = {r["cell"]: r for r in json.loads(data.stdout)["cells"]}
    sxm = rows["runpod:H100_SXMx8:on-demand"]
    assert (sxm["price_source"], sxm["hourly_usd"], sxm["price_as_of"]) == ("catalog", pytest.approx(8 * 3.29),
                                                                            "2026-11-26")
    assert rows["aws:p5.48xlarge:spot:region=us-east-1"]["hourly_usd"] == pytest.approx(55.04)
    assert all(r["offer"] is None for r in rows.values()), "a catalog price is never an offer"


SKY_CAMPAIGN = """\
name: sky
budget_usd: 200
target: {model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}
payload: {profile: {device_batch_size: 8, sequence_len: 2048}}
matrix:
  - {provider: skypilot, cloud: lambda, gpu: H100_SXM, count: 8, market: on-demand}
  - {provider: skypilot, cloud: gcp, gpu: H100_SXM, count: 8, market: spot}
"""


@pytest.fixture
def sky_standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SkyPilotStandIn]:
    """The provider registry builds the skypilot provider on the SDK stand-in (in this process)."""
    from dataclasses import replace

    from benchctl.provisioners.registry import PROVIDERS
    from benchctl.provisioners.skypilot.provider import SkyPilotProvider

    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    with running_sshd(tmp_path / "sshd") as sshd:
        sky = SkyPilotStandIn(sshd, tmp_path / "standin", workdir=tmp_path / "work")
        monkeypatch.setitem(PROVIDERS, "skypilot", replace(PROVIDERS["skypilot"], make=lambda home, settings:
                                                           SkyPilotProvider(home / "skypilot", client=sky)))
        yield sky
    assert sky.launched == [] and sky.inventory() == [], "plan launched nothing"


def _plan_in_process(*args: str) -> int:
    from benchctl.cli.main import main

    try:
        main(["plan", *args])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_skypilot_cells_are_planned_from_skypilots_catalog(home: Path, tmp_path: Path, sky_standin,  # type: ignore[no-untyped-def]
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sky.yaml"
    path.write_text(SKY_CAMPAIGN)
    assert _plan_in_process(str(path), "--format", "json") == 0
    rows = {r["cell"]: r for r in json.loads(capsys.readouterr().out)["cells"]}
    lambda_row = rows["skypilot:H100_SXMx8:on-demand:cloud=lambda"]
    assert (lambda_row["offer"], lambda_row["hourly_usd"]) == ("lambda:gpu_8x_h100_sxm5", 23.92)
    assert rows["skypilot:H100_SXMx8:spot:cloud=gcp"]["hourly_usd"] == 31.4
    assert not (home / "benchctl.db").exists(), "nothing was written"


def test_a_multi_node_skypilot_cell_is_planned_at_the_price_of_every_node(  # type: ignore[no-untyped-def]
        home: Path, tmp_path: Path, sky_standin, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sky.yaml"
    path.write_text(SKY_CAMPAIGN.replace("cloud: lambda, gpu: H100_SXM, count: 8,",
                                         "cloud: lambda, gpu: H100_SXM, count: 8, nodes: 2,"))
    assert _plan_in_process(str(path), "--format", "json") == 0
    rows = {r["cell"]: r for r in json.loads(capsys.readouterr().out)["cells"]}
    two = rows["skypilot:H100_SXMx8:on-demand:cloud=lambda:nodes=2"]
    assert (two["nodes"], two["offer"], two["hourly_usd"]) == (2, "lambda:gpu_8x_h100_sxm5", 2 * 23.92)
    assert rows["skypilot:H100_SXMx8:spot:cloud=gcp"]["nodes"] == 1


def test_resources_skypilot_refuses_stop_plan_naming_the_cell(home: Path, tmp_path: Path, sky_standin,  # type: ignore[no-untyped-def]
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sky.yaml"
    path.write_text(SKY_CAMPAIGN.replace("cloud: gcp", "cloud: gpc"))
    assert _plan_in_process(str(path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: skypilot:H100_SXMx8:spot:cloud=gpc: SkyPilot refuses the cell's resources: ")
    assert "gpc" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (home / "benchctl.db").exists()


def test_plan_prices_skypilot_cells_without_asking_for_credentials(home: Path, tmp_path: Path, sky_standin,  # type: ignore[no-untyped-def]
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``plan`` does not ask SkyPilot which clouds have credentials (that starts its API server, which
    ``check`` avoids too): a cloud without them is still priced from SkyPilot's catalog (read on
    this machine), and one line says the credentials were not verified and how to test them."""
    sky_standin.enabled = ["lambda"]
    path = tmp_path / "sky.yaml"
    path.write_text(SKY_CAMPAIGN)
    assert _plan_in_process(str(path)) == 0
    out = capsys.readouterr().out
    assert "skypilot:H100_SXMx8:spot:cloud=gcp" in out and "31.4" in out
    assert ("warning: skypilot: credentials for gcp, lambda not verified (that would start SkyPilot's API "
            "server): `sky check gcp lambda` tests them" in " ".join(out.split()))
    assert sky_standin.api_server_starts == 0
    assert not (home / "benchctl.db").exists()


def test_a_missing_skypilot_sdk_is_a_usage_error(home: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "no-sdk" / "sky"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'sky'\", name='sky')\n")
    path = tmp_path / "sky.yaml"
    path.write_text(SKY_CAMPAIGN)
    result = run_cli("plan", str(path), home=home, env={"PYTHONPATH": f"{tmp_path / 'no-sdk'}:{REPO}"})
    assert result.returncode == 2
    assert result.stderr.strip() == "error: skypilot: its SDK is not installed (sky): pip install 'benchctl[skypilot]'"


RUNPOD_AND_VAST = """\
name: p
budget_usd: 200
target: {model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}
payload: {profile: {device_batch_size: 8, sequence_len: 2048}}
matrix:
  - {provider: runpod, gpu: H100_SXM, count: 8, market: on-demand}
  - {provider: vastai, gpu: H100_SXM, count: 8, market: on-demand, min_vcpus: %d}
"""


@pytest.mark.slow
def test_plan_fails_when_no_provider_answers_for_offers(home: Path, tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    runpod, vast, _ = fakes
    runpod.faults, vast.faults = ["401"] * 20, ["401"] * 20  # the keys pass the offline check, then are refused
    path = tmp_path / "p.yaml"
    path.write_text(RUNPOD_AND_VAST % 128)
    result = cli_here("plan", str(path), "--format", "json", home=home)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == "" and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: no provider answered for offers, so nothing could be planned: runpod: ")
    assert "; vastai: " in line and "(401)" in line
    assert not (home / "benchctl.db").exists(), "nothing was written"


@pytest.mark.slow
def test_a_cell_without_offer_has_an_unknown_worst_case(home: Path, tmp_path: Path, fakes) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "p.yaml"
    path.write_text(RUNPOD_AND_VAST % 4096)  # no vast machine has 4096 vCPUs
    result = cli_here("plan", str(path), "--format", "json", home=home)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    rows = {r["cell"]: r for r in plan["cells"]}
    assert rows["vastai:H100_SXMx8:on-demand:min_vcpus=4096"]["worst_case_usd"] is None, "unknown, not $0"
    assert rows["runpod:H100_SXMx8:on-demand"]["worst_case_usd"] > 0
    assert plan["worst_case_usd"] is None, "the matrix's worst case is unknown while a cell has no price"
    table = cli_here("plan", str(path), home=home)
    assert table.returncode == 0, table.stderr
    assert "unknown for the 1 cell(s) without an offer" in table.stdout
