"""Options shared by every command (``--db``, ``--debug``) and the store they open."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


@dataclass
class CliState:
    db: str | None = None
    debug: bool = False
    _engine: Engine | None = field(default=None, repr=False)

    def engine(self) -> Engine:
        """The store, migrated to the newest schema (opened once per command)."""
        if self._engine is None:
            from benchctl.errors import StoreFailure, UsageError
            from benchctl.settings import database_url
            from store.database import BadDatabaseURL, StoreError, open_store
            from store.migrations import SchemaTooNew

            try:
                self._engine = open_store(database_url(self.db))
            except BadDatabaseURL as exc:
                raise UsageError(str(exc)) from exc
            except (StoreError, SchemaTooNew) as exc:
                raise StoreFailure(str(exc)) from exc
        return self._engine


pass_state = click.make_pass_decorator(CliState, ensure=True)


def progress(line: str) -> None:
    """A progress line on stderr (stdout carries results)."""
    from benchctl.progress import print_line

    print_line(line)
