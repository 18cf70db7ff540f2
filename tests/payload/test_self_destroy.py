"""payload.self_destroy: a node destroys its own instance with the key in its container's environment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.payload.self_destroy import container_environment, self_destroy
from tests.fakes.vastai_fake import FakeVast, running_fake_vast


@pytest.fixture
def vast(tmp_path: Path) -> Iterator[tuple[FakeVast, str]]:
    fake = FakeVast("vast-key", ssh_port=22, authorized_keys=tmp_path / "keys", workdir=tmp_path, rate_scale=0.0)
    with running_fake_vast(fake) as url:
        yield fake, url


def _rent(fake: FakeVast, offer: int = 2001) -> int:
    code, answer = fake.rent(offer, {"label": "c--t", "disk": 10})
    assert code == 200
    return int(answer["new_contract"])


def test_the_environment_of_pid_1_is_read_as_proc_holds_it(tmp_path: Path) -> None:
    (tmp_path / "environ").write_bytes(b"A=1\0B=x=y\0EMPTY=\0junk\0")
    assert container_environment(tmp_path / "environ") == {"A": "1", "B": "x=y", "EMPTY": ""}
    assert container_environment(tmp_path / "missing") == {}


def test_it_destroys_its_own_instance_and_retries_what_may_pass(vast: tuple[FakeVast, str], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    fake, url = vast
    instance = _rent(fake)
    (tmp_path / "environ").write_bytes(fake.container_environ(instance))
    fake.faults = ["429", "500"]
    slept: list[float] = []
    assert self_destroy("vastai", str(instance), url, tmp_path / "environ", sleep=slept.append) == 0
    assert fake.inventory() == [] and len(slept) == 2
    assert self_destroy("vastai", str(instance), url, tmp_path / "environ", sleep=slept.append) == 0, \
        "already gone is success"
    assert fake.container_keys[instance] not in capsys.readouterr().err, "the key is never printed"


def test_another_containers_id_or_no_key_destroys_nothing(vast: tuple[FakeVast, str], tmp_path: Path) -> None:
    fake, url = vast
    instance, other = _rent(fake), _rent(fake, 2002)
    (tmp_path / "environ").write_bytes(fake.container_environ(other))
    assert self_destroy("vastai", str(instance), url, tmp_path / "environ") == 2, "not the node that was rented"
    (tmp_path / "bare").write_bytes(b"PATH=/usr/bin\0")
    assert self_destroy("vastai", str(instance), url, tmp_path / "bare") == 2
    assert fake.inventory() == sorted([instance, other])
    for node in (instance, other):
        fake.destroy(node)
