"""Catalog prices (provisioners/catalog.py): SkyPilot's cached catalog first, the committed snapshot
second; never the network. The CSV rows are real rows of SkyPilot's hosted catalogs
(tests/fixtures/skypilot_catalog/README.md says which)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchctl.provisioners.base import OfferRequest
from benchctl.provisioners.catalog import catalog_price, credentials_line

FIXTURES = Path(__file__).parents[1] / "fixtures" / "skypilot_catalog"
RUNPOD_CSV = (FIXTURES / "runpod_vms.csv").read_text()
VAST_CSV = (FIXTURES / "vast_vms.csv").read_text()


def _sky(tmp_path: Path, cloud: str, text: str) -> Path:
    path = tmp_path / ".sky" / "catalogs" / "v8" / cloud / "vms.csv"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return tmp_path


def test_skypilots_cached_catalog_wins_over_the_snapshot(tmp_path: Path) -> None:
    root = _sky(tmp_path, "runpod", RUNPOD_CSV)
    sxm = catalog_price("runpod", OfferRequest(gpu="H100_SXM", count=2, market="on-demand"), sky_root=root)
    assert sxm is not None and sxm.hourly_usd == 6.58 and sxm.source == "SkyPilot's cached catalog runpod/vms.csv"
    pcie = catalog_price("runpod", OfferRequest(gpu="H100_PCIE", count=2, market="on-demand"), sky_root=root)
    assert pcie is not None and pcie.hourly_usd == 5.78, "H100 (PCIe) is not H100-SXM"


def test_vasts_form_is_read_from_the_instance_type_and_a_zero_spot_price_is_none(tmp_path: Path) -> None:
    root = _sky(tmp_path, "vast", VAST_CSV)
    spot = catalog_price("vastai", OfferRequest(gpu="H100_SXM", count=8, market="spot"), sky_root=root)
    assert spot is not None and spot.hourly_usd == 16.0 and "spot bills less" in spot.note
    assert catalog_price("vastai", OfferRequest(gpu="H100_NVL", count=8, market="spot"), sky_root=root) is None, \
        "a 1x H100_NVL row prices no 8x node, and the snapshot lists none"


def test_without_a_cache_the_dated_snapshot_prices_the_node(tmp_path: Path) -> None:
    price = catalog_price("runpod", OfferRequest(gpu="H100_NVL", count=8, market="on-demand"), sky_root=tmp_path)
    assert price is not None and price.hourly_usd == pytest.approx(8 * 3.19)
    assert price.source.startswith("snapshot: skypilot-catalog runpod/vms.csv") and price.as_of == "2026-11-26"
    aws = catalog_price("aws", OfferRequest(gpu="H100_SXM", count=8, market="spot", instance_type="p5.48xlarge",
                                            region="us-east-1"), sky_root=tmp_path)
    assert aws is not None and aws.hourly_usd == 55.04 and "spot bills less" in aws.note
    assert catalog_price("runpod", OfferRequest(gpu="B200", count=8, market="on-demand"), sky_root=tmp_path) is None


def test_the_credentials_line_names_each_provider_once() -> None:
    line = credentials_line(["vastai", "runpod", "runpod"])
    assert line.count("RUNPOD_API_KEY") == 1 and "VAST_API_KEY (vastai)" in line


def test_a_catalog_that_bills_gpus_apart_prices_no_gpu_node_from_one_row(tmp_path: Path) -> None:
    # GCP's rows: the VM, and its GPUs on rows of their own. One row was taken for the node's price: the
    # H100 x 8 row alone (33.61 $/h, without a3-highgpu-8g's VM) and a3-megagpu-8g's VM alone (9.46 of 92.21)
    root = _sky(tmp_path, "gcp", (FIXTURES / "gcp_vms.csv").read_text())
    snapshot = tmp_path / "empty-snapshot.json"
    snapshot.write_text('{"entries": []}')
    for request in (OfferRequest(gpu="H100_SXM", count=8, market="on-demand", extra={"cloud": "gcp"}),
                    OfferRequest(gpu="H100_SXM", count=8, market="on-demand", instance_type="a3-megagpu-8g",
                                 extra={"cloud": "gcp"})):
        assert catalog_price("skypilot", request, sky_root=root, snapshot=snapshot) is None, request
