"""A hostile archive from a rented node writes nothing outside the artifact directory."""

from __future__ import annotations

import gzip
import io
import itertools
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.provisioners import safe_tar
from benchctl.provisioners.refusals import MAX_LISTED
from benchctl.provisioners.safe_tar import MAX_MEMBERS, ArchiveRefused, extract_stream


def _member(tar: tarfile.TarFile, name: str, data: bytes = b"x", **kind: object) -> None:
    info = tarfile.TarInfo(name)
    for key, value in kind.items():
        setattr(info, key, value)
    if info.isfile():
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def _archive(build) -> io.BytesIO:  # type: ignore[no-untyped-def]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        build(tar)
    buffer.seek(0)
    return buffer


def test_hostile_members_are_refused_and_nothing_escapes(tmp_path: Path) -> None:
    target = tmp_path / "artifacts" / "cell" / "1"
    outside = tmp_path / "outside"

    def build(tar: tarfile.TarFile) -> None:
        _member(tar, "artifacts/ok.txt", b"fine")
        _member(tar, str(outside / "abs.txt"), b"absolute")
        _member(tar, "../../escape.txt", b"dotdot")
        _member(tar, "artifacts/link", type=tarfile.SYMTYPE, linkname="../../../../outside")
        _member(tar, "artifacts/hard", type=tarfile.LNKTYPE, linkname="../../../etc/passwd")
        _member(tar, "artifacts/dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        _member(tar, "artifacts/fifo", type=tarfile.FIFOTYPE)
        _member(tar, "artifacts/big.bin", b"y" * 2000)
        _member(tar, "artifacts/small.txt", b"z" * 10)

    report = extract_stream(_archive(build), target, max_bytes=1000)
    assert (target / "artifacts" / "ok.txt").read_bytes() == b"fine"
    assert (target / "artifacts" / "small.txt").exists(), "members after a refused one still arrive"
    assert sorted(report.written) == ["artifacts/ok.txt", "artifacts/small.txt"]
    refused = " ".join(report.refused)
    for name in ("abs.txt", "escape.txt", "artifacts/link", "artifacts/hard", "artifacts/dev", "artifacts/fifo",
                 "artifacts/big.bin"):
        assert name in refused, name
    assert "cap" in refused
    assert not outside.exists() and not (tmp_path / "escape.txt").exists()
    written = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file() or p.is_symlink()}
    assert written == {Path("artifacts/cell/1/artifacts/ok.txt"), Path("artifacts/cell/1/artifacts/small.txt")}


def test_an_empty_stream_is_no_archive_and_no_error(tmp_path: Path) -> None:
    report = extract_stream(io.BytesIO(b""), tmp_path / "t")
    assert report.written == [] and report.refused == []


# -- the tricks of issue 13 items 1 and 8, each as a node would send it ---------------------------------------


class _Feed(io.RawIOBase):
    """A lazy stream of ``chunks``; fails the test if the reader takes more than ``allowed`` bytes of it."""

    def __init__(self, chunks: Iterator[bytes], allowed: int) -> None:
        self.chunks, self.allowed, self.consumed, self.pending = chunks, allowed, 0, b""

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        while not self.pending:
            self.pending = next(self.chunks, b"")
            if not self.pending:
                return b""
        size = len(self.pending) if size < 0 else size
        data, self.pending = self.pending[:size], self.pending[size:]
        self.consumed += len(data)
        assert self.consumed <= self.allowed, f"the extractor read {self.consumed} bytes of a hostile stream"
        return data


def _header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    """One raw header block (GNU format: base-256 numbers allow absurd and negative sizes)."""
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.GNU_FORMAT)


def _files_outside(tmp_path: Path, target: Path) -> set[Path]:
    return {p for p in tmp_path.rglob("*") if not p.is_relative_to(target) and not p.is_dir()}


