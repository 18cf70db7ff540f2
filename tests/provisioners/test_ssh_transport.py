"""The SSH transport against a real sshd on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.provisioners import ssh_transport
from benchctl.provisioners.base import ProviderError
from benchctl.provisioners.ssh_transport import SSHEndpoint, SSHTransport
from tests.fakes.sshd import SSHServer, running_sshd

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def _transport(sshd: SSHServer, tmp_path: Path, token: str = "tok", port: int | None = None,
               retry_for_s: float = 60.0) -> SSHTransport:
    endpoint = SSHEndpoint(host=sshd.host, port=port or sshd.port, user=sshd.user, key=str(sshd.key),
                           workdir=str(tmp_path / "node"))
    return SSHTransport(endpoint, tmp_path / "known_hosts", token, connect_timeout_s=3, retry_for_s=retry_for_s)


def test_run_put_get_and_read_from(sshd: SSHServer, tmp_path: Path) -> None:
    t = _transport(sshd, tmp_path)
    result = t.run("echo hi; echo err >&2; exit 3")
    assert (result.code, result.out, result.err) == (3, "hi\n", "err\n")
    assert t.run("pwd").out.strip() == str(tmp_path / "node"), "commands run in the node's work dir"
    stage = tmp_path / "stage"
    (stage / "sub").mkdir(parents=True)
    (stage / "job.json").write_text("{}")
    (stage / "sub" / "x.bin").write_bytes(bytes(range(256)))
    t.put(str(stage), "a/1")
    assert (tmp_path / "node" / "a" / "1" / "sub" / "x.bin").read_bytes() == bytes(range(256))
    (tmp_path / "node" / "a" / "1" / "events.jsonl").write_bytes(b'{"n": 1}\n{"n": 2}\n')
    assert t.read_from("a/1/events.jsonl", 0) == b'{"n": 1}\n{"n": 2}\n'
    assert t.read_from("a/1/events.jsonl", 9) == b'{"n": 2}\n'
    assert t.read_from("a/1/missing.jsonl", 0) == b""
    t.get("a/1/sub", str(tmp_path / "back"))
    assert (tmp_path / "back" / "sub" / "x.bin").read_bytes() == bytes(range(256))
    t.get("a/1/nothing-here", str(tmp_path / "back"))  # absent: nothing, no error
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == ["sub"]


def test_put_streams_the_stage_from_a_file_not_from_memory(sshd: SSHServer, tmp_path: Path) -> None:
    """A shipped compile cache is up to 512 MiB: the upload holds none of it in the controller's memory
    (the old put built the whole tar in a BytesIO and handed ssh a copy of its bytes)."""
    import tracemalloc

    t = _transport(sshd, tmp_path)
    stage = tmp_path / "stage"
    stage.mkdir()
    blob = os.urandom(1 << 20) * 48  # 48 MiB
    (stage / "cache.bin").write_bytes(blob)
    tracemalloc.start()
    try:
        t.put(str(stage), "big")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"put held {peak / 2**20:.0f} MiB"
    assert (tmp_path / "node" / "big" / "cache.bin").read_bytes() == blob


@pytest.fixture(scope="module")
def sh_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A node whose login shell is ``sh`` (dash here): every command runs as ``sh -c``."""
    with running_sshd(tmp_path_factory.mktemp("sh-sshd"),
                      extra_config='ForceCommand sh -c "$SSH_ORIGINAL_COMMAND"\n') as server:
        yield server


