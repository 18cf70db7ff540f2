"""Database URL traps (issue 29 item 5): a typo'd path never opens a new, empty store that reads as
"no campaigns yet"; ``--db`` works after the command too; a bare path is shown as typed."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import cli_here


def test_a_new_database_in_a_missing_folder_is_refused(home: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nonexistent' / 'dir' / 'x.db'}"
    result = cli_here("--db", url, "status", home=home)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"the folder {tmp_path / 'nonexistent' / 'dir'} does not exist" in result.stderr, result.stderr
    assert "mkdir -p" in result.stderr and "no campaigns yet" not in result.stdout
    assert not (tmp_path / "nonexistent").exists(), "no folder made"


def test_the_default_store_still_makes_its_home(home: Path) -> None:
    result = cli_here("status", home=home)
    assert result.returncode == 0, result.stderr
    assert (home / "benchctl.db").is_file()


def test_db_after_the_command(home: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'other.db'}"
    result = cli_here("status", "--db", url, home=home)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "other.db").is_file() and not (home / "benchctl.db").exists()
    refused = cli_here("leaderboard", "--db", f"sqlite:///{tmp_path / 'no' / 'x.db'}", home=home)
    assert refused.returncode == 2 and "does not exist" in refused.stderr


def test_a_bare_path_is_shown_as_typed(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    result = cli_here("--db", str(path), "status", home=home)
    assert result.returncode == 2 and "<unparseable URL>" not in result.stderr
    assert f"cannot use database URL {path}:" in result.stderr, result.stderr
    assert f"sqlite:///{path}" in result.stderr, "says the URL to write"
