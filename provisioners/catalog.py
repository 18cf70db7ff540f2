"""Catalog prices: what a cell would cost by a public price list, for a provider that cannot be asked
for offers here (no credentials, no answer). A catalog price is NOT an offer: nothing says a node is
free at that price now; ``plan`` and ``offers`` mark it so, with its source and its age.

Sources, most live first:

0. A provider's own public listing, where it answers without credentials: Vast.ai's offer search
   (``provisioners.vastai.public_price``), read at plan time, its age "now", marked "no key to rent
   with". Bounded (a short timeout, one retry, a listing that failed is not asked again by the process);
   when it cannot be read the sources below answer.
1. SkyPilot's catalog as SkyPilot caches it: ``~/.sky/catalogs/v8/<cloud>/vms.csv`` (``$SKY_RUNTIME_DIR``
   instead of ``~``; sky/catalog/common.py and skylet/constants.py ``CATALOG_SCHEMA_VERSION``,
   SkyPilot 0.14.1). The wheel ships no catalog: SkyPilot downloads it from
   skypilot-org/skypilot-catalog on first use, so it is there only where SkyPilot ran. Its age is
   the file's mtime. Columns: ``InstanceType, AcceleratorName, AcceleratorCount, vCPUs, ...,
   Price, SpotPrice, Region`` (a SpotPrice of 0 or none: not listed). A catalog that bills GPUs on
   rows of their own (GCP's) prices no GPU node from one row: the sources below answer.
2. The committed snapshot ``catalog_prices.json`` beside this module: dated entries, each naming
   where its figure was read. Data, not code.

A spot cell priced from a list without a spot price gets the on-demand price, said so in ``note``
(spot bills less: the figure is an upper bound).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from benchctl.provisioners.base import OfferRequest

SNAPSHOT = Path(__file__).with_name("catalog_prices.json")
SKY_SCHEMA = "v8"
SKY_CLOUDS = {"runpod": "runpod", "vastai": "vast", "aws": "aws"}
"""benchctl provider → SkyPilot catalog folder (the skypilot provider names its cloud per cell)."""
CREDENTIALS = {"runpod": "RUNPOD_API_KEY", "vastai": "VAST_API_KEY",
               "aws": "AWS credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE)",
               "skypilot": "the cloud's credentials for SkyPilot (`sky check`)"}
"""What makes a provider's prices live offers (one line in ``plan`` and ``offers``)."""


@dataclass(frozen=True)
class CatalogPrice:
    hourly_usd: float
    """One node's $/hr by the list."""
    source: str
    as_of: str
    """ISO date the figure was read (snapshot) or the cached file was written (SkyPilot)."""
    note: str = ""
    market_listed: bool = True
    """False when the list has no price for the request's market (a spot cell priced on-demand)."""


def catalog_price(provider: str, request: OfferRequest, *, sky_root: Path | None = None,
                  snapshot: Path = SNAPSHOT) -> CatalogPrice | None:
    """The list price of one node ``request`` describes, from the most live source that has one;
    None when no source lists it. Only a provider's public listing (source 0) reads the network."""
    if provider == "vastai":
        from benchctl.provisioners.vastai import public_price

        live = public_price(request)
        if live is not None:
            now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
            return CatalogPrice(live, "vastai public listing", now, "no key to rent with")
    cloud = request.extra.get("cloud") if provider == "skypilot" else SKY_CLOUDS.get(provider)
    if cloud:
        cached = _sky_cached(provider, str(cloud).lower(), request, sky_root)
        if cached is not None:
            return cached
    return _snapshot(provider, request, snapshot)


def credentials_line(providers: Iterable[str]) -> str:
    """The one line saying which credentials would turn catalog prices into live offers."""
    wanted = [f"{CREDENTIALS.get(name, 'its credentials')} ({name})" for name in sorted(set(providers))]
    return "catalog prices are list prices, not offers; for live offers set " + "; ".join(wanted)


def _spot(market: str, on_demand: float, spot: float | None) -> tuple[float, str]:
    if market != "spot":
        return on_demand, ""
    if spot:
        return spot, ""
    return on_demand, "on-demand list price: spot bills less"


def _sky_match(provider: str, cloud: str, request: OfferRequest, row: dict[str, str]) -> bool:
    """Whether a SkyPilot catalog row is the node ``request`` asks for (same naming as the provider
    modules: provisioners/skypilot/task.py, provisioners/vastai.py ``GPU_NAMES``)."""
    if request.instance_type:
        return row.get("InstanceType") == request.instance_type and (
            not request.region or row.get("Region", "").lower() == request.region.lower())
    try:
        count = int(float(row.get("AcceleratorCount") or 0))
    except ValueError:
        return False
    if count != request.count:
        return False
    if cloud == "vast":  # the form (SXM, PCIE, NVL) survives only in the instance type: 8x-H100_SXM-...
        from benchctl.provisioners.vastai import GPU_NAMES

        name = GPU_NAMES.get(request.gpu)
        return name is not None and row.get("InstanceType", "").startswith(f"{count}x-{name.replace(' ', '_')}-")
    from benchctl.provisioners.skypilot.task import accelerator_name

    name = accelerator_name(request.gpu, cloud)
    return name is not None and row.get("AcceleratorName") == name


def _sky_cached(provider: str, cloud: str, request: OfferRequest, root: Path | None) -> CatalogPrice | None:
    base = root if root is not None else Path(os.path.expanduser(os.environ.get("SKY_RUNTIME_DIR", "~")))
    path = base / ".sky" / "catalogs" / SKY_SCHEMA / cloud / "vms.csv"
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            every = list(csv.DictReader(handle))
        written = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc).date().isoformat()
    except (OSError, csv.Error, UnicodeDecodeError):
        return None
    if request.gpu not in ("", "cpu") and any(not r.get("InstanceType") for r in every):
        # GCP's catalog bills GPUs on rows of their own (no InstanceType), apart from the VM's row: no one
        # row is a GPU node's price (H100 x 8 alone was 33.61 of a3-highgpu-8g's bill, a3-megagpu-8g's
        # VM alone 9.46 of 92.21); SkyPilot's own catalog code adds them up (provisioners/skypilot/sdk.py)
        return None
    rows = [r for r in every if _sky_match(provider, cloud, request, r)]
    prices = []
    for row in rows:
        try:
            on_demand = float(row.get("Price") or 0)
            spot = float(row.get("SpotPrice") or 0) or None
        except ValueError:
            continue
        if on_demand > 0:
            prices.append(_spot(request.market, on_demand, spot))
    if not prices:
        return None
    price, note = min(prices)
    return CatalogPrice(round(price, 4), f"SkyPilot's cached catalog {cloud}/vms.csv", written, note, not note)


def _snapshot(provider: str, request: OfferRequest, path: Path) -> CatalogPrice | None:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["entries"]
    except (OSError, ValueError, KeyError):
        return None
    for entry in entries:
        if entry["provider"] != provider:
            continue
        if request.instance_type or "instance_type" in entry:
            if entry.get("instance_type") != request.instance_type or (
                    request.region and entry.get("region", request.region) != request.region):
                continue
        elif entry.get("gpu") != request.gpu or entry.get("count", request.count) != request.count:
            continue
        node = entry["node_usd"] if "node_usd" in entry else entry["per_gpu_usd"] * request.count
        price, note = _spot(request.market, float(node), entry.get("spot_node_usd"))
        return CatalogPrice(round(price, 4), f"snapshot: {entry['source']}", entry["as_of"], note, not note)
    return None
