"""Bus bandwidth by nccl-tests' definitions, byte sizes, and the size sweep (pure: no torch).

algbw = S / t (decimal GB/s), S the whole array in bytes; busbw = algbw × factor:
all_reduce 2(n−1)/n; all_gather, reduce_scatter, alltoall (n−1)/n; broadcast, reduce 1.
"""

from __future__ import annotations

import re

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall")
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def bus_factor(op: str, ranks: int) -> float:
    if op == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        return (ranks - 1) / ranks
    if op in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


def bandwidths(op: str, size_bytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes per second)."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * bus_factor(op, ranks)


def parse_bytes(value: int | str) -> int:
    """``8``, ``"64K"``, ``"8G"`` (binary multiples, as nccl-tests reads them) → bytes."""
    if isinstance(value, int):
        return value
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"{value!r} is not a size: use bytes or a number with K, M, G or T (e.g. 8G)")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def format_bytes(value: float) -> str:
    """Bytes → ``8G``, ``64K``, ``1.5M``, ``512``: the shortest form in binary multiples (``parse_bytes``'s inverse)."""
    for unit, size in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if value >= size:
            return f"{value / size:g}{unit}"
    return f"{value:g}"


def sweep(min_bytes: int, max_bytes: int, factor: int, granule: int) -> list[int]:
    """Sizes from ``min_bytes`` to ``max_bytes`` multiplied by ``factor``, each rounded down to a
    multiple of ``granule`` (element size × ranks) and at least one granule; no repeats."""
    sizes: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        rounded = max(granule, size // granule * granule)
        if not sizes or rounded != sizes[-1]:
            sizes.append(rounded)
        size *= factor
    return sizes
