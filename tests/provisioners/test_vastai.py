"""The vastai provider through the real vastai SDK against the local Vast.ai fake."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.provisioners import vastai
from benchctl.provisioners.base import NoCapacity, NodeState, OfferRequest, ProviderError
from benchctl.provisioners.vastai import Limiter, VastProvider, VastSettings, instance_state
from tests.fakes.vastai_fake import RATE_LIMITS, FakeVast, running_fake_vast, ssh_banner
from tests.fakes.virtual_clock import VirtualClock
from tests.provisioners.conftest import IMAGE_PYTHON, image_environ, run_in_bare_session


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: VirtualClock) -> Iterator[FakeVast]:
    """Vast's own intervals, measured on a virtual clock that the providers' limiters wait on: no
    test waits them out, and none depends on how fast this machine answers."""
    server = FakeVast("vast-key", ssh_port=2222, authorized_keys=tmp_path / "authorized_keys",
                      workdir=tmp_path / "work", boot_s=0.0, clock=clock)
    monkeypatch.setattr(vastai, "_LIMITERS", {})
    monkeypatch.setattr(vastai, "Limiter", lambda: Limiter(clock=clock, sleep=clock.sleep))
    with running_fake_vast(server) as url:
        monkeypatch.setenv("VAST_URL", url)
        monkeypatch.setenv("VAST_API_KEY", "vast-key")
        yield server
    assert server.inventory() == [], "a test left a node billing at the fake"


def _provider(tmp_path: Path, request_timeout_s: float = 30.0, **settings: object) -> VastProvider:
    provider = VastProvider(tmp_path / "vastai", VastSettings(**settings),  # type: ignore[arg-type]
                            request_timeout_s=request_timeout_s)
    provider.sleep = lambda s: None
    return provider


def test_offers_filter_and_price_what_is_billed(fake: FakeVast, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    on_demand = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand", min_vcpus=128))
    assert [(o.offer_id, o.host, o.vcpus) for o in on_demand] == [("1001", "501", 192)], \
        "1003 (reliability 0.90) is below the 0.98 floor: the documented `reliability` filter applies"
    assert on_demand[0].hourly_usd == pytest.approx(16.8 + 0.3 * 60 / 720), "dph_total for the 60 GB rented, not 5"
    assert "60 GB" in on_demand[0].details["pricing"]
    spot = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="spot"))
    disk = 0.3 * 60 / 720
    assert [(o.offer_id, o.details["bid"], o.hourly_usd) for o in spot] == [
        ("1002", 8.91, pytest.approx(8.91 + disk, abs=1e-4)), ("1001", 10.56, pytest.approx(10.56 + disk, abs=1e-4))], \
        "bids are min_bid × 1.1; billed is the bid plus the disk's storage, cheapest first"
    assert "min_bid" in spot[0].details["pricing"] and "storage" not in spot[0].details["pricing"].split("+")[0]
    assert [o.offer_id for o in provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="spot",
                                                             exclude_hosts=("502",)))] == ["1001"], \
        "a machine that failed preflight is excluded from the query"
    datacenter = _provider(tmp_path, datacenter_only=True)
    assert [o.offer_id for o in datacenter.offers(OfferRequest(gpu="H100_SXM", count=8, market="spot"))] == ["1001"]
    strict = _provider(tmp_path, min_cuda=12.6)
    assert [o.offer_id for o in strict.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))] == ["1001"]
    assert sum(fake.throttled.values()) == 0, "five searches, spaced as Vast asks"


def test_rent_status_outbid_owned_destroy(fake: FakeVast, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market="spot"))
    node = provider.launch(offer, "bc-tok", "bc-camp-1")
    body = fake.rent_bodies[-1]
    assert body["price"] == pytest.approx(0.044) and body["label"] == "bc-camp-1--bc-tok" and body["disk"] == 60
    assert node.hourly_usd == pytest.approx(0.044 + 0.12 * 60 / 720)
    assert node.hourly_usd == pytest.approx(offer.hourly_usd, abs=1e-4), "priced as billed"
    assert node.host == "602"
    assert "ssh-ed25519" in (tmp_path / "authorized_keys").read_text()
    assert provider.status(node) is NodeState.RUNNING
    assert [n.token for n in provider.owned("bc-camp-1")] == ["bc-tok"]
    assert provider.offers(OfferRequest(gpu="cpu", count=1, market="spot"))[0].offer_id == "2001", "rented is gone"
    fake.outbid(int(node.node_id))
    assert provider.status(node) is NodeState.PREEMPTED
    fake.set_status(int(node.node_id), "running", cur_state="running", intended_status="running",
                    next_state="running")  # Vast resumes it when the bid wins again
    assert provider.status(node) is NodeState.PREEMPTED, "its payload died when it was paused: still preempted"
    provider.terminate(node)
    provider.terminate(node)  # gone is success
    assert fake.inventory() == [] and provider.status(node) is NodeState.PREEMPTED


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
    assert len(errors) == 1 and isinstance(errors[0], NoCapacity), "an offer gone (410 no_such_ask) is NoCapacity"
    assert "no longer available" in str(errors[0]) and "\n" not in str(errors[0])
    assert len(fake.inventory()) == 1 and fake.calls["create"] == 2, "refused at once, never retried"
    for node in provider.owned("bc-camp-2"):
        provider.terminate(node)
    assert fake.inventory() == []


def test_an_unknown_offer_is_no_capacity(fake: FakeVast, tmp_path: Path) -> None:
    """Vast answers a rent of an offer it does not have with a 404 whose code is ``invalid_args``
    (``no_such_ask`` is in its message only: vast-ai/docs api-reference/openapi/yaml/create_instance.yaml):
    the next offer is tried, the attempt is not spent as a failed launch."""
    provider = _provider(tmp_path)
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))
    fake.offers.pop(int(offer.offer_id))  # the host withdrew it between search and rent
    with pytest.raises(NoCapacity, match="is not available"):
        provider.launch(offer, "bc-gone", "bc-camp-7")
    assert fake.calls["create"] == 1


@pytest.mark.parametrize("market", ["on-demand", "spot"])
def test_an_offer_that_cannot_start_now_is_refused_not_left_stopped(fake: FakeVast, tmp_path: Path,
                                                                    market: str) -> None:
    """Without ``cancel_unavail`` (the SDK sends false unless told) Vast creates an instance that
    cannot start now stopped, billing its disk, and answers success (vast-cli ``--cancel-unavail``);
    with it, 410 ``no_such_ask``: the rent is NoCapacity and nothing is left at Vast."""
    provider = _provider(tmp_path)
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market=market))  # type: ignore[arg-type]
    fake.unschedulable.add(int(offer.offer_id))
    with pytest.raises(NoCapacity, match="no longer available"):
        provider.launch(offer, "bc-wait", "bc-camp-11")
    assert fake.rent_bodies == [] and fake.inventory() == [], "no instance waits, stopped, billing its disk"


def test_a_destroy_answered_success_false_is_not_taken_for_done(fake: FakeVast, tmp_path: Path) -> None:
    """A 200 destroy whose ``success`` is false destroyed nothing (openapi destroy_instance.yaml:
    "Whether the destruction was successful"; dstack 154d70df2 raises on it): terminate says so, and
    succeeds once Vast destroys it or no longer has it."""
    provider = _provider(tmp_path)
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))
    node = provider.launch(offer, "bc-keep", "bc-camp-12")
    fake.destroy_refused = 1
    with pytest.raises(ProviderError, match="did not destroy"):
        provider.terminate(node)
    assert fake.inventory() == [int(node.node_id)], "still billing: not reported as terminated"
    provider.terminate(node)
    assert fake.inventory() == []
    fake.destroy_refused = 1
    provider.terminate(node)  # refused, but Vast no longer has it: gone is success


@pytest.mark.parametrize("fault", ["429", "500", "malformed", "drop", "slow"])
def test_transient_faults_are_retried(fake: FakeVast, tmp_path: Path, fault: str) -> None:
    provider = _provider(tmp_path, request_timeout_s=1.0)
    fake.faults = [fault, fault]
    assert provider.offers(OfferRequest(gpu="cpu", count=1, market="spot")) and fake.faults == []


def test_the_daily_search_quota_is_reported_not_retried(fake: FakeVast, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    fake.faults = ["quota", "quota", "quota"]
    with pytest.raises(vastai.SearchQuotaExceeded, match=r"daily search quota .* resets at midnight UTC, in \d+h"):
        provider.offers(OfferRequest(gpu="cpu", count=1, market="spot"))
    assert fake.faults == ["quota", "quota"], "one search, not retried"


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
    ({"actual_status": "created", "intended_status": "running"}, NodeState.STARTING),
    ({"actual_status": None, "intended_status": "running"}, NodeState.STARTING),
    ({"actual_status": "stopped", "intended_status": "running", "is_bid": True}, NodeState.PREEMPTED),
    ({"actual_status": "exited", "intended_status": "running", "is_bid": True}, NodeState.PREEMPTED),
    ({"actual_status": "rebooting", "intended_status": "running", "is_bid": True}, NodeState.PREEMPTED),
    ({"actual_status": "exited", "intended_status": "running", "is_bid": False}, NodeState.TERMINATED),
    ({"actual_status": "rebooting", "intended_status": "running", "is_bid": False}, NodeState.TERMINATED),
    ({"actual_status": "running", "intended_status": "stopped", "is_bid": True}, NodeState.TERMINATED),
    ({"actual_status": "stopped", "cur_state": "stopped", "intended_status": "stopped", "next_state": "stopped",
      "is_bid": True}, NodeState.PREEMPTED),
    ({"actual_status": None, "cur_state": "stopped", "intended_status": "stopped", "next_state": "stopped",
      "is_bid": True}, NodeState.PREEMPTED),
    ({"actual_status": "stopped", "cur_state": "stopped", "intended_status": "stopped", "next_state": "stopped",
      "is_bid": False}, NodeState.TERMINATED),
    ({"actual_status": "offline", "intended_status": "running", "is_bid": False}, NodeState.UNKNOWN),
    ({"actual_status": "offline", "intended_status": "running", "is_bid": True}, NodeState.UNKNOWN),
    ({"actual_status": "unknown", "intended_status": "running"}, NodeState.UNKNOWN),
    ({"actual_status": "frozen", "intended_status": "running"}, NodeState.UNKNOWN),
])
def test_every_status_maps(instance: dict | None, state: NodeState) -> None:
    assert instance_state(instance) is state


@pytest.mark.parametrize("mode", ["direct", "proxy"])
def test_ssh_endpoint_direct_or_through_the_proxy(fake: FakeVast, tmp_path: Path, mode: str) -> None:
    provider = _provider(tmp_path, ssh=mode)
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))
    with ssh_banner() as direct, ssh_banner() as proxy:
        fake.direct_port, fake.proxy_port = direct, proxy
        node = provider.launch(offer, f"bc-{mode}", "bc-camp-3")
        endpoint = provider.transport(node).endpoint
        assert (endpoint.host, endpoint.port, endpoint.user) == ("127.0.0.1", direct if mode == "direct" else proxy,
                                                                 "root")
        assert endpoint.key is not None and endpoint.key.endswith("bc-camp-3")
        reads = fake.calls["show_instance"]
        for _ in range(3):
            assert provider.transport(node).endpoint.port == endpoint.port
        assert fake.calls["show_instance"] == reads, "the address is read once per node, not on every transport"
    provider.terminate(node)
    assert fake.inventory() == []


def test_direct_ssh_that_never_greets_falls_back_to_the_proxy(fake: FakeVast, tmp_path: Path) -> None:
    provider = _provider(tmp_path, ssh="direct")
    provider.probe_timeout_s = 0.3
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))
    with ssh_banner(banner=False) as silent, ssh_banner() as proxy:
        fake.direct_port, fake.proxy_port = silent, proxy  # the direct port connects, then times out
        node = provider.launch(offer, "bc-silent", "bc-camp-4")
        assert provider.transport(node).endpoint.port == proxy
    provider.terminate(node)


def test_polling_nodes_stays_within_the_rate_limits(fake: FakeVast, tmp_path: Path, clock: VirtualClock) -> None:
    """Every call waits on the key's one limiter, by Vast's interval for its endpoint: at Vast's own
    intervals (on the shared virtual clock) the fake refuses none."""
    provider = _provider(tmp_path)
    offers = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))
    nodes = [provider.launch(o, f"bc-p{i}", "bc-camp-5") for i, o in enumerate(offers)]
    others = [_provider(tmp_path) for _ in nodes]  # one provider per cell, as each cell may hold its own
    started = clock()
    states = [p.status(n) for _ in range(3) for p, n in zip(others, nodes, strict=True)]
    assert states == [NodeState.RUNNING] * 3 * len(nodes)
    assert clock() - started >= (3 * len(nodes) - 1) * RATE_LIMITS["show_instance"], "spaced across providers"
    for node in nodes:
        provider.terminate(node)
    assert fake.throttled == {}, f"no call came sooner than Vast allows: {dict(fake.throttled)}"
    assert fake.calls["show_instance"] >= 3 * len(nodes)


def test_providers_polling_from_many_threads_share_one_limiter(fake: FakeVast, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads each with its own provider take their slots from the one limiter of the key: on a
    clock that stands still, the waits are exactly one interval apart, one slot per call (what
    reaches the fake when is up to the machine's scheduler, so the fake's limits are off here)."""
    provider = _provider(tmp_path)
    offers = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))
    nodes = [provider.launch(o, f"bc-t{i}", "bc-camp-5") for i, o in enumerate(offers)]
    waits: list[float] = []
    monkeypatch.setattr(vastai, "_LIMITERS", {})
    monkeypatch.setattr(vastai, "Limiter", lambda: Limiter(clock=lambda: 0.0, sleep=waits.append))
    fake.rate_limits = {}
    others = [_provider(tmp_path) for _ in nodes]
    states: list[NodeState] = []

    def poll(p: VastProvider, node: object) -> None:
        for _ in range(3):
            states.append(p.status(node))  # type: ignore[arg-type]

    threads = [threading.Thread(target=poll, args=(p, n)) for p, n in zip(others, nodes, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert states == [NodeState.RUNNING] * 3 * len(nodes)
    slot = vastai.MIN_INTERVAL_S["show_instance"] * 1.1
    assert sorted(waits) == pytest.approx([k * slot for k in range(1, 3 * len(nodes))])
    for node in nodes:
        provider.terminate(node)


def test_the_limiter_spaces_each_endpoint_across_threads() -> None:
    now = [100.0]
    slept: list[float] = []
    lock = threading.Lock()

    def sleep(s: float) -> None:
        with lock:
            slept.append(round(s, 6))

    limiter = Limiter(clock=lambda: now[0], sleep=sleep, intervals={"show_instance": 2.0, "create": 4.5}, margin=0)
    threads = [threading.Thread(target=limiter.wait, args=("show_instance",)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    limiter.wait("create")
    assert sorted(slept) == [2.0, 4.0], "three calls at one instant: now, +2 s, +4 s; create is its own endpoint"
    assert vastai.shared_limiter("k1") is vastai.shared_limiter("k1") is not vastai.shared_limiter("k2")


def test_a_create_that_timed_out_is_looked_up_not_re_sent(fake: FakeVast, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vastai, "CREATE_TIMEOUT_S", 0.5, raising=False)
    provider = _provider(tmp_path, request_timeout_s=0.5)
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))
    fake.faults = ["slow_create"]  # Vast rents, but answers after the client gave up
    node = provider.launch(offer, "bc-slow", "bc-camp-6")
    assert fake.calls["create"] == 1 and len(fake.inventory()) == 1, "one create sent, one instance"
    assert node.node_id == str(fake.inventory()[0]) and node.token == "bc-slow"
    provider.terminate(node)


def test_the_create_timeout_is_the_sdks(fake: FakeVast, tmp_path: Path) -> None:
    provider = _provider(tmp_path, request_timeout_s=30.0)
    assert provider.sdk.client.timeout == 30.0 and provider.create_sdk.client.timeout == 120.0


def test_owned_pages_through_every_instance_within_the_listing_interval(fake: FakeVast, tmp_path: Path) -> None:
    """Vast lists at most 25 instances a page, and each page is one call under GET v1/instances'
    interval: a campaign's nodes past the first page are still found, with no call refused."""
    mine = [fake.add_instance(f"bc-camp-8--bc-t{i}") for i in range(40)]
    for i in range(15):
        fake.add_instance(f"someone-else-{i}")
    provider = _provider(tmp_path)
    assert sorted(int(n.node_id) for n in provider.owned("bc-camp-8")) == mine
    assert fake.calls["show_instances"] == 3, "55 instances: three pages of at most 25"
    assert fake.throttled == {}, f"no page came sooner than Vast allows: {dict(fake.throttled)}"
    for node_id in fake.inventory():
        fake.destroy(node_id)


@pytest.mark.parametrize(("status", "names_it"), [(400, True), (200, True), (400, False)])
def test_a_lost_bid_is_no_capacity_and_its_stopped_instance_is_destroyed(fake: FakeVast, tmp_path: Path,
                                                                         status: int, names_it: bool) -> None:
    """Vast creates a losing bid's instance stopped (billing its disk) and answers an error: the
    rent is NoCapacity, and the instance it left is found and destroyed."""
    provider = _provider(tmp_path)
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market="spot"))
    fake.offers[int(offer.offer_id)]["min_bid"] = 1.0  # the market moved between search and rent
    fake.failed_bid_status, fake.failed_bid_names_it = status, names_it
    with pytest.raises(NoCapacity, match="bid"):
        provider.launch(offer, "bc-lost", "bc-camp-9")
    assert fake.calls["create"] == 1, "a lost bid is not sent again"
    assert fake.inventory() == [], "the stopped instance the lost bid left is destroyed"


