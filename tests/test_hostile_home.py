"""Local state that someone else could have planted (issue 31, items 8 and 11): a BENCHCTL_HOME
owned by another user or writable by others is refused; the database and the artifacts folders are
never reached through a link; SQLite URLs open what they say (``mode=ro`` read-only, no stray file
named after the URL), and a new database file is 0600.

The tests run as root (they can ``chown`` to another uid); the checks compare with the effective uid,
so they hold for any user."""

from __future__ import annotations

import io
import os
import sqlite3
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from benchctl.provisioners.base import ProviderError
from benchctl.provisioners.local.file_copy import copy_out
from benchctl.provisioners.safe_tar import extract_stream
from benchctl.provisioners.transfer_deadline import Deadline
from benchctl.store.database import BadDatabaseURL, ReadOnlyStore, open_store
from benchctl.store.migrations import HEAD, current_version, upgrade
from tests.conftest import FAST_POLLS, cli_here, run_cli
from tests.test_hostile_inputs import refused

RECORD = ("- {provider: lambda, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 23.92, step_time_ms: 702,\n"
          "   target: {model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}}\n")


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# --- item 8: the home --------------------------------------------------------------------------------


def test_a_home_owned_by_another_user_is_refused(home: Path) -> None:
    home.mkdir(mode=0o700)
    os.chown(home, os.geteuid() + 4242, -1)
    line = refused(cli_here("status", home=home), f"BENCHCTL_HOME {home} is owned by uid {os.geteuid() + 4242}",
                   "chown")
    assert "not by you" in line
    assert list(home.iterdir()) == [], "nothing is written into it"


@pytest.mark.parametrize(("mode", "who"), [(0o770, "its group"), (0o707, "others"), (0o1777, "others"),
                                           (0o720, "its group")])
def test_a_home_writable_by_others_is_refused(home: Path, mode: int, who: str) -> None:
    home.mkdir()
    home.chmod(mode)
    refused(cli_here("status", home=home), f"is writable by {who}", f"chmod 700 {home}")
    assert list(home.iterdir()) == []


def test_a_private_home_readable_by_others_is_still_used(home: Path) -> None:
    home.mkdir()
    home.chmod(0o755)  # the user's own choice: nobody else can plant anything in it
    assert cli_here("status", home=home).returncode == 0


# --- item 8: links planted in the home ----------------------------------------------------------------


@pytest.mark.parametrize("target_exists", [False, True])
def test_a_planted_database_link_is_refused(home: Path, tmp_path: Path, target_exists: bool) -> None:
    home.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere" / "benchctl.db"
    elsewhere.parent.mkdir()
    if target_exists:
        open_store(f"sqlite:///{elsewhere}").dispose()
    before = elsewhere.read_bytes() if target_exists else None
    (home / "benchctl.db").symlink_to(elsewhere)
    refused(cli_here("status", home=home), f"{home / 'benchctl.db'} is a symbolic link", "remove the link")
    assert (elsewhere.read_bytes() if target_exists else None) == before
    assert elsewhere.exists() == target_exists, "no database is made at the link's target"


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_planted_link_beside_the_database_is_refused(home: Path, tmp_path: Path, suffix: str) -> None:
    home.mkdir(mode=0o700)
    open_store(f"sqlite:///{home / 'benchctl.db'}").dispose()
    elsewhere = tmp_path / f"elsewhere{suffix}"
    (home / f"benchctl.db{suffix}").unlink(missing_ok=True)
    (home / f"benchctl.db{suffix}").symlink_to(elsewhere)
    refused(cli_here("status", home=home), f"benchctl.db{suffix} is a symbolic link")
    assert not elsewhere.exists()


def test_a_database_that_is_not_a_regular_file_is_refused(home: Path) -> None:
    home.mkdir(mode=0o700)
    os.mkfifo(home / "benchctl.db")
    refused(cli_here("status", home=home), "is not a regular file")


