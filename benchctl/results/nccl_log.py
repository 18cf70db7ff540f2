"""Read an nccl-tests log (``all_reduce_perf`` and friends) into collectives rows.

The rows have the keys the payload's ``collectives`` samples have (op, bytes, count, dtype, in_place, time_us,
algbw_gbps, busbw_gbps, wrong, ranks) and ``redop`` (the reduction column: ``sum``, ``none`` for a collective
without one, None in the oldest layout): one per size for out-of-place and one for in-place, and per type and
reduction when a run measured several (``-d all``, ``-o all``). A file may hold several runs. A run starts at
its ``Collective test starting: <op>_perf`` line (nccl-tests >= 2.16.7 prints it before ``# nThread``) or, in
older logs, at its ``# nThread`` line; its collective comes from that starting line, else from the file name,
its ranks from its ``#  Rank N`` lines. Lines may carry a launcher's prefix (Slurm ``srun -l``: ``0: ``, padded
to `` 0: `` from ten tasks on; Open MPI ``--tag-output``: ``[1,0]<stdout>:``; ``[0] ``), which is dropped.
Result lines have 13 columns (size count type redop root, then time algbw busbw #wrong twice), 12 before
nccl-tests 2.10 (no root; ``error`` for ``#wrong``, possibly ``N/A``) or 11 in the oldest (no redop): the two
measured groups are read from the right. A line that looks like data but does not read raises ``NcclLogError``
with its line number, and so does a number that is not finite, negative or absurdly large. A log holds at most
8 MiB and 10,000 result lines.

Under an ``error`` header (before nccl-tests 2.10), or printed as one (``0e+00``), the column is the
largest deviation, not a count:
the row keeps it as ``error`` (``wrong`` None). ``failures`` says what marks a log's results wrong or
its run failed: a ``#wrong`` count, an ``error`` above nccl-tests' own bound for its type, an ``Out of
bounds values : N FAILED`` line, a ``Test … failure`` line (NVIDIA/nccl-tests ``src/common.h``
TESTCHECK, ``src/util.cu`` writeResultFooter, a0b82b2; the bound: ``DeltaMaxValue`` × (ranks − 1) in
``src/common.cu`` before 51af557).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from benchctl.results.cell_evidence import MEASURED_DTYPE, MEASURED_REDOP, measured
from benchctl.results.collective_names import KNOWN

OPS = KNOWN
_STARTING = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_RUN = re.compile(r"^#\s*nThread\s+\d+")
_RANK = re.compile(r"^#\s*Rank\s+\d+\s")
_HEADER = re.compile(r"^#\s*size\s+count\s+type\b")
_DATA = re.compile(r"^\s*\d+\s+\d+\s")
_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\s*\d+:(?: |$)|\[\d+\] )")
"""What ``srun -l``, ``mpirun --tag-output`` and ``mpirun -prepend-rank`` put before each line. Slurm pads
the task number to the width of the largest (`` 0: `` once a step has ten or more tasks, as in
NVIDIA/nccl-tests#290) and an empty line keeps only ``0:``."""
_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)")
_FAILURE = re.compile(r"Test (?:CUDA |NCCL )?failure\b.*")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+FAILED")
_DEVIATION = re.compile(r"\d+e[+-]\d+")
"""How the ``error`` column prints (``%5.0le``: ``0e+00``, ``2e-02``); a count prints ``%6g``."""
ERROR_BOUND = {"half": 1e-2, "bfloat16": 1e-2, "float": 1e-5, "double": 1e-12}
"""The largest deviation per rank nccl-tests accepted before 2.10, by type (integers: none)."""
_COLUMNS = (11, 12, 13)
"""Result columns: 11 (oldest, no redop), 12 (before 2.10, no root), 13 (since 2.10)."""
MAX_LOG_BYTES = 8 * 1024**2
MAX_RESULT_LINES = 10_000
RUNS_DESCRIBED = 12
"""Runs ``read_as`` describes one by one; it counts the rest."""
_LARGEST = 1e12
"""No time (µs) or bandwidth (GB/s) nccl-tests prints is larger."""
_INT_MAX = 2**63 - 1


class NcclLogError(ValueError):
    def __init__(self, line: int | None, problem: str) -> None:
        self.line, self.problem = line, problem
        super().__init__(problem)


def _number(text: str, line: int) -> float:
    """A time or bandwidth: finite, not negative, below ``_LARGEST``."""
    try:
        value = float(text)
    except ValueError:
        raise NcclLogError(line, f"{text!r} is not a number where nccl-tests prints one") from None
    if not 0 <= value <= _LARGEST:  # also NaN, inf and -inf
        raise NcclLogError(line, f"{text!r} is not a time or bandwidth nccl-tests prints (negative, infinite or "
                                 "too large); fix or remove the line")
    return value


