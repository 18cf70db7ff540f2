"""The runpod provider against RunPod's behaviour as its real API shows it (issue 16: capacity
errors, spot that RunPod no longer rents, SSH ports published late, the per-pod key, unknown GPU ids, a
create whose answer was lost), through the real runpod SDK and the local RunPod fake."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.provisioners.base import NoCapacity, NodeState, OfferRequest, ProviderError, Unavailable
from benchctl.provisioners.runpod import queries as runpod_graphql
from benchctl.provisioners.runpod.provider import RunPodProvider, RunPodSettings, UnknownGpuType
from tests.conftest import cli_here
from tests.fakes.runpod_fake import FakeRunPod


@pytest.fixture
def fake(runpod_fake: FakeRunPod) -> Iterator[FakeRunPod]:
    yield runpod_fake
    assert runpod_fake.inventory() == [], "a test left a node billing at the fake"


def _provider(tmp_path: Path, cloud: str = "ALL") -> RunPodProvider:
    provider = RunPodProvider(tmp_path / "runpod", RunPodSettings(cloud=cloud))
    provider.sleep = lambda s: None
    return provider


def _creates(fake: FakeRunPod) -> int:
    return sum("podFindAndDeployOnDemand" in r or "podRentInterruptable" in r for r in fake.requests)


def test_out_of_capacity_is_no_capacity_at_once_and_the_other_cloud_still_rents(fake: FakeRunPod,
                                                                                tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    offers = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    assert [o.region for o in offers] == ["community", "secure"], "one offer per cloud type"
    fake.sold_out = {("NVIDIA H100 80GB HBM3", "COMMUNITY")}
    with pytest.raises(NoCapacity, match="no longer any instances available"):
        provider.launch(offers[0], "bc-tok1", "bc-camp")
    assert _creates(fake) == 1, "a capacity error is reported at once, not re-sent"
    node = provider.launch(offers[1], "bc-tok2", "bc-camp")  # the next offer: the other cloud type
    assert fake.pods[node.node_id]["name"] == "bc-camp--bc-tok2"
    provider.terminate(node)


def test_an_unknown_gpu_id_is_bad_input_asked_once(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    request = OfferRequest(gpu="H100-SXM", count=8, market="on-demand", label="runpod:H100-SXMx8:on-demand")
    with pytest.raises(UnknownGpuType, match="runpod:H100-SXMx8:on-demand: runpod has no GPU type 'H100-SXM'"):
        provider.offers(request)
    assert len(fake.requests) == 1, "bad input is not retried"
    with pytest.raises(UnknownGpuType, match="H100-SXM"):
        provider.check_access([OfferRequest(gpu="H100_SXM", count=8, market="on-demand"), request])
    provider.check_access([OfferRequest(gpu="H100_SXM", count=8, market="on-demand")])


def _campaign(tmp_path: Path, gpu: str, market: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text("name: c\nbudget_usd: 100\ntarget: {model: nanochat-d1, vocab_size: 512, "
                    "target_param_data_ratio: 8.5, total_batch_size: 524288}\n"
                    f"matrix:\n  - {{provider: runpod, gpu: {gpu}, count: 8, market: {market}}}\n")
    return path


def test_plan_refuses_an_unknown_runpod_gpu_with_exit_2(fake: FakeRunPod, tmp_path: Path) -> None:
    # 'H100-SXM' is now read as benchctl's H100_SXM (payload.node.gpu_models.canonical); a name no node check
    # knows is refused when the campaign is read, with the names to use, before any provider is asked
    result = cli_here("plan", str(_campaign(tmp_path, "H100SXM", "on-demand")), home=tmp_path / "home")
    assert result.returncode == 2, result.stderr
    assert "unknown GPU model 'H100SXM'" in result.stderr and "H100_SXM" in result.stderr
    assert "Traceback" not in result.stderr and not fake.requests


def test_spot_is_refused_plainly_and_never_bid_for(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    spot = OfferRequest(gpu="H100_SXM", count=8, market="spot", label="runpod:H100_SXMx8:spot")
    with pytest.raises(ProviderError, match=r"^runpod:H100_SXMx8:spot: RunPod spot is unavailable"):
        provider.validate(spot)
    with pytest.raises(ProviderError, match="RunPod spot is unavailable"):
        provider.offers(spot)
    assert fake.requests == [], "nothing asked, nothing bid"
    assert not any("podRentInterruptable" in q for q in runpod_graphql.QUERIES)


def test_plan_refuses_a_runpod_spot_cell_with_exit_2(fake: FakeRunPod, tmp_path: Path) -> None:
    result = cli_here("plan", str(_campaign(tmp_path, "H100_SXM", "spot")), home=tmp_path / "home")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: runpod:H100_SXMx8:spot: RunPod spot is unavailable: RunPod's supported APIs (REST v2, the runpod "
        "SDK) rent no interruptible pods; use market: on-demand"]
    assert fake.requests == []


def test_ssh_waits_for_a_public_port_22_and_the_pod_gets_its_own_key(fake: FakeRunPod, tmp_path: Path) -> None:
    fake.account_keys = "ssh-ed25519 AAAAaccountkey someone@laptop"
    fake.ports_s = 600.0  # runtime now, ports later
    provider = _provider(tmp_path, cloud="SECURE")
    (offer, *_) = provider.offers(OfferRequest(gpu="H100_NVL", count=1, market="on-demand"))
    node = provider.launch(offer, "bc-tok3", "bc-camp")
    assert fake.pods[node.node_id]["desiredStatus"] == "RUNNING" and provider._pod(node.node_id)["runtime"]
    assert provider.status(node) is NodeState.STARTING, "a runtime without a public port 22 is not ready"
    fake.ports_s = 0.0
    assert provider.status(node) is NodeState.RUNNING
    endpoint = provider.transport(node).endpoint
    assert (endpoint.host, endpoint.port) == ("127.0.0.1", fake.ssh_port), "the public entry, not the private one"
    sent = json.loads(next(r for r in fake.requests if "podFindAndDeployOnDemand" in r))
    assert [e["key"] for e in sent["variables"]["input"]["env"]] == ["SSH_PUBLIC_KEY", "PUBLIC_KEY"]
    campaign = (tmp_path / "runpod" / "keys" / "bc-camp.pub").read_text().split()[1]
    authorized = (tmp_path / "authorized_keys").read_text()
    assert campaign in authorized, "the campaign key, put in by the start command"
    assert "accountkey" in authorized, "and the account's, as RunPod's /start.sh does with PUBLIC_KEY"
    provider.terminate(node)


def test_plan_says_the_image_must_run_sshd(fake: FakeRunPod, tmp_path: Path) -> None:
    result = cli_here("plan", str(_campaign(tmp_path, "H100_SXM", "on-demand")), home=tmp_path / "home")
    assert result.returncode == 0, result.stderr
    assert ("warning: runpod: the pod's start command authorizes the campaign key, then runs the image's "
            "/start.sh (RunPod's own images) or its sshd") in result.stdout


def test_a_create_whose_answer_was_lost_is_looked_up_not_resent(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = _provider(tmp_path, cloud="SECURE")
    (offer, *_) = provider.offers(OfferRequest(gpu="H100_NVL", count=1, market="on-demand"))
    fake.faults = ["answer_lost"]  # RunPod created the pod; its answer never arrived
    node = provider.launch(offer, "bc-tok4", "bc-camp")
    assert fake.inventory() == [node.node_id], "one pod, found by its name (the attempt token)"
    assert _creates(fake) == 1, "the create was not sent again"
    provider.terminate(node)


def test_a_create_that_never_arrived_is_sent_again_once_none_exists(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = _provider(tmp_path, cloud="SECURE")
    (offer, *_) = provider.offers(OfferRequest(gpu="H100_NVL", count=1, market="on-demand"))
    fake.faults = ["drop"]  # the connection closed before RunPod read the request
    node = provider.launch(offer, "bc-tok5", "bc-camp")
    assert fake.inventory() == [node.node_id] and _creates(fake) == 2
    provider.terminate(node)
    fake.faults = ["drop"] * 20
    with pytest.raises(Unavailable):
        provider.launch(offer, "bc-tok6", "bc-camp")
    assert fake.inventory() == []
