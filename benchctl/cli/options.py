"""Options shared by every command (``--db``, ``--debug``) and the store they open."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


@dataclass
class CliState:
    db: str | None = None
    debug: bool = False
    connections: int | None = None
    """The connections the store's pool keeps (``run``/``resume`` set it before opening the store:
    ``scheduler.connections_for``); None: the default (``store.database.create_db_engine``)."""
    _engine: Engine | None = field(default=None, repr=False)

    def engine(self) -> Engine:
        """The store, migrated to the newest schema (opened once per command)."""
        if self._engine is None:
            from sqlalchemy.exc import DBAPIError

            from benchctl.errors import StoreFailure, UsageError
            from benchctl.home import database_url
            from benchctl.store.database import BadDatabaseURL, DamagedStore, StoreError, open_store
            from benchctl.store.migrations import SchemaTooNew

            url = database_url(self.db)
            try:  # only the default store's folder (BENCHCTL_HOME) is made: a typo'd --db is refused
                self._engine = open_store(url, make_folders=url == database_url(None, environ=False),
                                          pool_size=self.connections)
            except BadDatabaseURL as exc:
                raise UsageError(str(exc)) from exc
            except DamagedStore:
                raise  # exit 2, as the CLI shows it (cli.main)
            except (StoreError, SchemaTooNew) as exc:
                raise StoreFailure(str(exc)) from exc
            except (ValueError, TypeError, DBAPIError) as exc:  # a URL that parses but cannot be used
                raise UsageError(unusable_database(url, exc)) from exc
        return self._engine


_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:@/]*):(?P<password>[^@/]*)@")


def unusable_database(url: str, exc: BaseException) -> str:
    """One line for a database URL (or the file it names) that the driver refused, its password
    redacted: a bad port or query parameter, an unclosed ``[``, a file that is not a database."""
    reason = " ".join(str(getattr(exc, "orig", None) or exc).split())
    shown = url
    if (userinfo := _USERINFO.search(url)) is not None and userinfo["password"]:
        shown = _USERINFO.sub(r"\g<scheme>\g<user>:***@", url, count=1)
        reason = reason.replace(userinfo["password"], "***")
    if "file is not a database" in reason:
        return (f"the database {shown} is not an SQLite database ({reason}); move that file away, or point --db "
                "(or BENCHCTL_DB) at another")
    return (f"cannot use database URL {shown}: {reason}. Fix the URL (--db / BENCHCTL_DB), e.g. "
            "sqlite:///path/benchctl.db or postgresql://user@host:5432/db")


pass_state = click.make_pass_decorator(CliState, ensure=True)


def _db_after_command(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(CliState).db = value


def db_option() -> click.Option:
    """``--db`` given after the command (``benchctl status --db URL``), as before it."""
    return click.Option(["--db"], metavar="URL", expose_value=False, callback=_db_after_command,
                        help="SQLAlchemy database URL (as `benchctl --db URL COMMAND`) [env BENCHCTL_DB].")


def progress(line: str) -> None:
    """A progress line on stderr (stdout carries results)."""
    from benchctl.engine.progress import print_line

    print_line(line)
