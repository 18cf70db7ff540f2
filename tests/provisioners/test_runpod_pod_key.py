"""The campaign key reaches the pod's own sshd: the pod's start command (``dockerArgs``) authorizes it
in the container, whatever RunPod does with the env (``SSH_PUBLIC_KEY`` is for RunPod's proxied SSH;
RunPod images' ``/start.sh`` authorizes the account's ``PUBLIC_KEY`` only). The fake's container runs
that command in real bash (tests/fakes/runpod_container.py); a real sshd plays the pod's."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.provisioners.base import OfferRequest
from benchctl.provisioners.runpod.provider import DEFAULT_IMAGE, RunPodProvider, RunPodSettings
from tests.fakes.runpod_fake import FakeRunPod, running_fake_runpod
from tests.fakes.sshd import running_sshd

ACCOUNT_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGP+L8hnjIcBqUb8NRrDiC32FuJBvRA0m8jLShzgq6BQ someone@laptop"
DOCKER_ARGS = re.compile(r"bash -c 'echo ([A-Za-z0-9+/]+=*) \| base64 -d > /tmp/benchctl-start\.sh; "
                         r"exec bash /tmp/benchctl-start\.sh'")


@pytest.fixture
def pod_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunPod]:
    """The RunPod fake whose pods' SSH port is a real sshd; no pod may be left."""
    with running_sshd(tmp_path / "sshd") as sshd:
        fake = FakeRunPod("rp-key", ssh_port=sshd.port, authorized_keys=sshd.root / "authorized_keys",
                          workdir=tmp_path / "pods", boot_s=0.0)
        with running_fake_runpod(fake) as url:
            monkeypatch.setenv("RUNPOD_API_BASE_URL", url)
            monkeypatch.setenv("RUNPOD_API_KEY", "rp-key")
            yield fake
        assert fake.inventory() == [], "a test left a pod billing at the fake"


def _launch(tmp_path: Path, image: str, tag: str = "bc-camp") -> tuple[RunPodProvider, str]:
    provider = RunPodProvider(tmp_path / "runpod", RunPodSettings(cloud="SECURE", workdir=str(tmp_path / "work")))
    provider.sleep = lambda s: None
    (offer, *_) = provider.offers(OfferRequest(gpu="H100_NVL", count=1, market="on-demand", image=image))
    return provider, provider.launch(offer, "bc-tok", tag).node_id


@pytest.mark.parametrize(("image", "account_keys", "no_sshd"), [
    (DEFAULT_IMAGE, "", False),  # no account key: /start.sh alone would not even start sshd
    (DEFAULT_IMAGE, ACCOUNT_KEY, False),  # /start.sh authorizes the account's key, not the campaign's
    ("example/pytorch:cpu", "", False),  # no /start.sh: the start command starts the image's sshd
    ("example/slim:1", "", True),  # no openssh-server: apt-get installs it
], ids=["runpod-image", "runpod-image-account-key", "other-image", "image-without-sshd"])
def test_the_campaign_key_reaches_the_pods_own_sshd(pod_machine: FakeRunPod, tmp_path: Path, image: str,
                                                    account_keys: str, no_sshd: bool) -> None:
    fake = pod_machine
    fake.account_keys = account_keys
    if no_sshd:
        fake.no_sshd.add(image)
    provider, pod_id = _launch(tmp_path, image)
    node = next(n for n in provider.owned("bc-camp") if n.node_id == pod_id)
    transport = provider.transport(node)
    transport.retry_for_s = 0.0  # the container authorized what it would before the pod was answered
    try:
        result = transport.run("echo on-the-pod")
        assert result.out.strip() == "on-the-pod", (result, fake.booted[pod_id].log)
    finally:
        transport.close()
        provider.terminate(node)


def test_the_start_command_carries_the_public_key_only_as_data(pod_machine: FakeRunPod, tmp_path: Path) -> None:
    tag = "bc-$(touch pwned)'\"\nx"  # a comment that would run, close quotes and add a line if pasted
    provider, pod_id = _launch(tmp_path, DEFAULT_IMAGE, tag)
    (create,) = [json.loads(r) for r in pod_machine.requests if "podFindAndDeployOnDemand" in r]
    sent = create["variables"]["input"]
    public = " ".join((tmp_path / "runpod" / "keys" / f"{tag}.pub").read_text().split())
    assert sent["env"] == [{"key": "SSH_PUBLIC_KEY", "value": public}, {"key": "PUBLIC_KEY", "value": public}]
    match = DOCKER_ARGS.fullmatch(sent["dockerArgs"])
    assert match, sent["dockerArgs"]
    script = base64.b64decode(match.group(1)).decode()
    assert "rp-key" not in json.dumps(sent) and "rp-key" not in script, "no secret goes to the pod"
    container = pod_machine.containers / pod_id
    assert not list(container.rglob("pwned")), "nothing in the key ran"
    lines = (container / "root/.ssh/authorized_keys").read_text().splitlines()
    assert public in lines and not any(line.startswith("x") for line in lines), "one line, the key's"
    assert oct((container / "root/.ssh").stat().st_mode & 0o777) == "0o700"
    provider.terminate(next(n for n in provider.owned(tag) if n.node_id == pod_id))


def test_an_image_without_sshd_or_apt_get_says_so_and_is_never_reachable(pod_machine: FakeRunPod,
                                                                          tmp_path: Path) -> None:
    pod_machine.no_sshd.add("example/bare:1")
    pod_machine.no_apt.add("example/bare:1")
    provider, pod_id = _launch(tmp_path, "example/bare:1")
    booted = pod_machine.booted[pod_id]
    assert not booted.sshd and booted.keys == []
    assert "this image has no sshd and no apt-get to install it" in booted.log
    provider.terminate(next(n for n in provider.owned("bc-camp") if n.node_id == pod_id))