def test_the_cve_2025_4517_link_chain_writes_nothing_outside(tmp_path: Path) -> None:
    """Short links to 247-character directories make the real path longer than PATH_MAX, where
    ``os.path.realpath`` (and so tarfile's data filter) stops resolving links; a link at the bottom
    then climbs back up further than the filter thinks, and a file is written through it."""
    target = tmp_path / "target"
    sentinel = tmp_path / "sentinel.txt"
    sentinel.write_text("mine")
    steps, long = "abcdefghijklmnopq", "d" * 247

    def build(tar: tarfile.TarFile) -> None:
        path = ""
        for step in steps:
            _member(tar, path + long, type=tarfile.DIRTYPE)
            _member(tar, path + step, type=tarfile.SYMTYPE, linkname=long)
            path += step + "/"
        _member(tar, path + "up", type=tarfile.SYMTYPE, linkname="../" * len(steps))  # the kernel: back at the root
        _member(tar, "escape", type=tarfile.SYMTYPE, linkname=path + "up/..")  # the root's parent
        _member(tar, "escape/sentinel.txt", b"overwritten")

    report = extract_stream(_archive(build), target)
    assert sentinel.read_text() == "mine"
    assert _files_outside(tmp_path, target) == {sentinel}
    assert not any(p.is_symlink() for p in target.rglob("*"))
    assert sum("a symlink" in r for r in report.refused) == len(steps) + 2


@pytest.mark.parametrize("name, why", [
    ("", "an empty name"),
    ("artifacts/" + "n" * 300, "over-long"),
    ("/".join(["d" * 200] * 21) + "/f", "over-long"),
])
def test_bad_names_are_refused_and_the_rest_arrives(tmp_path: Path, name: str, why: str) -> None:
    target = tmp_path / "target"

    def build(tar: tarfile.TarFile) -> None:
        _member(tar, name, b"bad")
        _member(tar, "after.txt", b"good")

    report = extract_stream(_archive(build), target)
    assert (target / "after.txt").read_bytes() == b"good"
    assert report.written == ["after.txt"]
    assert len(report.refused) == 1 and why in report.refused[0]
    assert _files_outside(tmp_path, target) == set()


