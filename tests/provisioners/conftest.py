"""Fixtures shared by the provider tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fakes.runpod_fake import FakeRunPod, running_fake_runpod
from tests.fakes.skypilot_standin import SkyPilotStandIn
from tests.fakes.sshd import running_sshd


@pytest.fixture
def runpod_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRunPod]:
    """A fake RunPod API on loopback, with the SDK pointed at it and its key set."""
    server = FakeRunPod("rp-key", ssh_port=22, authorized_keys=tmp_path / "authorized_keys",
                        workdir=tmp_path / "pods", boot_s=0.0)
    with running_fake_runpod(server) as url:
        monkeypatch.setenv("RUNPOD_API_BASE_URL", url)
        monkeypatch.setenv("RUNPOD_API_KEY", "rp-key")
        yield server


@pytest.fixture
def sky_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A HOME of the test's own: SkyPilot keeps a user hash under ~/.sky."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))


@pytest.fixture
def standin(tmp_path: Path, sky_home: None) -> Iterator[SkyPilotStandIn]:
    """SkyPilot's SDK stand-in, its nodes served by a real sshd; no cluster may be left up."""
    with running_sshd(tmp_path / "sshd") as sshd:
        sky = SkyPilotStandIn(sshd, tmp_path / "standin", workdir=tmp_path / "work", boot_s=0.3)
        yield sky
        assert sky.inventory() == [], "a test left a cluster up"


def run_in_bare_session(command: str, environ: bytes, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run a node's idle-shutdown ``command`` as a payload started over SSH would: under ``env -i``
    (none of the container's variables), in a directory holding ``payload/``, with the container's
    own environment (PID 1's) in a file the command is told to read (``environ`` is its content)."""
    (tmp_path / "container-environ").write_bytes(environ)
    return subprocess.run(["env", "-i", "sh", "-c", command], cwd=REPO, capture_output=True, text=True, timeout=60)


IMAGE_PYTHON = "bc-python3"
"""An interpreter the way pytorch/pytorch's images have one: only in a directory of the image's
``ENV PATH`` (``/opt/conda/bin`` there), which an SSH session's PATH lacks (``image_environ``)."""


def image_environ(tmp_path: Path, environ: bytes) -> bytes:
    """``environ`` (a container's PID 1 environment) with a directory holding ``IMAGE_PYTHON`` first in
    its PATH."""
    conda_bin = tmp_path / "opt-conda" / "bin"
    conda_bin.mkdir(parents=True)
    python = conda_bin / IMAGE_PYTHON
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    variables = [v for v in environ.split(b"\0") if v and not v.startswith(b"PATH=")]
    return b"\0".join([f"PATH={conda_bin}:/usr/bin:/bin".encode(), *variables]) + b"\0"
