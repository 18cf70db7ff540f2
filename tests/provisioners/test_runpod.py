"""The runpod provider through the real runpod SDK against the local RunPod fake."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.provisioners.base import NodeState, OfferRequest, ProviderError
from benchctl.provisioners.runpod.provider import RunPodProvider, RunPodSettings, pod_state
from tests.fakes.runpod_fake import FakeRunPod
from tests.provisioners.conftest import IMAGE_PYTHON, image_environ, run_in_bare_session


@pytest.fixture
def fake(runpod_fake: FakeRunPod) -> Iterator[FakeRunPod]:
    yield runpod_fake
    assert runpod_fake.inventory() == [], "a test left a node billing at the fake"


def _provider(tmp_path: Path, cloud: str = "SECURE", sleeps: list[float] | None = None) -> RunPodProvider:
    """The provider on the fake; its retry waits go to ``sleeps`` (none of them real)."""
    provider = RunPodProvider(tmp_path / "runpod", RunPodSettings(cloud=cloud))
    provider.sleep = (sleeps if sleeps is not None else []).append
    return provider


def test_offers_price_on_demand_per_cloud(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = _provider(tmp_path, cloud="ALL")
    on_demand = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    assert [(o.region, o.hourly_usd) for o in on_demand] == [("community", 21.52), ("secure", 23.92)]
    with pytest.raises(ProviderError, match="no GPU type"):
        provider.offers(OfferRequest(gpu="NO_SUCH_GPU", count=8, market="on-demand"))


def test_launch_status_owned_and_terminate(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    (offer, *_) = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    node = provider.launch(offer, "bc-tok1", "bc-camp-1")
    pod = fake.pods[node.node_id]
    assert pod["name"] == "bc-camp-1--bc-tok1" and pod["podType"] == "RESERVED"
    assert node.hourly_usd == pytest.approx(2.99 * 8), "the pod's costPerHr is the price"
    assert "ssh-ed25519" in (tmp_path / "authorized_keys").read_text(), "the start command put it in"
    assert oct((tmp_path / "runpod" / "keys" / "bc-camp-1").stat().st_mode & 0o777) == "0o600"
    assert provider.status(node) is NodeState.RUNNING
    assert [n.token for n in provider.owned("bc-camp-1")] == ["bc-tok1"] and provider.owned("bc-other") == []
    provider.terminate(node)
    provider.terminate(node)  # gone is success
    assert fake.inventory() == [] and provider.status(node) is NodeState.TERMINATED


def test_on_demand_launch_goes_through_create_pod(fake: FakeRunPod, tmp_path: Path) -> None:
    provider = _provider(tmp_path)
    (offer, *_) = provider.offers(OfferRequest(gpu="H100_NVL", count=2, market="on-demand", image="img:1"))
    node = provider.launch(offer, "bc-tok2", "bc-camp-2")
    assert "podFindAndDeployOnDemand" in " ".join(fake.requests) and fake.pods[node.node_id]["podType"] == "RESERVED"
    assert fake.pods[node.node_id]["imageName"] == "img:1"
    provider.terminate(node)
    assert fake.inventory() == []


@pytest.mark.parametrize("fault", ["429", "500", "malformed", "drop"])
def test_transient_api_faults_are_retried(fake: FakeRunPod, tmp_path: Path, fault: str) -> None:
    provider = _provider(tmp_path)
    fake.faults = [fault, fault]
    offers = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    assert offers and fake.faults == [], "two failures, then the answer"


def test_a_request_past_its_timeout_is_retried(fake: FakeRunPod, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import requests

    real_post = requests.post

    def post_with_short_timeout(*args: object, **kwargs: object) -> requests.Response:
        return real_post(*args, **{**kwargs, "timeout": 1})  # the SDK waits 30 s: shortened for the test

    monkeypatch.setattr("runpod.api.graphql.requests.post", post_with_short_timeout)
    provider = _provider(tmp_path)
    fake.faults = ["slow"]
    assert provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand")) and fake.faults == []


def test_persistent_faults_and_refused_keys_are_clear_errors(fake: FakeRunPod, tmp_path: Path) -> None:
    sleeps: list[float] = []
    provider = _provider(tmp_path, sleeps=sleeps)
    fake.faults = ["500"] * 10
    with pytest.raises(ProviderError, match=r"unavailable .* \(retried\)"):
        provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    assert len(fake.faults) == 5 and len(sleeps) == 4, "bounded: five tries, four back-off waits"
    fake.faults = ["401"]
    before = len(fake.requests)
    with pytest.raises(ProviderError, match=r"refused the API key .* RUNPOD_API_KEY"):
        provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    assert len(fake.requests) == before + 1, "a 401 is not retried"


def test_missing_key_names_where_it_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    monkeypatch.setattr("runpod.api_key", None)
    with pytest.raises(ProviderError, match=r"RUNPOD_API_KEY.*config\.toml"):
        RunPodProvider(tmp_path / "runpod")


@pytest.mark.parametrize(("pod", "state"), [
    (None, NodeState.TERMINATED),
    ({"desiredStatus": "RUNNING", "runtime": {"ports": [{"ip": "1.2.3.4", "isIpPublic": True, "privatePort": 22,
                                                         "publicPort": 40022}]}}, NodeState.RUNNING),
    ({"desiredStatus": "RUNNING", "runtime": {"ports": []}}, NodeState.STARTING),
    ({"desiredStatus": "RUNNING", "runtime": {"ports": [{"ip": "10.0.0.2", "isIpPublic": False, "privatePort": 22,
                                                         "publicPort": 22}]}}, NodeState.STARTING),
    ({"desiredStatus": "RUNNING", "runtime": None}, NodeState.STARTING),
    ({"desiredStatus": "CREATED"}, NodeState.STARTING),
    ({"desiredStatus": "RESTARTING"}, NodeState.STARTING),
    ({"desiredStatus": "EXITED", "podType": "INTERRUPTABLE"}, NodeState.PREEMPTED),
    ({"desiredStatus": "EXITED", "podType": "RESERVED"}, NodeState.TERMINATED),
    ({"desiredStatus": "PAUSED"}, NodeState.TERMINATED),
    ({"desiredStatus": "DEAD"}, NodeState.TERMINATED),
    ({"desiredStatus": "TERMINATED"}, NodeState.TERMINATED),
    ({"desiredStatus": "MIGRATING"}, NodeState.UNKNOWN),
])
def test_every_desired_status_maps(pod: dict | None, state: NodeState) -> None:
    assert pod_state(pod) is state
    json.dumps(pod)  # plain data, as the API returns it


def test_a_pod_seen_running_then_restarting_ends_the_attempt(fake: FakeRunPod, tmp_path: Path) -> None:
    """A restart kills the container and wipes its disk (the payload and its events with it): a pod
    that was running and then restarts is preempted, and stays so once it runs again."""
    provider = _provider(tmp_path)
    (offer, *_) = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    node = provider.launch(offer, "bc-restart", "bc-camp-r")
    assert provider.status(node) is NodeState.RUNNING
    fake.restart(node.node_id)
    assert provider.status(node) is NodeState.PREEMPTED
    fake.come_back(node.node_id)
    assert provider.status(node) is NodeState.PREEMPTED, "a fresh container: the attempt's payload is gone"
    fresh = provider.launch(offer, "bc-booting", "bc-camp-r")
    fake.restart(fresh.node_id)  # restarting before it ever ran: still on its way up
    assert provider.status(fresh) is NodeState.STARTING
    for n in (node, fresh):
        provider.terminate(n)


def test_the_idle_shutdown_terminates_the_pod_from_a_bare_ssh_session(fake: FakeRunPod, tmp_path: Path) -> None:
    """The dead-man's shutdown runs where RUNPOD_POD_ID and RUNPOD_API_KEY are not set (an SSH
    session): the pod id comes from the controller, the pod's own key from its container's
    environment, and the pod is terminated at RunPod."""
    provider = RunPodProvider(tmp_path / "runpod", RunPodSettings(python=IMAGE_PYTHON))  # only on the image's PATH
    provider.container_environ = str(tmp_path / "container-environ")
    (offer, *_) = provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    node = provider.launch(offer, "bc-dead", "bc-camp-d")
    environ = image_environ(tmp_path, fake.container_environ(node.node_id))
    payload_python = provider.transport(node).python  # what starts the payload over SSH
    ran = run_in_bare_session(f"{payload_python} -c 'print(6 * 7)'", environ, tmp_path)
    assert (ran.returncode, ran.stdout) == (0, "42\n"), ran.stderr
    command = provider.idle_shutdown_command(node)
    assert command is not None and fake.pod_keys[node.node_id] not in command and "rp-key" not in command
    done = run_in_bare_session(command, environ, tmp_path)
    assert done.returncode == 0, done.stderr
    assert fake.inventory() == [], "the pod terminated itself"
