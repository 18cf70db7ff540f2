"""Collection and process hygiene over real SSH (a local sshd; issue 31 items 6 and 7).

- GNU tar's exit status 1 "file changed as we read it" is a warning: the file comes home as tar
  read it and the download goes on (GNU tar manual, "Synopsis": exit code 1 with ``--create``
  means files changed while they were archived; reproduced here with the real tar, whose file
  changes under it while the controller has read only the first block of the stream).
- An ``artifacts/`` of more members than the cap: the members past it are refused one by one,
  the rest is kept, ``events.jsonl`` and ``payload.log`` come home, the cell is done.
- A command's detached processes (``nohup … &``, ``setsid``, a double fork) do not outlive ``run``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from benchctl.provisioners import ssh_transport
from benchctl.provisioners.safe_tar import MAX_MEMBERS
from benchctl.provisioners.ssh_transport import SSHEndpoint, SSHTransport
from tests.conftest import run_cli
from tests.fakes.sshd import SSHServer, running_sshd
from tests.local_campaign import only_cell
from tests.payload.test_reaper import detaching_command, kill_left, markers, none_left

pytestmark = pytest.mark.slow

CAMPAIGN = """\
name: sshhygiene
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 1}}
payload:
  phases: [command]
  command: {{run: {run}}}
providers:
  ssh:
    nodes:
      - {{name: box, host: {host}, port: {port}, user: {user}, key: "{key}", gpu: cpu, count: 1,
         price_usd_per_hour: 0.5, python: "{python}", workdir: "{work}"}}
matrix:
  - {{provider: ssh, gpu: cpu, count: 1}}
"""


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def _run(home: Path, tmp_path: Path, sshd: SSHServer, python: Path, command: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "sshhygiene.yaml"
    path.write_text(CAMPAIGN.format(run=json.dumps(command), host=sshd.host, port=sshd.port, user=sshd.user,
                                    key=sshd.key, python=python, work=tmp_path / "machine"))
    return run_cli("run", str(path), "--poll-interval", "0.2", "--status-interval", "1", home=home, timeout=300)


def test_a_file_that_changes_while_tar_reads_it_is_a_warning(sshd: SSHServer, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    node = tmp_path / "node"
    big = node / "a" / "artifacts" / "big.bin"
    big.parent.mkdir(parents=True)
    big.write_bytes(b"\1" * (64 * 1024**2))  # far more than the pipes and the ssh channel hold: tar is mid-file
    (big.parent / "small.txt").write_text("kept")
    real = ssh_transport.extract_stream

    def changing_under_tar(stream: IO[bytes], target: Path, max_bytes: int):  # type: ignore[no-untyped-def]
        head = stream.read(512)  # the first header: tar has started on the file and cannot have finished it
        stat = big.stat()
        os.utime(big, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # as a straggler's write would
        return real(_Prefixed(head, stream), target, max_bytes)

    monkeypatch.setattr(ssh_transport, "extract_stream", changing_under_tar)
    endpoint = SSHEndpoint(host=sshd.host, port=sshd.port, user=sshd.user, key=str(sshd.key), workdir=str(node))
    transport = SSHTransport(endpoint, tmp_path / "known_hosts", "tok", connect_timeout_s=3)
    transport.get("a/artifacts", str(tmp_path / "back"))  # no ProviderError: tar's exit 1 is a warning
    assert (tmp_path / "back" / "artifacts" / "big.bin").stat().st_size == 64 * 1024**2
    assert (tmp_path / "back" / "artifacts" / "small.txt").read_text() == "kept"
    (note,) = transport.refused_members()
    assert "big.bin: file changed as we read it; kept as tar read it" in note, note


class _Prefixed:
    """``head`` then the rest of ``stream``."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self.head, self.stream = head, stream

    def read(self, size: int = -1) -> bytes:
        if not self.head:
            return self.stream.read(size)
        if size < 0:
            data, self.head = self.head + self.stream.read(), b""
            return data
        data, self.head = self.head[:size], self.head[size:]
        return data


def test_members_past_the_cap_are_refused_and_the_rest_comes_home(home: Path, tmp_path: Path, sshd: SSHServer,
                                                                  standin_python: Path) -> None:
    files = MAX_MEMBERS + 150
    result = _run(home, tmp_path, sshd, standin_python,
                  f"mkdir -p artifacts/many && cd artifacts/many && seq 1 {files} | xargs touch")
    assert result.returncode == 0, result.stderr
    _, cell = only_cell(home)
    assert cell.state == "done", cell.reason
    local = home / "artifacts" / "sshhygiene" / cell.key / "1"
    assert (local / "events.jsonl").stat().st_size > 0 and (local / "payload.log").exists()
    kept = len(list((local / "artifacts" / "many").iterdir()))
    assert MAX_MEMBERS - 10 <= kept < files, kept  # the directories before them count as members too
    assert f"past the {MAX_MEMBERS}-member cap" in result.stderr
    assert "more refused (the first 100 are listed)" in result.stderr


def test_no_process_an_ssh_command_detached_survives_run(home: Path, tmp_path: Path, sshd: SSHServer,
                                                         standin_python: Path) -> None:
    marks = markers()
    try:
        result = _run(home, tmp_path, sshd, standin_python, detaching_command(marks))
        assert result.returncode == 0, result.stderr
        _, cell = only_cell(home)
        assert cell.state == "done", cell.reason  # the command returned: every detached process had started
        assert none_left(marks) == [], "a process the command detached outlived the attempt"
    finally:
        kill_left(marks)
