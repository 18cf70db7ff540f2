"""The error tree. Every message says what is wrong and what to do next.

The CLI turns a BenchctlError into a one-line message and its ``exit_code``, in one place
(``benchctl.cli.main``); ``--debug`` shows the traceback.
"""

from __future__ import annotations


class BenchctlError(Exception):
    exit_code = 1


class UsageError(BenchctlError):
    """Bad input from the user: a campaign file, an argument, a name."""

    exit_code = 2


class SpecError(UsageError):
    """A campaign file is wrong. ``str()`` is ``file:line path: problem``."""

    def __init__(self, file: str, line: int | None, path: str, problem: str) -> None:
        self.file, self.line, self.path, self.problem = file, line, path, problem
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where} {path}: {problem}" if path else f"{where}: {problem}")


class ProviderUnavailable(UsageError):
    """A campaign names a provider this installation cannot use."""


class CampaignNotFound(UsageError):
    pass


class StoreFailure(BenchctlError):
    """The database could not be opened or used."""


class Interrupted(BenchctlError):
    exit_code = 130
