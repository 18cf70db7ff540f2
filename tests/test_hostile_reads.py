"""Nothing a node writes, and no damage to the store, crashes a command forever (issue 31 item 3):
each read path degrades to one line naming the bad record. The node is a real sshd on 127.0.0.1
(``tests/fakes/sshd.py``); the damaged database is a real SQLite file with a page overwritten."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.provisioners.ssh_transport import SSHEndpoint, SSHTransport
from tests.conftest import cli_here, run_cli
from tests.fakes.sshd import SSHServer, running_sshd


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def test_a_pid_file_of_5000_digits_is_a_vanished_process_not_a_crash(sshd: SSHServer, tmp_path: Path) -> None:
    """The node may write over ``.benchctl/<token>.pids``: 5,000 digits are over Python's 4,300-digit
    int conversion limit, and today ``status`` (every poll, and ``resume``'s reconcile) raised
    ValueError on them, for good. Such a word is no process of ours: gone, named shortened."""
    endpoint = SSHEndpoint(host=sshd.host, port=sshd.port, user=sshd.user, key=str(sshd.key),
                           workdir=str(tmp_path / "node"))
    transport = SSHTransport(endpoint, tmp_path / "known_hosts", "tok", connect_timeout_s=3)
    (tmp_path / "node" / ".benchctl").mkdir(parents=True)
    (tmp_path / "node" / ".benchctl" / "tok.pids").write_text("5" * 5000 + "\n")
    assert transport.vanished() == ["55555555555555555..."]
    (tmp_path / "node" / ".benchctl" / "tok.pids").write_text(("7" * 30 + " ") * 100_000)  # 3 MB
    assert len(transport.vanished()) <= 4096 // 31 + 1, "the file is read up to 4 KiB"


def _damaged_store(home: Path) -> Path:
    """The store, every page after the first (the schema's) overwritten with garbage."""
    assert cli_here("status", home=home).returncode == 0  # creates and migrates the store
    path = home / "benchctl.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.seek(page)
        file.write(b"\xa5" * (size - page))
    return path


@pytest.mark.parametrize("command", [("status",), ("leaderboard",), ("resume",)])
def test_a_damaged_sqlite_database_is_one_line_naming_the_file_and_the_way_out(home: Path,
                                                                               command: tuple[str, ...]) -> None:
    path = _damaged_store(home)
    result = run_cli(*command, home=home)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert str(path) in line and "damaged" in line and ".recover" in line, line


@pytest.mark.parametrize("written", [1e308, float("inf"), float("nan"), -5.0])
def test_a_stop_time_the_node_wrote_is_no_time_the_attempt_is_priced_to(written: float) -> None:
    """The local provider reads when a node stopped billing from a file in the node's directory,
    which the node can write (its earliest time wins: ``-5`` made the attempt cost nothing); a stop
    time of ``1e308`` or ``inf`` would price the attempt at infinity and leave the campaign's budget
    spent for good. Such a time is unknown: the attempt is closed when the controller noticed."""
    from benchctl.engine.cluster import cluster_ended_at
    from benchctl.provisioners.base import Node
    from tests.memory_campaign import offer

    class Stopped:
        def ended_at(self, node: Node) -> float | None:
            return written

    node = Node(provider="memory", node_id="n1", token="tok", campaign_tag="tag", offer=offer(), details={})
    assert cluster_ended_at(Stopped(), node) is None  # type: ignore[arg-type]
    assert cluster_ended_at(type("Honest", (), {"ended_at": lambda self, n: 1_700_000_000.0})(), node) \
        == 1_700_000_000.0  # type: ignore[arg-type]
