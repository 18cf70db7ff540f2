"""Vast's public listing prices cells without a key (provisioners.vastai.public_price, used first by
provisioners/catalog.py): its offer search answers with no Authorization header (the fake serves it as
the real API does, tests/fakes/vastai_fake.py "Without a key"); unreachable, the snapshot answers."""

from __future__ import annotations

import datetime as dt
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from benchctl.provisioners import vastai
from benchctl.provisioners.base import OfferRequest
from benchctl.provisioners.catalog import catalog_price
from tests.conftest import REPO, cli_here, run_cli
from tests.fakes.vastai_fake import FakeVast, running_fake_vast

H100x8 = OfferRequest(gpu="H100_SXM", count=8, market="on-demand")


@pytest.fixture
def no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No Vast key anywhere (env, the SDK's key files), no SkyPilot cache; the listing's limiter does not
    wait, and no listing is remembered as unreachable from another test."""
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "user" / "config"))
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(tmp_path / "no-sky"))
    monkeypatch.setattr(vastai, "_PUBLIC_LIMITER", vastai.Limiter(intervals={}))
    monkeypatch.setattr(vastai, "_PUBLIC_UNREACHABLE", set())
    return tmp_path


@pytest.fixture
def listing(no_key: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeVast]:
    fake = FakeVast("vast-key", ssh_port=2222, authorized_keys=no_key / "authorized_keys", workdir=no_key / "work",
                    rate_scale=0.001)
    with running_fake_vast(fake) as url:
        monkeypatch.setenv("VAST_URL", url)
        yield fake


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_without_a_key_the_public_listing_prices_the_node_as_offers_would(listing: FakeVast) -> None:
    """The cheapest matching offer (reliability ≥ 0.98: 1003 is out), priced with the 60 GB of disk a
    rent takes: on-demand 14.9 + 0.3 × 60 / 720; spot the bid 8.1 × 1.1 plus that disk. Not an offer."""
    price = catalog_price("vastai", H100x8)
    assert price is not None
    assert (price.hourly_usd, price.source, price.note) == (pytest.approx(14.925), "vastai public listing",
                                                            "no key to rent with")
    age = dt.datetime.now(dt.timezone.utc) - dt.datetime.fromisoformat(price.as_of)
    assert abs(age.total_seconds()) < 60, "its age is now"
    spot = catalog_price("vastai", OfferRequest(gpu="H100_SXM", count=8, market="spot"))
    assert spot is not None and spot.hourly_usd == pytest.approx(8.935) and spot.market_listed
    assert listing.calls["search"] == 2, "each search answered without a key"


def test_the_fake_serves_only_the_search_without_a_key(listing: FakeVast) -> None:
    """As the real API: renting without a key is refused (401), as is a wrong key on the search."""
    url = vastai.os.environ["VAST_URL"]
    rent = requests.put(f"{url}/api/v0/asks/1001/", json={"image": "img", "disk": 60}, timeout=5)
    assert rent.status_code == 401 and not listing.instances
    wrong = requests.post(f"{url}/api/v0/bundles/", json={}, headers={"Authorization": "Bearer nope"}, timeout=5)
    assert wrong.status_code == 401
    assert requests.post(f"{url}/api/v0/bundles/", json={}, timeout=5).status_code == 200


def test_with_a_key_the_listing_is_not_asked(listing: FakeVast, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key means live offers are asked (plan and offers do); a failed one is never papered over by
    the listing marked 'no key'."""
    monkeypatch.setenv("VAST_API_KEY", "vast-key")
    assert vastai.public_price(H100x8) is None
    assert listing.calls["search"] == 0


def test_plan_without_a_key_prices_the_vast_cell_from_the_listing(listing: FakeVast, tmp_path: Path) -> None:
    """h100-matrix's Vast cell (spot, min_vcpus 128: offer 1001) is priced from the listing as a rent
    would bid, 9.6 × 1.1 + 0.025, source 'vastai public listing', 'not an offer: no key to rent with'; exit 0."""
    home = tmp_path / "home"
    result = run_cli("plan", str(REPO / "campaigns" / "h100-matrix.yaml"), "--format", "json", home=home,
                     env={"RUNPOD_API_KEY": "", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "",
                          "AWS_CONFIG_FILE": str(tmp_path / "none"),
                          "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"})
    assert result.returncode == 0, result.stderr
    rows = [r for r in json.loads(result.stdout)["cells"] if r["provider"] == "vastai"]
    assert len(rows) == 1
    row = rows[0]
    assert (row["price_source"], row["price_origin"], row["hourly_usd"], row["offer"]) == (
        "catalog", "vastai public listing", pytest.approx(10.585), None)
    assert row["warning"] == "not an offer: no key to rent with"


def test_an_unreachable_listing_falls_back_to_the_snapshot_at_once(no_key: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A closed port: refused, retried once, then the snapshot prices the node (exit 0), and the
    listing is not asked again for the next market (no wait on a network timeout)."""
    url = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("VAST_URL", url)
    tries = []
    real = requests.Session.send

    def counted(self: requests.Session, request: requests.PreparedRequest, **kwargs: object) -> requests.Response:
        tries.append(request.url)
        return real(self, request, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(requests.Session, "send", counted)
    started = time.monotonic()
    out = cli_here("offers", "--provider", "vastai", "--count", "8", home=tmp_path / "home")
    assert out.returncode == 0, out.stderr
    assert time.monotonic() - started < vastai.PUBLIC_TIMEOUT_S, "no network timeout was waited on"
    assert [line.split() for line in out.stdout.splitlines() if line.startswith("vastai ")] == [
        ["vastai", "H100_SXM", "8", "on-demand", "-", "-", "16", "catalog", "-"]]
    assert "snapshot: skypilot-catalog vast/vms.csv@01b8cdda" in out.stdout
    assert len(tries) == 2 and all(t.startswith(url) for t in tries), "one try and one retry, for both markets"