def _integer(text: str, line: int) -> int:
    value = int(text) if len(text) <= 19 else _INT_MAX + 1  # the data pattern makes it digits only
    if value > _INT_MAX:
        raise NcclLogError(line, f"{text[:30]!r} is too large for a size or count (at most {_INT_MAX})")
    return value


def _wrong(text: str, line: int) -> int | None:
    return None if text == "N/A" else int(_number(text, line))


def _op_from_name(path: Path) -> str:
    for op in sorted(OPS, key=len, reverse=True):
        if op in path.name or op.replace("_", "") in path.name:
            return op
    raise NcclLogError(None, "cannot tell which collective this log measured: it has no 'Collective test starting: "
                             "<op>_perf' line and its file name names none; rename it, e.g. all_reduce_perf.log")


def looks_like_nccl_log(text: str) -> bool:
    return any(_HEADER.match(_PREFIX.sub("", line, count=1)) for line in text.splitlines())


def read_log_text(path: Path) -> str:
    """The file's text (undecodable bytes replaced); NcclLogError when it is over ``MAX_LOG_BYTES``."""
    with path.open("rb") as handle:
        data = handle.read(MAX_LOG_BYTES + 1)
    if len(data) > MAX_LOG_BYTES:
        raise NcclLogError(None, f"the file is over {MAX_LOG_BYTES // 1024**2} MiB, more than an nccl-tests log "
                                 "holds; import the runs' own output (a log per run)")
    return data.decode(errors="replace")


def read_nccl_log(path: Path, text: str | None = None) -> list[dict[str, Any]]:
    """The log's rows (``text``: the file's, when already read with ``read_log_text``); raises
    NcclLogError when it has none, too many, or a data line cannot be read."""
    if text is None:
        text = read_log_text(path)
    op: str | None = None
    ranks = 0
    results = 0
    announced = False  # a "Collective test starting" line opened the run whose "# nThread" comes next
    deviation = False  # the header names an "error" column (the largest deviation), not "#wrong"
    rows: list[dict[str, Any]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw, count=1)
        if (starting := _STARTING.search(line)) is not None:
            op, announced = starting.group(1), True
            continue
        if _RUN.match(line):  # a new run of a test binary: its own ranks, and its own collective unless
            ranks = 0         # a starting line just named it
            if not announced:
                op = None
            announced = False
            continue
        if _RANK.match(line):
            ranks += 1
            continue
        if _HEADER.match(line):
            deviation = "error" in line.split() and "#wrong" not in line
            continue
        if not _DATA.match(line) or _FAILURE.search(line):  # a row cut short by the run's failure
            continue
        if op is None:
            op = _op_from_name(path)
        results += 1
        if results > MAX_RESULT_LINES:
            raise NcclLogError(number, f"more than {MAX_RESULT_LINES:,} result lines; import the runs in "
                                       "several files")
        fields = line.split()
        if len(fields) not in _COLUMNS:
            raise NcclLogError(number, f"expected 13 columns (size count type redop root, then time algbw busbw "
                                       f"#wrong out-of-place and in-place; 12 or 11 in logs before nccl-tests "
                                       f"2.10), found {len(fields)}")
        size, count, dtype = _integer(fields[0], number), _integer(fields[1], number), fields[2]
        redop = fields[3] if len(fields) > _COLUMNS[0] else None
        for in_place, (time_us, algbw, busbw, wrong) in ((False, fields[-8:-4]), (True, fields[-4:])):
            off = deviation or bool(_DEVIATION.fullmatch(wrong))
            row = {"op": op, "bytes": size, "count": count, "dtype": dtype, "redop": redop, "in_place": in_place,
                   "time_us": _number(time_us, number), "algbw_gbps": _number(algbw, number),
                   "busbw_gbps": _number(busbw, number), "wrong": None if off else _wrong(wrong, number),
                   "ranks": ranks or None}
            if off:
                row["error"] = None if wrong == "N/A" else _number(wrong, number)
            rows.append(row)
    if not rows:
        failed = failures([], text)
        raise NcclLogError(None, failed[0] if failed else "no result lines (size count type ... busbw) found: is "
                                                          "this an nccl-tests log?")
    return rows


def failures(rows: list[dict[str, Any]], text: str) -> list[str]:
    """What in the log (``rows``: its ``read_nccl_log`` rows) says its results are wrong or its run
    failed, one line each (the first few of a kind); [] for a clean log."""
    found = []
    wrong = [r for r in rows if r.get("wrong") or _above_bound(r)]
    if wrong:
        first = wrong[0]
        what = (f"{first['wrong']:,} wrong elements" if first.get("wrong")
                else f"error {first['error']:g} above nccl-tests' bound for {first['dtype']}")
        kind = " ".join(k for k in (first["dtype"], first.get("redop")) if k not in (None, "none"))
        where = f"{first['op']} {first['bytes']:,} B {kind} {'in' if first['in_place'] else 'out-of'}-place"
        found.append(f"{len(wrong)} results report wrong values (first: {where}, {what})")
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw, count=1)
        if (bounds := _OUT_OF_BOUNDS.match(line)) and int(bounds.group(1)):
            found.append(f"line {number}: nccl-tests counted {bounds.group(1)} checks with wrong values "
                         "('Out of bounds values : N FAILED')")
        elif (failure := _FAILURE.search(line)) and len(found) < 4:
            found.append(f"line {number}: the run failed ({failure.group(0)[:80]!r})")
    return found