def test_members_past_the_cap_are_refused_one_by_one_in_bounded_memory(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """5,000 empty files past a cap of 100 (issue 31 item 6; the real cap is ``MAX_MEMBERS``): the
    first 100 are kept, each one after is refused (no error: the download and the attempt go on),
    listed up to ``MAX_LISTED`` then counted, so what is kept in memory does not grow with the stream."""
    monkeypatch.setattr(safe_tar, "MAX_MEMBERS", 100)
    block = _header("empty.txt", 0)
    feed = _Feed(itertools.chain(itertools.repeat(block, 5_000), [_member_bytes("last.txt", b"x"), b"\0" * 1024]),
                 allowed=5_010 * len(block))
    report = extract_stream(feed, tmp_path / "target")
    assert len(report.written) == 100 and report.members == 5_001
    assert len(report.refused) == MAX_LISTED + 1 and report.unlisted == 5_001 - 100 - MAX_LISTED
    assert all("past the 100-member cap" in line for line in report.refused[:-1])
    assert report.refused[-1].startswith(f"… and {report.unlisted} more refused")
    assert (tmp_path / "target" / "empty.txt").read_bytes() == b"" and not (tmp_path / "target" / "last.txt").exists()
    assert MAX_MEMBERS == 10_000


def _member_bytes(name: str, data: bytes) -> bytes:
    """One file member's header and data blocks."""
    return _header(name, len(data)) + data + b"\0" * (-len(data) % 512)


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK])
def test_a_300_mb_extended_header_is_refused_before_it_is_read(tmp_path: Path, kind: bytes) -> None:
    size = 300 * 1024**2
    feed = _Feed(itertools.chain([_header("././@LongLink", size, kind)], itertools.repeat(b"9" * 65536, size // 65536)),
                 allowed=128 * 1024)
    with pytest.raises(ArchiveRefused, match="extended"):
        extract_stream(feed, tmp_path / "target")
    assert feed.consumed <= 128 * 1024


def test_extended_headers_in_a_row_are_capped(tmp_path: Path) -> None:
    """2,000 small pax headers in a row: tarfile reads each one by recursing (a RecursionError)."""
    pax = tarfile.TarInfo("x")
    pax.type = tarfile.XHDTYPE
    record = b"12 comment=\n"
    pax.size = len(record)
    block = pax.tobuf(format=tarfile.USTAR_FORMAT) + record.ljust(512, b"\0")
    stream = io.BytesIO(block * 2000 + _header("f", 0) + b"\0" * 1024)
    with pytest.raises(ArchiveRefused, match="in a row"):
        extract_stream(stream, tmp_path / "target")


def test_extended_headers_are_capped_in_all(tmp_path: Path) -> None:
    """300 files each carrying a 60 KiB pax header: tarfile keeps every member's headers in memory."""

    def build(tar: tarfile.TarFile) -> None:
        for i in range(300):
            info = tarfile.TarInfo(f"f{i}")
            info.pax_headers = {"comment": "c" * 60_000}
            tar.addfile(info)

    with pytest.raises(ArchiveRefused, match="in all"):
        extract_stream(_archive(build), tmp_path / "target")


@pytest.mark.parametrize("size", [-5, 2**80])
def test_an_impossible_size_stops_the_stream(tmp_path: Path, size: int) -> None:
    """A size tarfile would seek past (2**80: a loop of empty reads that never ends) or back (negative)."""
    feed = _Feed(iter([_header("big.bin", size), b"x" * 4096]), allowed=64 * 1024)
    calls = 0
    read = feed.read

    def counted(n: int = -1) -> bytes:
        nonlocal calls
        calls += 1
        assert calls < 10_000, "the extractor keeps reading a stream that has ended"
        return read(n)

    feed.read = counted  # type: ignore[method-assign]
    with pytest.raises(ArchiveRefused, match="impossible size"):
        extract_stream(feed, tmp_path / "target")


def test_a_stream_cut_inside_a_file_leaves_no_half_written_file(tmp_path: Path) -> None:
    target = tmp_path / "target"
    whole = _archive(lambda tar: _member(tar, "results.json", b"r" * 5000)).getvalue()
    with pytest.raises(ArchiveRefused, match="damaged"):
        extract_stream(io.BytesIO(whole[:512 + 2000]), target)
    assert list(target.iterdir()) == []


def test_an_honest_archive_arrives_unchanged_and_private(tmp_path: Path) -> None:
    target = tmp_path / "target"
    files = {"artifacts/trace.json": b"{}" * 3000, "artifacts/sub dir/ünïcode.txt": "ok ✓".encode(),
             "artifacts/empty": b"", "payload.log": b"line\n" * 100, "artifacts/" + "n" * 255: b"long name"}

    def build(tar: tarfile.TarFile) -> None:
        _member(tar, "artifacts", type=tarfile.DIRTYPE, mode=0o755)
        for name, data in files.items():
            _member(tar, name, data)
        _member(tar, "./dotted/x.txt", b"dot")

    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as gz:
        gz.write(_archive(build).getvalue())
    (target / "artifacts").mkdir(parents=True)
    (target / "artifacts" / "empty").write_bytes(b"old contents are replaced")

    report = extract_stream(io.BytesIO(buffer.getvalue()), target, max_bytes=sum(map(len, files.values())) + 3)
    assert report.refused == []
    assert report.bytes == sum(map(len, files.values())) + 3
    for name, data in files.items():
        assert (target / name).read_bytes() == data
        assert stat.S_IMODE((target / name).stat().st_mode) == 0o600
    assert (target / "dotted" / "x.txt").read_bytes() == b"dot"
    assert stat.S_IMODE((target / "artifacts" / "sub dir").stat().st_mode) == 0o700
    assert not [p for p in target.rglob("*.part")]
