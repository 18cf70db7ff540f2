"""Unpack a tar stream from an untrusted node into one directory, and nothing outside it.

Only regular files and directories are written; every other member (symlink, hard link, device,
FIFO, sparse or unknown type) is refused, and so is a name that is empty, absolute, has a ``..``
component or a NUL, or is over-long (a component over 255 bytes, a path over 4096), and a file that
would take the total past ``max_bytes``, and every member past the first ``MAX_MEMBERS`` (each is
refused in turn, what came before is kept). Refused members are skipped and reported (the first
``refusals.MAX_LISTED``, then a count), never written.

Nothing relies on ``tarfile``'s extraction filters: files are created by this module, one path
component at a time relative to directory descriptors opened with ``O_NOFOLLOW``, so no link (ours,
planted, or raced) is ever followed. Directories are created 0700, files 0600 (written to a
temporary name and renamed into place, so a broken stream leaves no half-written file).

The stream itself is bounded before ``tarfile`` reads it: a pax or GNU long-name header over 64 KiB,
more than 8 such headers in a row or 16 MiB of them in all, or a negative or absurd size stops the
extraction with ``ArchiveRefused`` (what was written so far stays). A stream of endless members is
bounded by the caller's deadline; the memory it takes here is not.
"""

from __future__ import annotations

import io
import lzma
import os
import secrets
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from benchctl.provisioners.base import ProviderError
from benchctl.provisioners.refusals import Refusals

DEFAULT_MAX_BYTES = 2 * 1024**3
MAX_MEMBERS = 10_000
MAX_EXTENDED_HEADER_BYTES = 64 * 1024
MAX_EXTENDED_IN_A_ROW = 8
MAX_EXTENDED_TOTAL_BYTES = 16 * 1024**2
MAX_MEMBER_BYTES = 2**40
MAX_COMPONENT_BYTES = 255
MAX_PATH_BYTES = 4096
_CHUNK = 1024 * 1024
_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
             tarfile.GNUTYPE_LONGLINK)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DAMAGED = (tarfile.TarError, OSError, EOFError, ValueError, zlib.error, lzma.LZMAError)
"""What reading a damaged or hostile stream can raise (bz2 reports bad data as an OSError)."""


class ArchiveRefused(ProviderError, tarfile.TarError):
    """The stream breaks a limit or is damaged: extraction stopped. A ``ProviderError`` for callers, and a
    ``TarError`` so that code which already handles a broken tar (ending the download) handles it too."""


@dataclass
class ExtractReport(Refusals):
    written: list[str] = field(default_factory=list)
    """At most ``MAX_MEMBERS`` names."""
    bytes: int = 0
    members: int = 0


