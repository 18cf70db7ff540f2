"""What a user's file may hold and how its values are named, without YAML: ``Limits``, the capped
read, the 64-bit integer bound, and a value's path (``("matrix", 2, "count")``) with its line.

Shared by ``yaml_source`` (which parses YAML) and the JSON fast path of ``results.records``, which
so loads no PyYAML unless a file needs the general reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from benchctl.errors import SpecError

Path_ = tuple[str | int, ...]

INT_MAX = 2**63 - 1


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    max_values: int
    """Values built (each mapping, list and scalar; repeated through aliases counts each time)."""
    max_depth: int = 64


def read_capped(path: Path, file: str, max_bytes: int, what: str) -> str:
    """The file's text; SpecError when it is over ``max_bytes`` (checked before it is read whole).
    OSError and UnicodeDecodeError are the caller's."""
    with path.open("rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SpecError(file, None, "", f"the file is over {size_text(max_bytes)}, the most {what} may hold; "
                        "split it or trim it")
    return data.decode("utf-8")


def size_text(count: int) -> str:
    """``1048576`` → ``1 MiB``; a size that is not whole MiB in bytes."""
    return f"{count // 1024**2} MiB" if count % 1024**2 == 0 else f"{count:,} bytes"


def format_path(path: Path_) -> str:
    """``("matrix", 2, "count")`` → ``matrix[2].count``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def line_of(lines: Mapping[Path_, int], path: Path_) -> int | None:
    """The line of ``path`` or of its nearest ancestor that appears in the file."""
    for end in range(len(path), -1, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return None
