"""A hostile archive from a rented node writes nothing outside the artifact directory."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from provisioners.safe_tar import extract_stream


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
