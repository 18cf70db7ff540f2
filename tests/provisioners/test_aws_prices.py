"""On-demand offers at the region's price from AWS's Price List Query API (``aws.prices``), the table's
us-east-1 list price only where that read fails, and saying so."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import botocore
import pytest

from benchctl.provisioners.aws.prices import NoPrice, hourly_usd
from benchctl.provisioners.aws.provider import AWSProvider, AWSSettings
from benchctl.provisioners.base import OfferRequest
from tests.fakes.aws_fake import FakeAWS, running_fake_aws
from tests.fakes.aws_pricing_fake import DENIED

FIXTURE = Path(__file__).parents[1] / "fixtures" / "aws_pricing" / "get_products_t2.micro_eu-ireland.json"
REGION = "eu-west-1"
TABLE_C5_LARGE = 0.085


def _real_answer() -> list[str]:
    return list(json.loads(FIXTURE.read_text())["PriceList"])


def _as_c5_large(usd: str) -> str:
    """The real t2.micro entry (README) as a c5.large one at ``usd``: the same product shape and
    terms, only the type and the on-demand figure changed (no real c5.large answer was found)."""
    item = json.loads(_real_answer()[0])
    item["product"]["attributes"]["instanceType"] = "c5.large"
    for term in item["terms"]["OnDemand"].values():
        for dimension in term["priceDimensions"].values():
            dimension["pricePerUnit"]["USD"] = usd
    return json.dumps(item)


def test_the_price_is_the_on_demand_hour_of_a_real_answer() -> None:
    assert hourly_usd(_real_answer(), "t2.micro") == 0.0126, "not a Reserved term's Hrs (0.0049 … 0.0102)"


@pytest.mark.parametrize(("answer", "instance_type", "why"), [
    (lambda: [], "t2.micro", "no on-demand hourly price"),
    (_real_answer, "c5.large", "no on-demand hourly price"),  # another type's product is not this one's price
    (lambda: [e for e in json.loads((Path(botocore.__file__).parent / "data" / "pricing" / "2017-10-15" /
                                     "examples-1.json").read_text())["examples"]["GetProducts"][0]["output"]
              ["PriceList"]], "t2.micro", "no on-demand hourly price"),  # AWS's example: EBS, GB-Mo
    (lambda: [_as_c5_large("0.096"), _as_c5_large("0.107")], "c5.large", r"2 different on-demand prices .*\$0.096"),
    (lambda: ["<html>"], "c5.large", "not a price list"),
    (lambda: ['{"terms": {"OnDemand": {"x": []}}}'], "c5.large", "not a price list"),
])
def test_no_one_price_is_no_price(answer: object, instance_type: str, why: str) -> None:
    with pytest.raises(NoPrice, match=why):
        hourly_usd(answer(), instance_type)  # type: ignore[operator]


def test_the_same_price_twice_is_that_price() -> None:
    assert hourly_usd([_as_c5_large("0.096"), _as_c5_large("0.0960000000")], "c5.large") == 0.096


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeAWS]:
    fake = FakeAWS(tmp_path / "authorized_keys", tmp_path / "work")
    with running_fake_aws(fake):
        yield fake
        assert fake.live() == []


def _on_demand() -> OfferRequest:
    return OfferRequest(gpu="", count=1, market="on-demand", instance_type="c5.large", region=REGION)


def test_on_demand_offers_carry_the_regions_price_read_once(fake: FakeAWS, tmp_path: Path) -> None:
    fake.pricing.answers[(REGION, "c5.large")] = [_as_c5_large("0.0960000000")]
    provider = AWSProvider(tmp_path / "aws", AWSSettings(ssh_cidr="10.1.2.3/32", ssh_port=2222))
    offers = provider.offers(_on_demand())
    assert offers and {o.hourly_usd for o in offers} == {0.096}, "eu-west-1's price, not us-east-1's $0.085"
    assert {o.details["price_source"] for o in offers} == {"aws price list (pricing:GetProducts), eu-west-1"}
    provider.offers(_on_demand())
    (asked,) = fake.pricing.requests  # once per region and type per provider
    assert asked["ServiceCode"] == "AmazonEC2"
    assert {f["Field"]: (f["Type"], f["Value"]) for f in asked["Filters"]} == {
        "instanceType": ("TERM_MATCH", "c5.large"), "regionCode": ("TERM_MATCH", REGION),
        "operatingSystem": ("TERM_MATCH", "Linux"), "tenancy": ("TERM_MATCH", "Shared"),
        "preInstalledSw": ("TERM_MATCH", "NA"), "capacitystatus": ("TERM_MATCH", "Used"),
        "marketoption": ("TERM_MATCH", "OnDemand")}  # not a Capacity Block's product (Karpenter's terms)
    assert provider.plan_notes() == []
    fake.add_images(REGION)
    node = provider.launch(offers[0], "bc-od-eu", "camp-a")
    try:
        assert node.hourly_usd == 0.096, "the attempt is billed at the region's price"
    finally:
        provider.terminate(node)


@pytest.mark.parametrize(("error", "why"), [
    (DENIED, "AccessDeniedException: the credentials need pricing:GetProducts"),
    (None, "no on-demand hourly price for c5.large"),  # nothing matches
    (("ThrottlingException", "Rate exceeded", 400), r"ThrottlingException.*Rate exceeded"),
])
def test_a_failed_read_is_the_table_price_and_says_so(fake: FakeAWS, tmp_path: Path,
                                                      error: tuple[str, str, int] | None, why: str) -> None:
    fake.pricing.error = error
    provider = AWSProvider(tmp_path / "aws", AWSSettings(), api_attempts=2)
    offers = provider.offers(_on_demand())
    assert offers and {o.hourly_usd for o in offers} == {TABLE_C5_LARGE}
    (source,) = {o.details["price_source"] for o in offers}
    assert source.startswith("benchctl's table: the us-east-1 list price, not eu-west-1's (")
    assert re.search(why, source), source
    (note,) = provider.plan_notes()
    assert note.startswith("on-demand c5.large in eu-west-1 is priced at benchctl's us-east-1 list price $0.085/h, "
                           "not eu-west-1's")
    provider.offers(_on_demand())
    # botocore's retries (standard mode, max_attempts=api_attempts retries) for a throttled read, then kept
    assert len(fake.pricing.requests) == (3 if error and error[0] == "ThrottlingException" else 1)


def test_spot_offers_ask_no_price_list(fake: FakeAWS, tmp_path: Path) -> None:
    provider = AWSProvider(tmp_path / "aws", AWSSettings())
    offers = provider.offers(OfferRequest(gpu="", count=1, market="spot", instance_type="c5.large"))
    assert [o.hourly_usd for o in offers] == [0.033, 0.041, 0.052]
    assert fake.pricing.requests == [] and "price_source" not in offers[0].details


def test_an_on_demand_capacity_reservation_bills_the_regions_rate(fake: FakeAWS, tmp_path: Path) -> None:
    # AWS bills an On-Demand Capacity Reservation at the on-demand rate (UserGuide
    # capacity-reservations-pricing-billing.html): the region's, not the table's us-east-1 $0.085
    fake.pricing.answers[(REGION, "c5.large")] = [_as_c5_large("0.0960000000")]
    fake.reservations.add("cr-00000000000000031", "c5.large", f"{REGION}a", 1)
    provider = AWSProvider(tmp_path / "aws", AWSSettings(ssh_cidr="10.1.2.3/32", ssh_port=2222))
    (offer,) = provider.offers(OfferRequest(gpu="", count=1, market="on-demand", instance_type="c5.large",
                                            region=REGION, extra={"capacity_reservation": "cr-00000000000000031"}))
    assert offer.hourly_usd == 0.096
    assert offer.details["price_source"] == ("on-demand rate (AWS bills a capacity reservation at it, used or not): "
                                             "aws price list (pricing:GetProducts), eu-west-1")
