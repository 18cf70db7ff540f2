"""campaigns/h100-2node.yaml: two 8×H100 nodes as one unit on SkyPilot and on AWS, planned by
``benchctl plan`` (in this process) against the SkyPilot stand-in and moto's EC2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from benchctl.campaign.spec import load_campaign
from tests.conftest import REPO
from tests.fakes.aws_fake import FakeAWS, running_fake_aws
from tests.fakes.skypilot_standin import SkyPilotStandIn
from tests.fakes.sshd import running_sshd

CAMPAIGN = REPO / "campaigns" / "h100-2node.yaml"


@pytest.fixture
def clouds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SkyPilotStandIn, FakeAWS]]:
    from benchctl.provisioners.registry import PROVIDERS
    from benchctl.provisioners.skypilot.provider import SkyPilotProvider

    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # SkyPilot keeps a user hash under ~/.sky
    with running_sshd(tmp_path / "sshd") as sshd:
        sky = SkyPilotStandIn(sshd, tmp_path / "standin", workdir=tmp_path / "work")
        monkeypatch.setitem(PROVIDERS, "skypilot", replace(PROVIDERS["skypilot"], make=lambda home, settings:
                                                           SkyPilotProvider(home / "skypilot", settings, client=sky)))
        aws = FakeAWS(tmp_path / "keys", tmp_path / "w")
        with running_fake_aws(aws):
            yield sky, aws
        assert sky.launched == [] and aws.instances == {}, "plan rents nothing"


def test_the_two_node_campaign_parses_into_two_node_cells() -> None:
    campaign = load_campaign(CAMPAIGN)
    assert [(c.key, c.nodes, c.count) for c in campaign.cells] == [
        ("skypilot:H100_SXMx8:on-demand:cloud=lambda:nodes=2", 2, 8),
        ("aws:p5.48xlarge:on-demand:region=us-east-1:nodes=2", 2, 8)]


def test_plan_prices_each_cell_at_two_nodes(home: Path, clouds: tuple[SkyPilotStandIn, FakeAWS],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from benchctl.cli.main import main

    try:
        main(["plan", str(CAMPAIGN), "--format", "json"])
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    rows = {r["cell"]: r for r in json.loads(capsys.readouterr().out)["cells"]}
    sky = rows["skypilot:H100_SXMx8:on-demand:cloud=lambda:nodes=2"]
    assert (sky["nodes"], sky["offer"], sky["hourly_usd"]) == (2, "lambda:gpu_8x_h100_sxm5", 2 * 23.92)
    aws = rows["aws:p5.48xlarge:on-demand:region=us-east-1:nodes=2"]
    assert (aws["nodes"], aws["hourly_usd"]) == (2, pytest.approx(2 * 55.04))
    assert not (home / "benchctl.db").exists(), "nothing was written"
