"""The vastai provider through the real vastai SDK against the local Vast.ai fake."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioners.base import NodeState, OfferRequest, ProviderError
from provisioners.vastai import VastProvider, VastSettings, instance_state
from tests.fakes.vastai_fake import FakeVast, running_fake_vast


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeVast]:
    server = FakeVast("vast-key", ssh_port=2222, authorized_keys=tmp_path / "authorized_keys",
                      workdir=tmp_path / "work", boot_s=0.0)
    with running_fake_vast(server) as url:
        monkeypatch.setenv("VAST_URL", url)
        monkeypatch.setenv("VAST_API_KEY", "vast-key")
        yield server
    assert server.inventory() == [], "a test left a node billing at the fake"


def _provider(tmp_path: Path, request_timeout_s: float = 30.0, **settings: object) -> VastProvider:
    return VastProvider(tmp_path / "vastai", VastSettings(**settings),  # type: ignore[arg-type]
                        request_timeout_s=request_timeout_s)


def test_offers_filter_and_price(fake: FakeVast, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    on_demand = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand", min_vcpus=128))
    assert [(o.offer_id, o.host, o.vcpus, o.hourly_usd) for o in on_demand] == [("1001", "501", 192, 16.8)]
    spot = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="spot"))
    assert [(o.offer_id, o.hourly_usd) for o in spot] == [("1002", 8.91), ("1001", 10.56)], \
        "bids are min_bid × 1.1, cheapest first"
    assert [o.offer_id for o in provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="spot",
                                                             exclude_hosts=("502",)))] == ["1001"], \
        "a machine that failed preflight is excluded from the query"
    datacenter = _provider(tmp_path, datacenter_only=True)
    assert [o.offer_id for o in datacenter.offers(OfferRequest(gpu="H100_SXM", count=8, market="spot"))] == ["1001"]
    strict = _provider(tmp_path, min_cuda=12.6)
    assert [o.offer_id for o in strict.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))] == ["1001"]


def test_rent_status_outbid_owned_destroy(fake: FakeVast, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market="spot"))
    node = provider.launch(offer, "bc-tok", "bc-camp-1")
    body = fake.rent_bodies[-1]
    assert body["price"] == pytest.approx(0.044) and body["label"] == "bc-camp-1--bc-tok"
    assert node.hourly_usd == pytest.approx(0.044) and node.host == "602"
    assert "ssh-ed25519" in (tmp_path / "authorized_keys").read_text()
    assert provider.status(node) is NodeState.RUNNING
    assert [n.token for n in provider.owned("bc-camp-1")] == ["bc-tok"]
    assert provider.offers(OfferRequest(gpu="cpu", count=1, market="spot"))[0].offer_id == "2001", "rented is gone"
    fake.outbid(int(node.node_id))
    assert provider.status(node) is NodeState.PREEMPTED
    provider.terminate(node)
    provider.terminate(node)  # gone is success
    assert fake.inventory() == [] and provider.status(node) is NodeState.TERMINATED


def test_two_cells_never_buy_one_offer(fake: FakeVast, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    offer = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))[0]
    results: list[object] = []

    def buy(token: str) -> None:
        try:
            results.append(provider.launch(offer, token, "bc-camp-2"))
        except ProviderError as exc:
            results.append(exc)

    threads = [threading.Thread(target=buy, args=(f"t{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [r for r in results if isinstance(r, ProviderError)]
    assert len(errors) == 1 and "not available" in str(errors[0]), "the second purchase of one offer is refused"
    assert len(fake.inventory()) == 1
    for node in provider.owned("bc-camp-2"):
        provider.terminate(node)
    assert fake.inventory() == []


@pytest.mark.parametrize("fault", ["429", "500", "malformed", "drop", "slow"])
def test_transient_faults_are_retried(fake: FakeVast, tmp_path: Path, fault: str) -> None:
    provider = _provider(tmp_path, request_timeout_s=1.0)
    fake.faults = [fault, fault]
    assert provider.offers(OfferRequest(gpu="cpu", count=1, market="spot")) and fake.faults == []


def test_persistent_faults_and_refused_keys(fake: FakeVast, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    fake.faults = ["500"] * 9
    with pytest.raises(ProviderError, match=r"unavailable .* \(retried\)"):
        provider.offers(OfferRequest(gpu="cpu", count=1, market="spot"))
    assert len(fake.faults) == 4, "bounded: five tries"
    fake.faults = ["401"]
    with pytest.raises(ProviderError, match=r"refused the API key .*VAST_API_KEY"):
        provider.offers(OfferRequest(gpu="cpu", count=1, market="spot"))
    assert fake.faults == []


def test_missing_key_names_where_it_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VAST_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    with pytest.raises(ProviderError, match=r"VAST_API_KEY.*vast_api_key"):
        VastProvider(tmp_path / "vastai")


@pytest.mark.parametrize(("instance", "state"), [
    (None, NodeState.TERMINATED),
    ({"actual_status": "running", "intended_status": "running"}, NodeState.RUNNING),
    ({"actual_status": "loading", "intended_status": "running"}, NodeState.STARTING),
    ({"actual_status": None, "intended_status": "running"}, NodeState.STARTING),
    ({"actual_status": "exited", "intended_status": "stopped", "is_bid": True}, NodeState.PREEMPTED),
    ({"actual_status": "running", "intended_status": "stopped", "is_bid": True}, NodeState.PREEMPTED),
    ({"actual_status": "exited", "intended_status": "running", "is_bid": False}, NodeState.TERMINATED),
    ({"actual_status": "offline", "intended_status": "running", "is_bid": False}, NodeState.TERMINATED),
    ({"actual_status": "frozen", "intended_status": "running"}, NodeState.UNKNOWN),
])
def test_every_status_maps(instance: dict | None, state: NodeState) -> None:
    assert instance_state(instance) is state


@pytest.mark.parametrize("mode", ["direct", "proxy"])
def test_ssh_endpoint_direct_or_through_the_proxy(fake: FakeVast, tmp_path: Path, mode: str) -> None:
    provider = _provider(tmp_path, ssh=mode)
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))
    fake.proxy_port = 3333
    node = provider.launch(offer, f"bc-{mode}", "bc-camp-3")
    endpoint = provider.transport(node).endpoint
    assert (endpoint.host, endpoint.port, endpoint.user) == ("127.0.0.1", 2222 if mode == "direct" else 3333, "root")
    assert endpoint.key is not None and endpoint.key.endswith("bc-camp-3")
    provider.terminate(node)
    assert fake.inventory() == []