@pytest.mark.parametrize("where", ["artifacts", "artifacts/tiny"])
def test_a_planted_artifacts_link_is_refused_before_any_launch(home: Path, tmp_path: Path, write_campaign,
                                                               where: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / where).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / where).symlink_to(elsewhere)
    path = write_campaign("tiny", steps=1)
    result = run_cli("run", str(path), *FAST_POLLS, home=home, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert f"{home / where} is a symbolic link" in last and f"rm {home / where}" in last, last
    assert list(elsewhere.iterdir()) == [], "nothing was written through the link"
    assert not (home / "local").exists() or not any((home / "local").iterdir()), "no node was launched"


def test_the_local_copy_does_not_write_through_a_linked_target(tmp_path: Path) -> None:
    node = tmp_path / "node"
    (node / "artifacts").mkdir(parents=True)
    (node / "artifacts" / "trace.json").write_text("{}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = tmp_path / "collected"
    target.symlink_to(elsewhere)
    with pytest.raises(OSError):
        copy_out(node, "artifacts", target, 10**6, Deadline.of(30.0))
    assert list(elsewhere.iterdir()) == []


def test_an_ssh_download_does_not_write_through_a_linked_target(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("artifacts/trace.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = tmp_path / "collected"
    target.symlink_to(elsewhere)
    buffer.seek(0)
    with pytest.raises(ProviderError, match="is a link or not a folder"):
        extract_stream(buffer, target, 10**6)
    assert list(elsewhere.iterdir()) == []


# --- item 11: SQLite URLs ---------------------------------------------------------------------------


def _old_database(path: Path, version: int) -> None:
    engine = sa.create_engine(f"sqlite:///{path}")
    upgrade(engine, target=version)
    engine.dispose()


def _version(path: Path) -> int:
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        version = current_version(conn)
    engine.dispose()
    return version


def test_mode_ro_does_not_migrate(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_database(path, 1)
    before = path.read_bytes()
    line = refused(cli_here("--db", f"sqlite:///{path}?mode=ro", "status", home=home), "schema version 1",
                   "mode=ro forbids migrating")
    assert "without mode=ro" in line
    assert _version(path) == 1 and path.read_bytes() == before


def test_mode_ro_reads_and_refuses_writes(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    records = tmp_path / "rows.yaml"
    records.write_text(RECORD)
    assert cli_here("--db", f"sqlite:///{path}", "import", str(records), home=home).returncode == 0
    before = path.read_bytes()
    for url in (f"sqlite:///{path}?mode=ro", f"sqlite:///file:{path}?mode=ro&uri=true"):
        board = cli_here("--db", url, "leaderboard", "--format", "json", home=home)
        assert board.returncode == 0, board.stderr
        assert "lambda" in board.stdout
        records.write_text(RECORD.replace("702", "650").replace("lambda", "vastai"))
        refused(cli_here("--db", url, "import", str(records), home=home), "opened read-only", "drop mode=ro")
    assert path.read_bytes() == before
    engine = open_store(f"sqlite:///{path}?mode=ro")
    try:
        with pytest.raises(ReadOnlyStore), engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM campaign"))
    finally:
        engine.dispose()


def test_mode_ro_on_a_missing_file_creates_nothing(home: Path, tmp_path: Path) -> None:
    refused(cli_here("--db", f"sqlite:///{tmp_path / 'none.db'}?mode=ro", "status", home=home), "does not exist")
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize(("url", "words"), [
    ("sqlite:///file::memory:", "would be a file of that name"),
    ("sqlite:///file:runs.db", "would be a file of that name"),
    ("sqlite:///file::memory:?uri=true", "in-memory database is lost"),
    ("sqlite:///runs.db?mode=memory", "in-memory database is lost"),
    ("sqlite:///runs.db?mdoe=ro", "unknown SQLite URL parameter mdoe"),
    ("sqlite:///runs.db?mode=rx", "mode=rx is not an SQLite open mode"),
])
def test_urls_that_would_make_a_stray_file_are_refused(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       url: str, words: str) -> None:
    monkeypatch.chdir(tmp_path)
    refused(cli_here("--db", url, "status", home=home), "cannot use database URL", words)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(("file", "runs"))] == []


def test_sqlite_parameters_reach_sqlite_without_a_stray_file(home: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, open_umask: None) -> None:
    monkeypatch.chdir(tmp_path)
    for url in ("sqlite:///runs.db?cache=private", "sqlite:///file:uri.db?uri=true", "sqlite:///plain.db?uri=true"):
        assert cli_here("--db", url, "status", home=home).returncode == 0, url
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("home"))
    assert [n for n in names if not n.endswith(("-wal", "-shm"))] == ["plain.db", "runs.db", "uri.db"], names
    assert {n: _mode(tmp_path / n) for n in names} == {n: 0o600 for n in names}, "new database files are 0600"


def test_a_bad_url_is_a_bad_database_url(tmp_path: Path) -> None:
    with pytest.raises(BadDatabaseURL, match="would be a file of that name"):
        open_store("sqlite:///file::memory:")


def test_mode_ro_reads_a_rollback_journal_database(tmp_path: Path) -> None:
    """A database that is not in WAL mode (made by another tool, or copied) is read as it is."""
    path = tmp_path / "plain.db"
    open_store(f"sqlite:///{path}").dispose()
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
    engine = open_store(f"sqlite:///{path}?mode=ro")
    try:
        with engine.connect() as conn:
            assert current_version(conn) == HEAD
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "delete"
    finally:
        engine.dispose()
