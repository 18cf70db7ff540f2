"""BENCHCTL_HOME stays the user's alone, whatever the umask: the folder 0700, the database and node records 0600."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchctl import home as settings
from benchctl.provisioners.base import OfferRequest
from benchctl.provisioners.local.provider import LocalProvider
from benchctl.provisioners.ssh import SSHNode, SSHProvider
from benchctl.store.database import open_store
from tests.conftest import Tokens


@pytest.fixture
def open_umask(home: Path) -> Iterator[Path]:
    """umask 000 for the test (as in a container or a careless shell), restored after."""
    previous = os.umask(0)
    try:
        yield home
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_home_and_database_are_private(open_umask: Path) -> None:
    assert not open_umask.exists()
    engine = open_store(settings.database_url(None))
    try:
        assert _mode(open_umask) == 0o700
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE probe (x INTEGER)"))
            conn.execute(sa.text("INSERT INTO probe VALUES (1)"))
        files = sorted(open_umask.glob("benchctl.db*"))
        assert open_umask / "benchctl.db" in files
        assert {path.name: _mode(path) for path in files} == {path.name: 0o600 for path in files}
    finally:
        engine.dispose()


def test_a_new_database_elsewhere_is_private_and_an_existing_one_keeps_its_mode(open_umask: Path,
                                                                                 tmp_path: Path) -> None:
    path = tmp_path / "new" / "folder" / "runs.db"
    open_store(f"sqlite:///{path}").dispose()
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700
    path.chmod(0o640)  # the user's own choice
    open_store(f"sqlite:///{path}").dispose()
    assert _mode(path) == 0o640


def test_node_records_are_private(open_umask: Path, tok: Tokens) -> None:
    local = LocalProvider(settings.home() / "local")
    offer = local.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))[0]
    node = local.launch(offer, tok("1"), "campaign")
    try:
        assert _mode(settings.home() / "local" / tok("1") / "node.json") == 0o600
    finally:
        local.terminate(node)
    assert _mode(settings.home() / "local" / tok("1") / "node.json") == 0o600, "rewritten at terminate"

    machine = SSHNode(name="box", host="127.0.0.1", user="me", gpu="H100_SXM", count=1, price_usd_per_hour=1.0)
    ssh = SSHProvider(settings.home() / "ssh", [machine])
    ssh.launch(ssh.offers(OfferRequest(gpu="H100_SXM", count=1, market="on-demand"))[0], "tok2", "campaign")
    records = settings.home() / "ssh" / "nodes"
    assert [(p.name, _mode(p)) for p in records.iterdir()] == [("tok2.json", 0o600)]
