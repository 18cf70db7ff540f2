"""Copy files out of a local node's home without trusting them (the local counterpart of ``safe_tar``).

A local node's processes can make anything of their home, and the destination may hold what an
earlier copy or someone else left there. So:

- nothing is followed: every path is walked one component at a time from an open directory with
  ``O_NOFOLLOW``; symbolic links and files with several hard links are refused (artifacts never
  need links), as are FIFOs, devices and sockets (they are never opened, so none can stall);
- nothing is written through what the destination holds: each file is written to a new name
  (``O_EXCL``) and renamed over the old entry (a planted link is replaced, never written through);
  a destination directory that is a link is refused;
- at most ``max_bytes`` in all, ``MAX_ENTRIES`` entries and ``MAX_DEPTH`` levels; the deadline is
  checked between blocks;
- directories are created 0o700, files 0o600.

What was refused is reported with why, as ``safe_tar`` does (the first ``refusals.MAX_LISTED``, then
a count): an entry past ``MAX_ENTRIES`` is refused in turn, what came before is kept.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from benchctl.provisioners.refusals import Refusals
from benchctl.provisioners.transfer_deadline import Deadline

MAX_ENTRIES = 100_000
MAX_DEPTH = 64
BLOCK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class CopyReport(Refusals):
    written: list[str] = field(default_factory=list)
    bytes: int = 0


class _Copy:
    def __init__(self, max_bytes: int, deadline: Deadline) -> None:
        self.max_bytes = max_bytes
        self.deadline = deadline
        self.report = CopyReport()
        self.entries = 0

    def refuse(self, name: str, why: str) -> None:
        self.report.refuse(f"{name}: {why}")

    def entry(self, src_dir: int, name: str, dst_dir: int, shown: str, depth: int) -> None:
        self.deadline.check(f"copying {shown}")
        self.entries += 1
        if self.entries > MAX_ENTRIES:
            self.refuse(shown, f"more than {MAX_ENTRIES} entries; the rest is not copied")
            return
        try:
            info = os.stat(name, dir_fd=src_dir, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode):
            self.refuse(shown, "a symbolic link (artifacts never need links; not followed)")
        elif stat.S_ISDIR(info.st_mode):
            if depth >= MAX_DEPTH:
                self.refuse(shown, f"nested deeper than {MAX_DEPTH} directories")
                return
            self.directory(src_dir, name, dst_dir, shown, depth + 1)
        elif not stat.S_ISREG(info.st_mode):
            self.refuse(shown, "not a regular file or directory")
        elif info.st_nlink > 1:
            self.refuse(shown, "a file with several hard links (artifacts never need links)")
        else:
            self.file(src_dir, name, dst_dir, shown)

    def directory(self, src_parent: int, name: str, dst_parent: int, shown: str, depth: int) -> None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=dst_parent)
        try:
            dst = os.open(name, _DIR_FLAGS, dir_fd=dst_parent)
        except OSError:
            self.refuse(shown, "the destination holds a link or a file at this name; not written through")
            return
        src = _open_dir(src_parent, name)
        try:
            if src is None:
                self.refuse(shown, "changed into something else while it was copied")
                return
            for child in sorted(os.listdir(src)):
                self.entry(src, child, dst, f"{shown}/{child}", depth)
            self.report.written.append(shown)
        finally:
            os.close(dst)
            if src is not None:
                os.close(src)

    def file(self, src_dir: int, name: str, dst_dir: int, shown: str) -> None:
        try:
            src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
        except OSError as exc:
            self.refuse(shown, f"cannot be opened without following it ({exc.strerror})")
            return
        temp = f".benchctl-{uuid.uuid4().hex[:12]}.part"
        try:
            info = os.fstat(src)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
                self.refuse(shown, "changed into something else while it was copied")
                return
            left = self.max_bytes - self.report.bytes
            if info.st_size > left:
                self.refuse(shown, f"over the {self.max_bytes}-byte cap on what one attempt brings back")
                return
            dst = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=dst_dir)
            copied = 0
            try:
                while block := os.read(src, min(BLOCK, left - copied + 1)):
                    copied += len(block)
                    if copied > left:
                        break
                    os.write(dst, block)
                    self.deadline.check(f"copying {shown}")
            finally:
                os.close(dst)
            if copied > left:
                os.unlink(temp, dir_fd=dst_dir)
                self.refuse(shown, f"over the {self.max_bytes}-byte cap on what one attempt brings back (it grew)")
                return
            try:
                os.replace(temp, name, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
            except OSError:
                os.unlink(temp, dir_fd=dst_dir)
                self.refuse(shown, "the destination holds a directory at this name")
                return
            self.report.bytes += copied
            self.report.written.append(shown)
        finally:
            os.close(src)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=dst_dir)


def _open_dir(parent: int, name: str) -> int | None:
    """``name`` under ``parent`` opened as a directory without following a link (None if it is not one)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError:
        return None


def copy_out(home: Path, relative: str, target: Path, max_bytes: int, deadline: Deadline) -> CopyReport:
    """Copy ``home/relative`` (a file or a directory; nothing if absent) into ``target`` (created 0o700)
    under its own name, as the module docstring says. ``target`` is the controller's; ``home`` and
    every component of ``relative`` are the node's and are not followed. Raises OSError when
    ``home`` or ``target`` cannot be opened (``target`` a link included: it is not followed either),
    ``TransferTimeout`` past the deadline."""
    parts = [p for p in Path(relative).parts if p not in ("", ".")]
    if not parts or ".." in parts or Path(relative).is_absolute():
        raise ValueError(f"path {relative!r} leaves the node's home")
    copy = _Copy(max_bytes, deadline)
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.ExitStack() as fds:
        dst = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)  # a planted link: ELOOP
        fds.callback(os.close, dst)
        src = os.open(home, _DIR_FLAGS)
        fds.callback(os.close, src)
        for index, part in enumerate(parts[:-1]):
            inner = _open_dir(src, part)
            if inner is None:
                shown = "/".join(parts[:index + 1])
                if os.path.lexists(home / shown):
                    copy.refuse(shown, "not a directory, or a link (not followed)")
                return copy.report
            fds.callback(os.close, inner)
            src = inner
        copy.entry(src, parts[-1], dst, parts[-1], 0)
    return copy.report