def test_the_idle_shutdown_destroys_the_instance_from_a_bare_ssh_session(fake: FakeVast, tmp_path: Path) -> None:
    """The dead-man's shutdown runs in the payload's environment (an SSH session's: no container
    variables); it reads CONTAINER_API_KEY from the container's own environment and destroys the
    instance at Vast. The command itself holds no key."""
    provider = _provider(tmp_path, python=IMAGE_PYTHON)  # only on the image's PATH, as pytorch/pytorch's
    provider.container_environ = str(tmp_path / "container-environ")
    (offer, *_) = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))
    node = provider.launch(offer, "bc-dead", "bc-camp-10")
    environ = image_environ(tmp_path, fake.container_environ(int(node.node_id)))
    payload_python = provider.transport(node).python  # what starts the payload over SSH
    ran = run_in_bare_session(f"{payload_python} -c 'print(6 * 7)'", environ, tmp_path)
    assert (ran.returncode, ran.stdout) == (0, "42\n"), ran.stderr
    command = provider.idle_shutdown_command(node)
    assert command is not None and fake.container_keys[int(node.node_id)] not in command
    assert "vast-key" not in command, "the controller's key never goes to a node"
    done = run_in_bare_session(command, environ, tmp_path)
    assert done.returncode == 0, done.stderr
    assert fake.inventory() == [], "the instance destroyed itself"
    assert fake.container_keys[int(node.node_id)] not in done.stdout + done.stderr
