"""``nvidia-smi --query-gpu`` CSV as captured on real machines (tests/fixtures/preflight/real_query,
sources in its README): a count the GPU does not report is not reported, never 0 errors."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from benchctl.payload.node import node_facts as nf
from benchctl.payload.node.checks import Expect, Facts, check_ecc
from benchctl.payload.node.thresholds import resolve

REAL = Path(__file__).parent.parent / "fixtures" / "preflight" / "real_query"


def _ecc(tmp_path: Path, name: str, remapped: str | None = None) -> dict:  # type: ignore[type-arg]
    shutil.copy(REAL / name, tmp_path / "nvidia-smi-query.csv")
    if remapped is not None:
        (tmp_path / "nvidia-smi-remapped-rows.csv").write_text(remapped)
    return check_ecc(Facts(tmp_path), Expect("H100_SXM", 1), resolve())


@pytest.mark.parametrize(("name", "model", "memory", "power"), [
    ("geforce-rtx-4080-super-linux-595.71.05.csv", "NVIDIA GeForce RTX 4080 SUPER", 16376, 320.0),
    ("geforce-rtx-2080-super-windows-610.62.csv", "NVIDIA GeForce RTX 2080 SUPER", 8192, 250.0),
])
def test_geforce_ecc_na_is_not_reported_and_the_check_skips(tmp_path: Path, name: str, model: str, memory: int,
                                                              power: float) -> None:
    # the old check passed these GPUs with {"uncorrected": 0}: "[N/A]" read as no errors
    check = _ecc(tmp_path, name)
    assert check["status"] == "skip"
    assert check["observed"] == {"not_reported": {"0": "[N/A]"}}
    assert check["hint"].startswith("ECC not reported")
    (row,) = nf.parse_query_csv((REAL / name).read_text())
    assert (row.index, row.name, row.memory_mib, row.power_limit_w) == (0, model, memory, power)
    assert (row.ecc_uncorrected, row.ecc_text) == (None, "[N/A]")


def test_a_reported_zero_passes(tmp_path: Path) -> None:
    check = _ecc(tmp_path, "h100-80gb-hbm3-linux-590.48.01.csv")
    assert (check["status"], check["observed"]) == ("pass", {"uncorrected": 0, "remapped_rows_read": False})
    (row,) = nf.parse_query_csv((REAL / "h100-80gb-hbm3-linux-590.48.01.csv").read_text())
    assert (row.name, row.ecc_uncorrected, row.ecc_text) == ("NVIDIA H100 80GB HBM3", 0, "0")


def _remapped_rows_answer(name: str) -> str:
    """``--query-remapped-rows`` as the capture's columns give it (derived: README)."""
    rows = list(csv.reader((REAL / name).read_text().splitlines(), skipinitialspace=True))
    header = [h.split(" [")[0] for h in rows[0]]
    fields = ["pci.bus_id", "remapped_rows.correctable", "remapped_rows.uncorrectable", "remapped_rows.pending",
              "remapped_rows.failure"]
    return "\n".join(", ".join(r[header.index(f)] for f in fields) for r in rows) + "\n"


@pytest.mark.parametrize(("name", "read"), [
    ("h100-80gb-hbm3-linux-590.48.01.csv", True),       # 0, 0, No, No: read
    ("h100-80gb-hbm3-mig-linux-590.48.01.csv", False),  # [N/A] × 4 with MIG on: not reported
])
def test_remapped_rows_na_is_not_reported(tmp_path: Path, name: str, read: bool) -> None:
    # the old reader took a row of [N/A] for 0 uncorrectable, not pending, not failed: "read"
    answer = _remapped_rows_answer(name)
    assert len(nf.parse_remapped_rows(answer)) == int(read)
    check = _ecc(tmp_path, name, answer)
    assert (check["status"], check["observed"]["remapped_rows_read"]) == ("pass", read)


def test_rtx4090_snapshot_skips_ecc(tmp_path: Path) -> None:
    # the composed 8× RTX 4090 snapshot (tests/fixtures/preflight/README.md) prints ECC [N/A] on every GPU
    snapshot = Path(__file__).parent.parent / "fixtures" / "preflight" / "rtx4090-8-pcie-published"
    check = check_ecc(Facts(snapshot), Expect("RTX4090", 8), resolve())
    assert check["status"] == "skip" and set(check["observed"]["not_reported"]) == {str(i) for i in range(8)}
