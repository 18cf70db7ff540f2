"""Fixtures shared by the provider tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.runpod_fake import FakeRunPod, running_fake_runpod


@pytest.fixture
def runpod_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunPod]:
    """A fake RunPod API on loopback, with the SDK pointed at it and its key set."""
    server = FakeRunPod("rp-key", ssh_port=22, authorized_keys=tmp_path / "authorized_keys",
                        workdir=tmp_path / "pods", boot_s=0.0)
    with running_fake_runpod(server) as url:
        monkeypatch.setenv("RUNPOD_API_BASE_URL", url)
        monkeypatch.setenv("RUNPOD_API_KEY", "rp-key")
        yield server
