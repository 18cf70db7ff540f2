"""Read an nccl-tests log (``all_reduce_perf`` and friends) into collectives rows.

The rows have the keys the payload's ``collectives`` samples have (op, bytes, count, dtype,
in_place, time_us, algbw_gbps, busbw_gbps, wrong, ranks): one per size for out-of-place and one
for in-place. The collective comes from the ``Collective test starting: <op>_perf`` line above
the rows (a file may hold several runs, each starting with its ``# nThread`` line), else from the
file name; ranks from the ``#  Rank N`` lines of the same run. A line that looks like data but
does not read raises ``NcclLogError`` with its line number.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv", "gather",
       "scatter", "hypercube")
_STARTING = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_RUN = re.compile(r"^#\s*nThread\s+\d+")
_RANK = re.compile(r"^#\s*Rank\s+\d+\s")
_HEADER = re.compile(r"^#\s*size\s+count\s+type\b")
_DATA = re.compile(r"^\s*\d+\s+\d+\s")


class NcclLogError(ValueError):
    def __init__(self, line: int | None, problem: str) -> None:
        self.line, self.problem = line, problem
        super().__init__(problem)


def _number(text: str, line: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise NcclLogError(line, f"{text!r} is not a number where nccl-tests prints one") from None


def _wrong(text: str, line: int) -> int | None:
    return None if text == "N/A" else int(_number(text, line))


def _op_from_name(path: Path) -> str:
    for op in sorted(OPS, key=len, reverse=True):
        if op in path.name or op.replace("_", "") in path.name:
            return op
    raise NcclLogError(None, "cannot tell which collective this log measured: it has no 'Collective test starting: "
                             "<op>_perf' line and its file name names none; rename it, e.g. all_reduce_perf.log")


def looks_like_nccl_log(text: str) -> bool:
    return any(_HEADER.match(line) for line in text.splitlines())


def read_nccl_log(path: Path) -> list[dict[str, Any]]:
    """The log's rows; raises NcclLogError when it has none or a data line cannot be read."""
    text = path.read_text(errors="replace")
    op: str | None = None
    ranks = 0
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if _RUN.match(line):
            op, ranks = None, 0  # a new run of a test binary: its own collective and ranks
            continue
        if (starting := _STARTING.search(line)) is not None:
            op = starting.group(1)
            continue
        if _RANK.match(line):
            ranks += 1
            continue
        if not _DATA.match(line):
            continue
        if op is None:
            op = _op_from_name(path)
        fields = line.split()
        if len(fields) != 13:
            raise NcclLogError(number, f"expected 13 columns (size count type redop root, then time algbw busbw "
                                       f"#wrong out-of-place and in-place), found {len(fields)}")
        size, count, dtype = int(fields[0]), int(fields[1]), fields[2]
        for in_place, (time_us, algbw, busbw, wrong) in ((False, fields[5:9]), (True, fields[9:13])):
            rows.append({"op": op, "bytes": size, "count": count, "dtype": dtype, "in_place": in_place,
                         "time_us": _number(time_us, number), "algbw_gbps": _number(algbw, number),
                         "busbw_gbps": _number(busbw, number), "wrong": _wrong(wrong, number),
                         "ranks": ranks or None})
    if not rows:
        raise NcclLogError(None, "no result lines (size count type ... busbw) found: is this an nccl-tests log?")
    return rows
