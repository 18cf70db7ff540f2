"""A node that sends 512 bytes of its artifacts and stalls: the download ends at its deadline, the
ssh client is killed, the node terminated and the cell does not stay in ``collecting``. Real sshd on
127.0.0.1 (``tests/fakes/stalling_node``)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.campaign.spec import load_campaign
from benchctl.engine.budget import COLLECT_ALLOWANCE_S, COLLECT_MIN_S, collect_timeout_s
from benchctl.provisioners.base import Node, NodeState
from benchctl.provisioners.ssh import SSHProvider
from benchctl.provisioners.ssh_transport import SSHEndpoint, SSHTransport
from benchctl.provisioners.transfer_deadline import Deadline, TransferTimeout
from benchctl.store import queries as q
from tests.conftest import cli_here
from tests.fakes.sshd import SSHServer
from tests.fakes.stalling_node import STALL_S, stall_campaign, stalling_sshd
from tests.local_campaign import only_cell

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    with stalling_sshd(tmp_path_factory.mktemp("stalling")) as server:
        yield server


def _transport(sshd: SSHServer, tmp_path: Path) -> SSHTransport:
    endpoint = SSHEndpoint(host=sshd.host, port=sshd.port, user=sshd.user, key=str(sshd.key),
                           workdir=str(tmp_path / "node"))
    return SSHTransport(endpoint, tmp_path / "known_hosts", "tok", connect_timeout_s=3)


def _ssh_children() -> list[str]:
    """Command lines of this process's live ssh children."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[1]) == os.getpid() and stat[0] not in ("Z", "X"):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, IndexError, ValueError):
            continue
    return [c for c in found if c.startswith("ssh ")]


def test_a_stalled_get_ends_at_its_deadline_and_kills_ssh(sshd: SSHServer, tmp_path: Path) -> None:
    transport = _transport(sshd, tmp_path)
    started = time.monotonic()
    with pytest.raises(TransferTimeout, match="did not finish within 2 s"):
        transport.get("job/artifacts", str(tmp_path / "back"), timeout=2)
    assert time.monotonic() - started < STALL_S / 2, "not the node's 20 s stall (a bound a busy machine keeps)"
    assert _ssh_children() == [], "the ssh client was killed and reaped"
    transport.close()


def test_a_cancelled_deadline_stops_a_get_at_once(sshd: SSHServer, tmp_path: Path) -> None:
    transport = _transport(sshd, tmp_path)
    deadline = Deadline(60)
    threading.Timer(1.0, deadline.cancel, args=("the campaign's spend reached budget_usd",)).start()
    started = time.monotonic()
    with pytest.raises(TransferTimeout, match="stopped: the campaign's spend reached budget_usd"):
        transport.get("job/artifacts", str(tmp_path / "back"), timeout=deadline)
    assert time.monotonic() - started < deadline.seconds / 2, "stopped when cancelled, not at the deadline"
    assert _ssh_children() == []
    transport.close()


def test_the_collect_deadline_follows_the_payload_timeout_within_bounds(tmp_path: Path) -> None:
    def spec(minutes: float):  # type: ignore[no-untyped-def]
        path = tmp_path / "c.yaml"
        path.write_text(f"""\
name: c
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
payload: {{phases: [command], command: {{run: "true"}}, timeout_minutes: {minutes}}}
matrix: [{{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}}]
""")
        return load_campaign(path).spec

    assert collect_timeout_s(spec(0.01)) == COLLECT_MIN_S == 10
    assert collect_timeout_s(spec(0.2)) == 12
    assert collect_timeout_s(spec(120)) == COLLECT_ALLOWANCE_S == 600


def test_a_stalled_collection_ends_the_attempt_and_terminates_the_node(home: Path, tmp_path: Path, sshd: SSHServer,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # 10 s at the least for real (the bounds are checked above); not raising: code without it must fail below
    monkeypatch.setattr("benchctl.engine.attempt_driver.collect_timeout_s", lambda spec: 2.0, raising=False)
    path = stall_campaign(tmp_path / "stall.yaml", sshd, tmp_path / "machine")
    started = time.monotonic()
    result = cli_here("run", str(path), "--poll-interval", "0.1", "--status-interval", "0.3", home=home)
    assert time.monotonic() - started < STALL_S / 2, "the collection did not wait for the stalled node"
    assert result.returncode == 1, result.stderr
    engine, cell = only_cell(home)
    assert cell.state == "failed", "not stuck in collecting"
    assert "did not finish within 2 s" in (cell.reason or ""), cell.reason
    (attempt,) = q.attempts(engine, cell.id or 0)
    assert not attempt.open and attempt.outcome == "error" and attempt.terminated_at is not None
    node = Node.from_dict(json.loads(attempt.node_json or "{}"))
    assert SSHProvider(home / "ssh", []).status(node) is NodeState.TERMINATED
    assert not list((home / "ssh" / "claims").iterdir()), "the machine is free again"
    assert _ssh_children() == []
