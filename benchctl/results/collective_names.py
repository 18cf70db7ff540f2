"""Which collective names an import or a report takes: every collective nccl-tests measures, and a few others.

A node's collectives samples and an nccl-tests log (its ``Collective test starting: <name>_perf``
line) may name any collective, and thousands of distinct names would be thousands of series to
store, tabulate and plot. The collectives nccl-tests has a test for (``KNOWN``: the binaries of
NVIDIA/nccl-tests ``src/Makefile``, ``BIN_FILES_LIST``) are always kept; besides them at most
``MAX_OTHER_NAMES`` other names, the first met; the rows of the rest are left out and said in one
line (``LeftOut.line``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

KNOWN = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "alltoallv", "sendrecv",
         "gather", "scatter", "hypercube")
MAX_OTHER_NAMES = 4
"""Collective names besides ``KNOWN`` kept per import, per cell and per figure."""
EXAMPLES = 3
"""Names a ``LeftOut`` line quotes."""

Row = TypeVar("Row")


@dataclass
class LeftOut:
    """The names refused and how many rows they had."""

    names: set[str] = field(default_factory=set)
    rows: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, name: str) -> None:
        if name not in self.names and len(self.examples) < EXAMPLES:
            self.examples.append(name)
        self.names.add(name)
        self.rows += 1

    def line(self) -> str:
        """One line saying what was left out ('' when nothing was)."""
        if not self.names:
            return ""
        quoted = ", ".join(repr(name[:40]) for name in self.examples)
        more = ", …" if len(self.names) > len(self.examples) else ""
        return (f"left out {len(self.names):,} other collective names ({self.rows:,} rows: {quoted}{more}): "
                f"besides nccl-tests' own collectives at most {MAX_OTHER_NAMES} names are kept")


class Names:
    """The names taken so far (``KNOWN`` and the first ``MAX_OTHER_NAMES`` others) and those left out."""

    def __init__(self) -> None:
        self.others: list[str] = []
        self.left_out = LeftOut()

    def take(self, name: str) -> bool:
        """Whether a row of collective ``name`` is kept (a left-out one is counted)."""
        if name in KNOWN or name in self.others:
            return True
        if len(self.others) < MAX_OTHER_NAMES:
            self.others.append(name)
            return True
        self.left_out.add(name)
        return False

    def rows(self, rows: Iterable[Row], name_of: Callable[[Row], Any]) -> list[Row]:
        """The rows kept, in order (a row without a name is kept: it is no series)."""
        return [row for row in rows if (name := name_of(row)) is None or self.take(str(name))]
