"""What a cluster's fabric preflight expects comes from what was sold: the cell's ``fabric``, else
the provider's offer (AWS: the instance type's EFA devices), never the GPU model (issue 27, item 4)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from benchctl.campaign.spec import parse_campaign
from benchctl.engine.attempt_driver import AttemptDriver
from benchctl.errors import SpecError
from benchctl.provisioners.aws.instances import INSTANCES
from benchctl.provisioners.aws.provider import AWSProvider, AWSSettings
from benchctl.provisioners.base import Node, Offer, OfferRequest
from benchctl.store import queries as q
from benchctl.store.database import open_store
from tests.fakes.aws_fake import FakeAWS, running_fake_aws

CAMPAIGN = """\
name: fab
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
defaults: {market: on-demand, max_attempts: 1}
payload: {phases: [preflight]}
matrix:
  - {provider: local, gpu: cpu, count: 1, nodes: 2, price_usd_per_hour: 0.5, fabric: IB 8x400}
  - {provider: local, gpu: cpu, count: 2, nodes: 2, price_usd_per_hour: 0.5}
"""


def _job_fabric(tmp_path: Path, index: int, offered: str | None) -> str | None:
    campaign = parse_campaign(CAMPAIGN, "fab.yaml")
    spec = campaign.cells[index]
    engine = open_store(f"sqlite:///{tmp_path / f'store{index}-{offered}.db'}")
    cell = q.NewCell(key=spec.key, provider="local", gpu="cpu", count=spec.world_size, market="on-demand",
                     config_json=spec.model_dump_json())
    campaign_id, _ = q.upsert_campaign(engine, "fab", "{}", "/tmp/fab.yaml", 5.0, [cell])
    (row,) = q.cells(engine, campaign_id)
    attempt = q.new_attempt(engine, row.id or 0, token="tok", provider="local", market="on-demand", remote_dir="x",
                            hourly_usd=1.0, host="h")
    provider = SimpleNamespace(idle_shutdown_command=lambda node: None, spot_notice=lambda node: False)
    ctx = SimpleNamespace(engine=engine, campaign=campaign, log=print)
    driver = AttemptDriver(ctx, row.id or 0, spec.key, spec, provider, lambda state: None, lambda: None)  # type: ignore[arg-type]
    offer = Offer(provider="local", offer_id="o", gpu="cpu", count=spec.world_size, vcpus=1, region="r",
                  hourly_usd=1.0, market="on-demand", fabric=offered)
    return driver._job(attempt, Node(provider="local", node_id="n", token="tok", campaign_tag="c", offer=offer)).fabric


def test_the_cells_fabric_wins_over_the_offers_and_the_offers_stands_without_one(tmp_path: Path) -> None:
    assert _job_fabric(tmp_path, 0, "efa 4") == "ib 8x400"  # as the payload reads it (FabricExpect.parse)
    assert _job_fabric(tmp_path, 1, "efa 4") == "efa 4"
    assert _job_fabric(tmp_path, 1, None) is None  # nobody said: the fabric checks fail no node


def test_a_fabric_that_is_no_fabric_is_refused_naming_the_line() -> None:
    with pytest.raises(SpecError, match=r"fab.yaml:7 matrix\[0\].fabric: 'ib8' is not a fabric: write ib 8x400"):
        parse_campaign(CAMPAIGN.replace("IB 8x400", "ib8"), "fab.yaml")


def test_aws_offers_sell_their_instance_types_efa_devices(tmp_path: Path) -> None:
    """EFA interfaces per type (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html, the
    table in provisioners/aws/instances.py); a type without EFA sells no RDMA between nodes."""
    fake = FakeAWS(tmp_path / "authorized_keys", tmp_path / "work")
    with running_fake_aws(fake):
        provider = AWSProvider(tmp_path / "aws", AWSSettings(ssh_cidr="127.0.0.1/32"))
        for itype, sold in (("p5.48xlarge", "efa 32"), ("p4d.24xlarge", "efa 4"), ("c5.large", "none")):
            count = INSTANCES[itype].count
            offers = provider.offers(OfferRequest(gpu="", count=count, market="on-demand", instance_type=itype))
            assert offers and {o.fabric for o in offers} == {sold}, itype
