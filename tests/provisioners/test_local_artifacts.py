"""The local provider's artifact copy against a hostile node: links out of the node's home, links
planted in the destination, a link loop, FIFOs, hard links and the size cap."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from benchctl.provisioners.base import ProviderError
from benchctl.provisioners.local.transport import LocalTransport
from benchctl.provisioners.transfer_deadline import Deadline, TransferTimeout


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A node's home with an honest attempt directory (artifacts/report.txt, artifacts/sub/data.bin)."""
    home = tmp_path / "node" / "home"
    artifacts = home / "job" / "artifacts"
    (artifacts / "sub").mkdir(parents=True)
    (artifacts / "report.txt").write_text("honest report")
    (artifacts / "sub" / "data.bin").write_bytes(b"\x01" * 100)
    return home


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "controller" / "secret.txt"
    path.parent.mkdir()
    path.write_text("the controller's secret")
    return path


def _get(home: Path, dest: Path, cap: int | None = None, what: str = "job/artifacts") -> LocalTransport:
    transport = LocalTransport(home, "tok", leader_pid=0)
    if cap is not None:
        transport.max_artifact_bytes = cap
    transport.get(what, str(dest))
    return transport


def test_honest_artifacts_come_back_private(node: Path, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    transport = _get(node, dest)
    assert (dest / "artifacts" / "report.txt").read_text() == "honest report"
    assert (dest / "artifacts" / "sub" / "data.bin").read_bytes() == b"\x01" * 100
    assert transport.refused_members() == []
    for path in (dest, dest / "artifacts", dest / "artifacts" / "sub"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in (dest / "artifacts" / "report.txt", dest / "artifacts" / "sub" / "data.bin"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    _get(node, tmp_path / "file-dest", what="job/artifacts/report.txt")
    assert (tmp_path / "file-dest" / "report.txt").read_text() == "honest report", "a single file too"
    _get(node, tmp_path / "none", what="job/missing")  # absent: nothing, no error
    assert list((tmp_path / "none").iterdir()) == []


def test_symlinks_out_of_the_node_are_refused_not_followed(node: Path, tmp_path: Path, secret: Path) -> None:
    artifacts = node / "job" / "artifacts"
    (artifacts / "leak.txt").symlink_to(secret)
    (artifacts / "leakdir").symlink_to(secret.parent, target_is_directory=True)
    os.link(secret, artifacts / "hardlink.txt")
    dest = tmp_path / "dest"
    transport = _get(node, dest)
    copied = {p.relative_to(dest).as_posix() for p in dest.rglob("*")}
    assert copied == {"artifacts", "artifacts/report.txt", "artifacts/sub", "artifacts/sub/data.bin"}
    assert not any("secret" in p.read_text() for p in dest.rglob("*") if p.is_file())
    refused = "\n".join(transport.refused_members())
    assert "artifacts/leak.txt: a symbolic link" in refused and "artifacts/leakdir: a symbolic link" in refused
    assert "artifacts/hardlink.txt: a file with several hard links" in refused


def test_a_linked_artifacts_directory_is_refused(node: Path, tmp_path: Path, secret: Path) -> None:
    (node / "job" / "elsewhere").symlink_to(secret.parent, target_is_directory=True)
    transport = _get(node, tmp_path / "dest", what="job/elsewhere")
    assert list((tmp_path / "dest").iterdir()) == []
    assert transport.refused_members() == ["elsewhere: a symbolic link (artifacts never need links; not followed)"]
    (node / "job" / "artifacts" / "report.txt").unlink()
    (node / "job" / "artifacts" / "report.txt").symlink_to(secret)
    transport = _get(node, tmp_path / "dest2", what="job/artifacts/report.txt")
    assert list((tmp_path / "dest2").iterdir()) == []


def test_links_planted_in_the_destination_are_never_written_through(node: Path, tmp_path: Path, secret: Path) -> None:
    dest = tmp_path / "dest"
    (dest / "artifacts").mkdir(parents=True)
    (dest / "artifacts" / "report.txt").symlink_to(secret)  # planted: copying report.txt would overwrite the secret
    (dest / "artifacts" / "sub").symlink_to(secret.parent, target_is_directory=True)
    transport = _get(node, dest)
    assert secret.read_text() == "the controller's secret", "nothing was written through the planted link"
    assert sorted(p.name for p in secret.parent.iterdir()) == ["secret.txt"], "nothing landed in the linked dir"
    report = dest / "artifacts" / "report.txt"
    assert not report.is_symlink() and report.read_text() == "honest report", "the link was replaced, not followed"
    assert "artifacts/sub: the destination holds a link" in "\n".join(transport.refused_members())


def test_a_symlink_loop_is_refused_at_once(node: Path, tmp_path: Path) -> None:
    (node / "job" / "artifacts" / "sub" / "loop").symlink_to("..", target_is_directory=True)
    (node / "job" / "artifacts" / "self").symlink_to("self")
    started = time.monotonic()
    transport = _get(node, tmp_path / "dest")
    assert time.monotonic() - started < 30, "not followed round the loop (a bound a busy machine keeps)"
    assert sum(1 for _ in (tmp_path / "dest").rglob("*")) == 4, "the honest files, nothing more"
    assert len(transport.refused_members()) == 2


def test_fifos_are_refused_without_being_opened(node: Path, tmp_path: Path) -> None:
    os.mkfifo(node / "job" / "artifacts" / "stall")
    started = time.monotonic()
    transport = _get(node, tmp_path / "dest")
    assert time.monotonic() - started < 30, "a FIFO nobody writes to would block a reader forever"
    assert transport.refused_members() == ["artifacts/stall: not a regular file or directory"]
    events = node / "job" / "events.jsonl"
    os.mkfifo(events)
    with pytest.raises(ProviderError, match="not a regular file"):
        LocalTransport(node, "tok", leader_pid=0).read_from("job/events.jsonl", 0)


def test_the_size_cap_holds_over_every_get(node: Path, tmp_path: Path) -> None:
    big = node / "job" / "artifacts" / "big.bin"
    big.write_bytes(b"\x02" * 10_000)
    transport = LocalTransport(node, "tok", leader_pid=0)
    transport.max_artifact_bytes = 5_000
    transport.get("job/artifacts", str(tmp_path / "dest"))
    assert not (tmp_path / "dest" / "artifacts" / "big.bin").exists()
    assert (tmp_path / "dest" / "artifacts" / "report.txt").exists(), "what fits still comes back"
    assert any("big.bin: over the 5000-byte cap" in r for r in transport.refused_members())
    (node / "job" / "events.jsonl").write_bytes(b"x" * 4_950)
    transport.get("job/events.jsonl", str(tmp_path / "dest"))
    assert not (tmp_path / "dest" / "events.jsonl").exists(), "the cap counts every get of the attempt"
    assert transport.received_bytes <= 5_000


def test_a_copy_stops_at_its_deadline(node: Path, tmp_path: Path) -> None:
    deadline = Deadline(60)
    deadline.cancel("the campaign's spend reached budget_usd")
    with pytest.raises(TransferTimeout, match="stopped: the campaign's spend reached budget_usd"):
        LocalTransport(node, "tok", leader_pid=0).get("job/artifacts", str(tmp_path / "dest"), timeout=deadline)
