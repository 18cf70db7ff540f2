"""What an SQLite URL opens, decided before SQLite sees it: one database file (never a link, never a
stray file named after the URL's text), opened read-only when the URL says ``mode=ro``.

SQLAlchemy's pysqlite dialect hands SQLite's own URI parameters (``mode``, ``cache``, …) to SQLite
only with ``uri=true``; without it they are dropped with a warning, so ``sqlite:///x.db?mode=ro``
opened (and migrated) the file read-write, and ``sqlite:///file::memory:`` created a file named
``file::memory:`` in the current folder (sqlalchemy/dialects/sqlite/pysqlite.py,
``create_connect_args``; SQLite's URI rules: https://www.sqlite.org/uri.html). Here a URL with
SQLite parameters is rewritten to the ``file:`` URI form SQLite reads, a ``file:`` name without
``uri=true`` is refused, and an in-memory database asked for through URI parameters is refused
(benchctl keeps nothing across commands in memory; ``sqlite://`` stays the throwaway store).
``check_file`` refuses a database file (or its ``-wal``, ``-shm``, ``-journal``) that is a symbolic
link or not a regular file, and makes a missing one 0600 without following a link.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

DRIVER_ARGS = frozenset({"uri", "timeout", "isolation_level", "detect_types", "check_same_thread",
                         "cached_statements"})
"""What the pysqlite dialect passes to ``sqlite3.connect`` itself."""
SQLITE_PARAMS = frozenset({"mode", "cache", "vfs", "psow", "nolock", "immutable"})
"""SQLite's own URI query parameters (https://www.sqlite.org/uri.html)."""
MODES = ("ro", "rw", "rwc")
SIDE_FILES = ("-wal", "-shm", "-journal")
_TRUE = ("true", "1", "yes", "on", "y", "t")


class BadSQLiteURL(ValueError):
    """The URL would not open what it says (a stray file, an ignored parameter, memory)."""


class UnsafeSQLiteFile(ValueError):
    """The database file is a link or not a regular file: it is not opened."""


@dataclass(frozen=True)
class SQLiteTarget:
    url: URL
    """What to give SQLAlchemy (the ``file:`` URI form when SQLite parameters are in play)."""
    path: Path | None
    """The database file, absolute; None for ``sqlite://`` (in memory)."""
    read_only: bool
    may_create: bool
    """``mode=rwc`` (SQLite's default): a missing file is created."""


def sqlite_target(url: str) -> SQLiteTarget | None:
    """What ``url`` opens, or None when it is not an SQLite URL (or does not parse: the engine's
    own error says why). Raises BadSQLiteURL naming what to write instead."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if not parsed.drivername.startswith("sqlite"):
        return None
    unknown = sorted(set(parsed.query) - DRIVER_ARGS - SQLITE_PARAMS)
    if unknown:
        raise BadSQLiteURL(f"unknown SQLite URL parameter {', '.join(unknown)} (SQLite's are "
                           f"{', '.join(sorted(SQLITE_PARAMS))}): remove it")
    query = {key: value for key, value in parsed.query.items() if isinstance(value, str)}
    if len(query) < len(parsed.query):
        raise BadSQLiteURL("a parameter is given twice: give each once")
    uri = query.get("uri", "").lower() in _TRUE
    name = parsed.database or ""
    if name.startswith("file:") and not uri:
        raise BadSQLiteURL(f"{name!r} would be a file of that name in the current folder (SQLite reads file: names "
                           "as URIs only with uri=true): give a path, sqlite:///path/benchctl.db")
    path = _uri_path(name) if uri and name.startswith("file:") else name
    mode = query.get("mode", "rwc")
    if path in ("", ":memory:") and not (set(query) & SQLITE_PARAMS) and not uri:
        return SQLiteTarget(parsed, None, read_only=False, may_create=True)  # sqlite:// as before
    if path in ("", ":memory:") or mode == "memory" or query.get("vfs") == "memdb":
        raise BadSQLiteURL("an in-memory database is lost when the command ends: give a file, "
                           "sqlite:///path/benchctl.db")
    if mode not in MODES:
        raise BadSQLiteURL(f"mode={mode} is not an SQLite open mode: use {', '.join(MODES)}")
    absolute = Path(os.path.abspath(path))
    read_only = mode == "ro" or query.get("immutable", "").lower() in _TRUE
    if uri or set(query) & SQLITE_PARAMS:
        parsed = parsed.set(database="file:" + quote(str(absolute), safe="/"), query={**query, "uri": "true"})
    return SQLiteTarget(parsed, absolute, read_only=read_only, may_create=mode == "rwc" and not read_only)


def _uri_path(name: str) -> str:
    """The file a ``file:`` URI names (its authority empty or ``localhost``, its fragment dropped)."""
    rest = name.removeprefix("file:").split("#", 1)[0]
    if rest.startswith("//"):
        authority, _, tail = rest[2:].partition("/")
        if authority not in ("", "localhost"):
            raise BadSQLiteURL(f"{name!r} names the host {authority!r}; SQLite opens local files only")
        rest = "/" + tail
    return unquote(rest)


def check_file(target: SQLiteTarget, make_folders: bool = True) -> None:
    """Create a missing database file empty and 0600 (``O_EXCL | O_NOFOLLOW``), when the mode may
    create; its missing folders 0700 only with ``make_folders`` (else a missing folder is refused: a
    typo in a path would open a new, empty store that looks like "no campaigns yet"). Then refuse
    the file (or a side file) when it is a link or not a regular file. Raises UnsafeSQLiteFile,
    BadSQLiteURL (missing and not to be created), OSError."""
    path = target.path
    if path is None:
        return
    if not os.path.lexists(path):
        if not target.may_create:
            raise BadSQLiteURL(f"{path} does not exist (mode={'ro' if target.read_only else 'rw'} opens an existing "
                               "database only): check the path, or drop the mode to create it")
        if not make_folders and not os.path.lexists(path.parent):
            raise BadSQLiteURL(f"the folder {path.parent} does not exist, so {path.name} would be a new, empty "
                               f"database: check the path, or create the folder first (mkdir -p {path.parent})")
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked below like any other
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    for candidate in (path, *(Path(f"{path}{suffix}") for suffix in SIDE_FILES)):
        try:
            info = os.lstat(candidate)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            raise UnsafeSQLiteFile(f"{candidate} is a symbolic link (to {os.readlink(candidate)}); benchctl does not "
                                   "follow links to its database: remove the link, or give the real file's path")
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeSQLiteFile(f"{candidate} is not a regular file: move it away, or give another database path")