def _above_bound(row: dict[str, Any]) -> bool:
    error = row.get("error")
    bound = ERROR_BOUND.get(str(row.get("dtype")), 0.0) * max(int(row.get("ranks") or 2) - 1, 1)
    return error is not None and error > bound


def read_as(rows: list[dict[str, Any]], text: str) -> str:
    """One line saying what a log was read as, per run (the first ``RUNS_DESCRIBED``): collective,
    ranks, sizes, the largest size's out-of-place busbw (per type and reduction when a run measured
    several, as nccl-tests ``-d all`` and ``-o all``: the ones a campaign measures first, marked ranked,
    as ``cell_evidence.measured`` picks them over the whole file; a run of one type and reduction that
    it leaves out, e.g. half at 16 ranks beside float at 2, says so), and the nccl-tests version when
    the log prints it (>= 2.16)."""
    version = next((m.group(1) for line in text.splitlines()
                    if (m := _VERSION.match(_PREFIX.sub("", line, count=1)))), None)
    runs: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for row in rows:
        runs.setdefault((row["op"], row["ranks"]), []).append(row)
    ranked = {id(row) for row in measured(rows)}
    parts = []
    for (op, ranks), run in list(runs.items())[:RUNS_DESCRIBED]:
        largest: dict[tuple[str, Any], dict[str, Any]] = {}  # (type, reduction) -> its largest out-of-place row
        for r in run:
            kind = (r["dtype"], r.get("redop"))
            if not r["in_place"] and r["bytes"] >= largest.get(kind, {"bytes": -1})["bytes"]:
                largest[kind] = r
        sizes = len({r["bytes"] for r in run})
        if len(largest) == 1:
            only = next(iter(largest.values()))
            left_out = "" if id(only) in ranked else f" (not ranked: {_ranked_instead(op, only)})"
            parts.append(f"{op}, {ranks or '?'} ranks, {sizes} sizes, largest {only['bytes']:,} B at busbw "
                         f"{only['busbw_gbps']:g} GB/s{left_out}")
            continue
        parts.append(_several_kinds(op, ranks, sizes, largest, ranked))
    more = f"; and {len(runs) - RUNS_DESCRIBED:,} more runs" if len(runs) > RUNS_DESCRIBED else ""
    return "; ".join(parts) + more + f" (nccl-tests {version or 'version not printed'})"


def _ranked_instead(op: str, row: dict[str, Any]) -> str:
    """Why a run of one type and reduction (``row``: its largest) is left out of the ranking: the file
    holds the type or reduction a campaign measures for ``op`` in another run."""
    differs = [f"{theirs} rows, not {row[key]}" for key, theirs in (("dtype", MEASURED_DTYPE),
                                                                    ("redop", MEASURED_REDOP))
               if row.get(key) not in (None, "none", theirs)]
    return f"the file's {op} ranks on its " + " and ".join(differs)


def _several_kinds(op: str, ranks: Any, sizes: int, largest: dict[tuple[str, Any], dict[str, Any]],
                   ranked_rows: set[int]) -> str:
    """``read_as`` of a run that measured several types or reductions (``largest``: each one's largest
    out-of-place row; ``ranked_rows``: the ids of the file's rows a campaign ranks)."""
    types, reductions = {t for t, _ in largest}, {o for _, o in largest}
    several = (len(types) > 1, len(reductions) > 1)
    wanted = (MEASURED_DTYPE, MEASURED_REDOP)

    def name(kind: tuple[str, Any]) -> str:
        return " ".join(str(part) for part, varies in zip(kind, several, strict=True) if varies)

    ranked = {k for k in largest if id(largest[k]) in ranked_rows}
    counts = ", ".join(f"{len(kinds)} {noun}" for kinds, noun in ((types, "types"), (reductions, "reductions"))
                       if len(kinds) > 1)
    each_of = " and ".join(noun for noun, varies in zip(("type", "reduction"), several, strict=True) if varies)
    each = ", ".join(f"{name(k)} {largest[k]['busbw_gbps']:g}" + (" (ranked)" if k in ranked else "")
                     for k in sorted(largest, key=lambda k: k not in ranked))
    missing = "" if ranked else f" (no {name(wanted)}: nothing ranked)"
    return (f"{op}, {ranks or '?'} ranks, {counts}, {sizes} sizes, busbw GB/s at each {each_of}'s largest size: "
            f"{each}{missing}")
