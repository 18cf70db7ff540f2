"""Unpack a tar stream from an untrusted node into one directory, and nothing outside it.

Members are refused (and reported, never written) when they have an absolute path or ``..``,
are links pointing outside the directory, are device files or FIFOs, or would take the total
past ``max_bytes``. The checks are tarfile's ``data`` filter (PEP 706) plus the size cap.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

DEFAULT_MAX_BYTES = 2 * 1024**3


@dataclass
class ExtractReport:
    written: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    bytes: int = 0


def extract_stream(stream: IO[bytes], target: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> ExtractReport:
    """Extract the tar read from ``stream`` (read once, front to back) into ``target``."""
    report = ExtractReport()
    target.mkdir(parents=True, exist_ok=True)
    root = target.resolve()
    head = stream.read(512)
    if not head:
        return report  # nothing was sent (the remote path did not exist)
    with tarfile.open(fileobj=_Prefixed(head, stream), mode="r|*") as archive:
        for member in archive:
            if member.isfile() and report.bytes + member.size > max_bytes:
                report.refused.append(f"{member.name}: over the {max_bytes}-byte cap on what one attempt brings back")
                continue
            if member.name.startswith("/") or ".." in Path(member.name).parts:
                report.refused.append(f"{member.name}: an absolute path or `..` leaves the artifact directory")
                continue
            try:
                safe = tarfile.data_filter(member, str(root))
            except tarfile.FilterError as exc:
                report.refused.append(f"{member.name}: {exc}")
                continue
            if safe is None:
                report.refused.append(f"{member.name}: not a file, directory or link")
                continue
            archive.extract(safe, root, set_attrs=False, filter="fully_trusted")
            report.written.append(safe.name)
            if safe.isfile():
                report.bytes += safe.size
    return report


class _Prefixed(io.RawIOBase):
    """``head`` followed by the rest of ``stream`` (so the emptiness check reads nothing twice)."""

    def __init__(self, head: bytes, stream: IO[bytes]) -> None:
        self.head, self.stream = head, stream

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if self.head:
            if size < 0:
                data, self.head = self.head + self.stream.read(), b""
                return data
            data, self.head = self.head[:size], self.head[size:]
            return data
        return self.stream.read(size)
