"""On-demand prices per region from AWS's Price List Query API (``pricing:GetProducts``).

- Asked at the API's endpoint in ``PRICING_REGION`` (it answers in us-east-1 and ap-south-1 only,
  for every region), ``ServiceCode`` AmazonEC2 with TERM_MATCH on ``instanceType``, ``regionCode``,
  ``operatingSystem`` Linux, ``tenancy`` Shared, ``preInstalledSw`` NA, ``capacitystatus`` Used
  (capacity in use by a running instance, not an idle reservation's) and ``marketoption`` OnDemand
  (not a Capacity Block's product of the same type): the instance-hour of a plain Linux instance,
  what an on-demand launch bills. Karpenter asks with the same terms
  (aws/karpenter-provider-aws pkg/providers/pricing/pricing.go ``fetchOnDemandPricing``).
- Each ``PriceList`` entry is a JSON string, one product with its terms (the shape of the
  published answers, tests/fixtures/aws_pricing/README.md): the price is the
  ``OnDemand`` term's price dimension whose ``unit`` is ``Hrs``, ``pricePerUnit.USD``.
- Read once per (region, instance type) per provider and kept, whatever came of it. Where the read
  fails (no answer after the client's retries, the credentials lack ``pricing:GetProducts``,
  nothing matching, more than one distinct price) the price is the table's us-east-1 list price
  and ``source`` / ``warning`` say so: that figure is not the region's.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchctl.provisioners.aws.api import EC2, AWSError
from benchctl.provisioners.aws.instances import InstanceKind

PRICING_REGION = "us-east-1"
PRICE_LIST = "aws price list (pricing:GetProducts)"


class NoPrice(ValueError):
    """The answer holds no one on-demand hourly price for the instance type (says why)."""


@dataclass(frozen=True)
class OnDemandPrice:
    usd: float
    source: str
    """Where ``usd`` comes from (an offer's ``details["price_source"]``)."""
    warning: str | None = None
    """Set when ``usd`` is not the region's price (the table's us-east-1 list price instead)."""


def filters(region: str, instance_type: str) -> list[dict[str, str]]:
    terms = {"instanceType": instance_type, "regionCode": region, "operatingSystem": "Linux", "tenancy": "Shared",
             "preInstalledSw": "NA", "capacitystatus": "Used", "marketoption": "OnDemand"}
    return [{"Type": "TERM_MATCH", "Field": field, "Value": value} for field, value in terms.items()]


def hourly_usd(price_list: list[str], instance_type: str) -> float:
    """The one on-demand USD price per hour in GetProducts' ``PriceList`` (NoPrice: none, or several)."""
    found = set()
    try:
        for entry in price_list:
            item = json.loads(entry)
            kind = ((item.get("product") or {}).get("attributes") or {}).get("instanceType")
            if kind not in (None, instance_type):
                continue
            for term in ((item.get("terms") or {}).get("OnDemand") or {}).values():
                for dimension in (term.get("priceDimensions") or {}).values():
                    usd = (dimension.get("pricePerUnit") or {}).get("USD")
                    if dimension.get("unit") == "Hrs" and usd is not None:
                        found.add(float(usd))
    except (ValueError, AttributeError, TypeError) as exc:
        raise NoPrice(f"an answer that is not a price list of products ({type(exc).__name__}: {exc})") from None
    if not found:
        raise NoPrice(f"no on-demand hourly price for {instance_type} in the answer")
    if len(found) > 1:
        raise NoPrice(f"{len(found)} different on-demand prices for {instance_type} "
                      f"({', '.join(f'${p:g}' for p in sorted(found))})")
    return found.pop()


class OnDemandPrices:
    """The region's on-demand price of an instance type, read once (see the module doc)."""

    def __init__(self, api: Callable[[], EC2]) -> None:
        self._api = api
        self._lock = threading.Lock()
        self._known: dict[tuple[str, str], OnDemandPrice] = {}

    def get(self, region: str, kind: InstanceKind) -> OnDemandPrice:
        key = (region, kind.instance_type)
        with self._lock:
            if key not in self._known:
                self._known[key] = self._read(region, kind)
            return self._known[key]

    def fallbacks(self) -> list[str]:
        """One line per price read that fell back to the table."""
        with self._lock:
            return [p.warning for p in self._known.values() if p.warning]

    def _read(self, region: str, kind: InstanceKind) -> OnDemandPrice:
        try:
            answer: dict[str, Any] = self._api().call(
                f"read the on-demand price of {kind.instance_type} in {region}", "get_products",
                ServiceCode="AmazonEC2", FormatVersion="aws_v1", Filters=filters(region, kind.instance_type))
            usd = hourly_usd(list(answer.get("PriceList") or []), kind.instance_type)
        except (AWSError, NoPrice) as exc:
            why = f"{exc.code}: the credentials need pricing:GetProducts" if (
                isinstance(exc, AWSError) and "AccessDenied" in exc.code) else str(exc)
            return OnDemandPrice(kind.on_demand_usd, f"benchctl's table: the us-east-1 list price, not {region}'s "
                                 f"({PRICE_LIST} failed: {why})",
                                 f"on-demand {kind.instance_type} in {region} is priced at benchctl's us-east-1 list "
                                 f"price ${kind.on_demand_usd:g}/h, not {region}'s: {PRICE_LIST} failed ({why})")
        return OnDemandPrice(usd, f"{PRICE_LIST}, {region}")