def extract_stream(stream: IO[bytes], target: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> ExtractReport:
    """Extract the tar read from ``stream`` (read once, front to back) into ``target``.

    Raises ``ArchiveRefused`` when the stream breaks a limit or is damaged; refused members are in the report.
    """
    report = ExtractReport()
    target.mkdir(parents=True, exist_ok=True)
    head = stream.read(512)
    if not head:
        return report  # nothing was sent (the remote path did not exist)
    try:
        root = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ArchiveRefused(f"{target} is a link or not a folder ({exc.strerror}); nothing is written through it"
                             ) from exc
    try:
        with _reading("not a tar stream"):
            archive = _GuardedTarFile.open(fileobj=_Prefixed(head, stream), mode="r|*")
        with archive:
            while (member := _next(archive)) is not None:
                data = archive.extractfile(member) if _has_data(member) else None
                report.members += 1
                problem = _refusal(member, report.bytes, max_bytes) if report.members <= MAX_MEMBERS else \
                    f"past the {MAX_MEMBERS}-member cap on one download"
                if problem is None:
                    try:
                        _write(root, _parts(member.name), data)
                    except OSError as exc:
                        problem = f"could not be written here ({exc.strerror or exc})"
                if problem is None:
                    report.written.append(member.name)
                    report.bytes += member.size if data is not None else 0
                else:
                    report.refuse(f"{_shown(member.name)}: {problem}")
                if data is not None:
                    _drain(data)
                archive.members.clear()  # tarfile keeps every header it read: memory would grow with the stream
    finally:
        os.close(root)
    return report


def _refusal(member: tarfile.TarInfo, so_far: int, max_bytes: int) -> str | None:
    """Why ``member`` is not written, or None."""
    if not (member.isfile() or member.isdir()):
        kind = ("a symlink" if member.issym() else "a hard link" if member.islnk() else
                "a device or FIFO" if member.isdev() else "an unknown type")
        return f"{kind}: only files and directories are accepted"
    name = member.name
    if not name:
        return "an empty name"
    if "\0" in name:
        return "a NUL in the name"
    if name.startswith("/") or ".." in name.split("/"):
        return "an absolute path or `..` leaves the artifact directory"
    try:
        encoded = os.fsencode(name)
    except UnicodeError:
        return "a name that cannot be written as a file name"
    if len(encoded) > MAX_PATH_BYTES or any(len(part) > MAX_COMPONENT_BYTES for part in encoded.split(b"/")):
        return f"an over-long name (a component over {MAX_COMPONENT_BYTES} bytes or over {MAX_PATH_BYTES} in all)"
    if member.isfile() and so_far + member.size > max_bytes:
        return f"over the {max_bytes}-byte cap on what one attempt brings back"
    return None


def _parts(name: str) -> list[str]:
    return [part for part in name.split("/") if part not in ("", ".")]


def _write(root: int, parts: list[str], data: IO[bytes] | None) -> None:
    """Create the directory ``parts`` (``data`` None) or the file ``parts`` holding ``data``, under ``root``."""
    if data is None:
        os.close(_open_dirs(root, parts))
        return
    if not parts:
        raise IsADirectoryError(21, "the artifact directory itself is not a file")
    folder = _open_dirs(root, parts[:-1])
    temp = f".benchctl-{secrets.token_hex(8)}.part"
    try:
        out = os.open(temp, _NEW_FILE_FLAGS, 0o600, dir_fd=folder)
        try:
            while chunk := _read(data):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
        finally:
            os.close(out)
        os.replace(temp, parts[-1], src_dir_fd=folder, dst_dir_fd=folder)  # replaces a link, never follows it
    except BaseException:
        with suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise
    finally:
        os.close(folder)


def _open_dirs(root: int, parts: list[str]) -> int:
    """A descriptor of ``root``/``parts``, each component made (0700) if missing and never a link."""
    fd = os.dup(root)
    for part in parts:
        with suppress(FileExistsError):
            os.mkdir(part, 0o700, dir_fd=fd)
        try:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
        finally:
            os.close(fd)
        fd = child
    return fd


def _has_data(member: tarfile.TarInfo) -> bool:
    """Whether data blocks follow the header (as tarfile decides it)."""
    return member.isreg() or member.type not in tarfile.SUPPORTED_TYPES


def _read(data: IO[bytes]) -> bytes:
    """The next chunk of a member's data (b"" at its end); a stream that ends early is refused."""
    with _reading("damaged"):
        return data.read(_CHUNK)


def _drain(data: IO[bytes]) -> None:
    """Read what is left of a member's data, so the next header is where tarfile expects it."""
    while _read(data):
        pass


def _next(archive: tarfile.TarFile) -> tarfile.TarInfo | None:
    with _reading("damaged"):
        return archive.next()


@contextmanager
def _reading(what: str) -> Iterator[None]:
    """Turns whatever a damaged stream raises while it is read into ``ArchiveRefused``."""
    try:
        yield
    except ArchiveRefused:
        raise
    except _DAMAGED as exc:
        raise ArchiveRefused(f"{what} ({exc})") from exc


def _shown(name: str) -> str:
    return name if len(name) <= 200 else f"{name[:200]}… ({len(name)} characters)"


class _GuardedInfo(tarfile.TarInfo):
    """Checks each header before tarfile acts on it (reads an extended header whole, seeks past data)."""

    def _proc_member(self, archive: tarfile.TarFile) -> tarfile.TarInfo:
        assert isinstance(archive, _GuardedTarFile)
        _check_size(self.size)
        if self.type in _EXTENDED:
            archive.extended_in_a_row += 1
            archive.extended_bytes += self.size
            if self.size > MAX_EXTENDED_HEADER_BYTES:
                raise ArchiveRefused(f"refused: a {self.size}-byte extended (pax or long-name) header, "
                                     f"over the {MAX_EXTENDED_HEADER_BYTES}-byte limit")
            if archive.extended_in_a_row > MAX_EXTENDED_IN_A_ROW:
                raise ArchiveRefused(f"refused: more than {MAX_EXTENDED_IN_A_ROW} extended headers in a row")
            if archive.extended_bytes > MAX_EXTENDED_TOTAL_BYTES:
                raise ArchiveRefused(f"refused: extended headers over {MAX_EXTENDED_TOTAL_BYTES} bytes in all")
        else:
            archive.extended_in_a_row = 0
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise ArchiveRefused("refused: a sparse member (artifacts are plain files)")
        member: tarfile.TarInfo = super()._proc_member(archive)  # type: ignore[misc]
        _check_size(member.size)  # a pax header may have replaced it
        return member

    def _proc_gnusparse_00(self, *args: object) -> None:
        raise ArchiveRefused("refused: a sparse member (artifacts are plain files)")

    _proc_gnusparse_01 = _proc_gnusparse_10 = _proc_gnusparse_00



def _check_size(size: int) -> None:
    if not 0 <= size <= MAX_MEMBER_BYTES:
        raise ArchiveRefused(f"refused: a member of impossible size {size}")


class _GuardedTarFile(tarfile.TarFile):
    tarinfo = _GuardedInfo
    members: list[tarfile.TarInfo]  # tarfile's own list of the headers read (cleared as we go)
    extended_in_a_row = 0
    extended_bytes = 0


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