@pytest.mark.parametrize("login_shell", ["bash", "sh"])
def test_started_command_survives_and_kill_all_ends_it(login_shell: str, request: pytest.FixtureRequest,
                                                       tmp_path: Path) -> None:
    sshd = request.getfixturevalue("sshd" if login_shell == "bash" else "sh_sshd")
    marker = f"{uuid.uuid4().int % 10**6 + 1000}.25"
    t = _transport(sshd, tmp_path, token=f"tok-{marker}")
    t.run("mkdir -p job")
    t.start(f"echo started > started; sleep {marker}; echo never > finished", cwd="job")
    deadline = time.monotonic() + 10
    while not _sleeping(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleeping(marker), "the detached command runs after the ssh call returned"
    assert (tmp_path / "node" / "job" / "started").exists()
    t.kill_all()
    deadline = time.monotonic() + 5
    while _sleeping(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _sleeping(marker)
    assert not (tmp_path / "node" / "job" / "finished").exists()
    t.kill_all()  # idempotent


def test_timeouts_and_unreachable_hosts_are_provider_errors(sshd: SSHServer, tmp_path: Path) -> None:
    t = _transport(sshd, tmp_path)
    with pytest.raises(ProviderError, match="timed out"):
        t.run("sleep 5", timeout=1)
    closed = _transport(sshd, tmp_path, port=_closed_port(), retry_for_s=2)
    start = time.monotonic()
    with pytest.raises(ProviderError, match=r"[Cc]onnection refused"):
        closed.run("true")
    assert time.monotonic() - start < 20, "retries are bounded"


def test_host_key_is_pinned_at_first_connect(sshd: SSHServer, tmp_path: Path) -> None:
    t = _transport(sshd, tmp_path, token="pinned")
    assert t.run("true").code == 0
    assert (tmp_path / "known_hosts").read_text().strip(), "the key seen first is stored"
    t.close()
    with running_sshd(tmp_path / "impostor", client_key=sshd.key) as impostor:
        pinned = (tmp_path / "known_hosts").read_text().replace(f"[127.0.0.1]:{sshd.port}",
                                                               f"[127.0.0.1]:{impostor.port}")
        (tmp_path / "known_hosts").write_text(pinned)  # the same node, now answering with another key
        swapped = _transport(impostor, tmp_path, token="pinned")
        with pytest.raises(ProviderError, match="host key"):
            swapped.run("true")


def _sleeping(marker: str) -> bool:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if f"sleep\0{marker}".encode() in cmdline.read_bytes():
                state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    return True
        except OSError:
            continue
    return False


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_control_sockets_live_in_a_short_private_dir() -> None:
    from benchctl.provisioners.ssh_transport import control_dir

    path = control_dir()
    assert len(str(path)) < 40 and oct(path.stat().st_mode & 0o777) == "0o700" and path.stat().st_uid == os.getuid()


def test_the_artifact_cap_counts_across_downloads_and_refusals_are_reported(sshd: SSHServer, tmp_path: Path) -> None:
    t = _transport(sshd, tmp_path, token="capped")
    t.max_artifact_bytes = 1500
    node = tmp_path / "node"
    (node / "a").mkdir(parents=True)
    (node / "a" / "first.bin").write_bytes(b"1" * 1000)
    (node / "b").mkdir()
    (node / "b" / "second.bin").write_bytes(b"2" * 1000)
    (node / "b" / "small.txt").write_bytes(b"3" * 100)
    t.get("a", str(tmp_path / "back"))
    t.get("b", str(tmp_path / "back"))
    assert (tmp_path / "back" / "a" / "first.bin").exists()
    assert not (tmp_path / "back" / "b" / "second.bin").exists(), "1000 + 1000 bytes is past the 1500-byte cap"
    assert (tmp_path / "back" / "b" / "small.txt").exists()
    assert [r.split(":")[0] for r in t.refused_members()] == ["b/second.bin"]


def test_a_host_alias_from_an_ssh_config_file(sshd: SSHServer, tmp_path: Path) -> None:
    config = tmp_path / "alias.conf"
    config.write_text(f"Host my-cluster\n  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
                      f"  IdentityFile {sshd.key}\n  IdentitiesOnly yes\n  StrictHostKeyChecking no\n"
                      "  UserKnownHostsFile=/dev/null\n")
    endpoint = SSHEndpoint(host="my-cluster", port=1, user="nobody", config_file=str(config),
                           workdir=str(tmp_path / "node"))
    t = SSHTransport(endpoint, tmp_path / "known_hosts", "tok-alias", connect_timeout_s=3, retry_for_s=5)
    assert t.run("echo via-alias").out.strip() == "via-alias", "port, user and key come from the file"
    assert (tmp_path / "known_hosts").read_text().strip(), "our host-key pinning overrides the file's"
    t.close()
    config.write_text(f"Host my-cluster\n  HostName {sshd.host}\n  Port 1\n")
    t = SSHTransport(endpoint, tmp_path / "known_hosts", "tok-alias-2", connect_timeout_s=3, retry_for_s=1)
    with pytest.raises(ProviderError, match=r"ssh my-cluster \(in .*alias.conf\) failed"):
        t.run("true")


def test_a_start_retried_after_a_dropped_connection_starts_the_command_once(
        sshd: SSHServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ssh exits 255 when the connection drops, even after the node ran the command; the transport
    retries such a call, so the node itself must refuse a second start of one attempt's command."""
    real_run = subprocess.run
    dropped: list[str] = []

    def drop_first_start(args: list[str], *rest: object, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        proc = real_run(args, *rest, **kwargs)  # type: ignore[call-overload]
        if "setsid" in args[-1] and not dropped:
            dropped.append(args[-1])  # the node ran it; the answer is lost with the connection
            return subprocess.CompletedProcess(args, 255, b"", b"Connection reset by peer\r\n")
        return proc

    t = _transport(sshd, tmp_path, token="tok-retried")
    t.run("mkdir -p job")
    monkeypatch.setattr(ssh_transport.subprocess, "run", drop_first_start)
    t.start("echo run >> runs; sleep 0.5", cwd="job")
    monkeypatch.setattr(ssh_transport.subprocess, "run", real_run)
    assert dropped, "the first start's answer was lost"
    t.start("echo run >> runs; sleep 0.5", cwd="job")  # a controller that starts it again is refused too
    time.sleep(1.0)
    assert (tmp_path / "node" / "job" / "runs").read_text() == "run\n", "started once"
    assert len((tmp_path / "node" / ".benchctl" / "tok-retried.pids").read_text().split()) == 1
