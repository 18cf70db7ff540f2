"""GPU models from the names drivers really report (tests/fixtures/gpu_names, sources in its
README), and NVL/PCIe nodes judged against their own interconnect, not the SXM's NVSwitch mesh."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from benchctl.payload.node.checks import Expect, Facts, judge
from benchctl.payload.node.gpu_models import bf16_peak, gpu_model
from benchctl.payload.node.thresholds import resolve
from tests.conftest import REPO

NAMES = list(csv.DictReader((REPO / "tests" / "fixtures" / "gpu_names" / "names.csv").open()))
PREFLIGHT = REPO / "tests" / "fixtures" / "preflight"


@pytest.mark.parametrize(("name", "model"), [(row["name"], row["model"] or None) for row in NAMES])
def test_real_driver_names_map_to_their_model(name: str, model: str | None) -> None:
    assert gpu_model(name) == model


def test_an_nvl_card_is_not_priced_at_the_sxm_peak() -> None:
    assert bf16_peak("NVIDIA H200 NVL") == pytest.approx(835e12)
    assert bf16_peak("NVIDIA H200") == pytest.approx(989e12)
    assert gpu_model("NVIDIA GH200 480GB") == "GH200", "GH200 contains H200"


def _h200_nvl_node(tmp_path: Path, quads: bool = False) -> Path:
    """The 8×H100 NVL snapshot with H200 NVL cards (141 GB, 600 W); with ``quads`` bridged 4-way."""
    snapshot = tmp_path / "h200-nvl"
    shutil.copytree(PREFLIGHT / "h100-nvl-pairs", snapshot)
    query = snapshot / "nvidia-smi-query.csv"
    query.write_text(query.read_text().replace("NVIDIA H100 NVL", "NVIDIA H200 NVL")
                     .replace("95830 MiB", "143771 MiB").replace("400.00 W", "600.00 W"))
    if quads:
        topo = snapshot / "nvidia-smi-topo-m.txt"
        lines = topo.read_text().split("\n")
        for i in range(8):
            cells = lines[1 + i].split("\t")
            for j in range(8):
                if i != j and i // 4 == j // 4:
                    cells[1 + j] = "NV12"
            lines[1 + i] = "\t".join(cells)
        topo.write_text("\n".join(lines))
    return snapshot


@pytest.mark.parametrize("quads", [False, True])
def test_an_h200_nvl_node_is_judged_as_nvl(tmp_path: Path, quads: bool) -> None:
    checks = {c["name"]: c for c in judge(Facts(_h200_nvl_node(tmp_path, quads)), Expect("H200_NVL", 8), resolve())}
    assert checks["gpu_inventory"]["status"] == "pass", checks["gpu_inventory"]
    assert checks["topology"]["status"] == "pass", checks["topology"]
    assert checks["topology"]["observed"]["class"] == ("nvlink_quads" if quads else "nvlink_pairs")


def test_an_h200_nvl_node_sold_as_h200_sxm_fails(tmp_path: Path) -> None:
    checks = {c["name"]: c for c in judge(Facts(_h200_nvl_node(tmp_path)), Expect("H200", 8), resolve())}
    assert checks["gpu_inventory"]["status"] == "fail" and "H200_NVL" in checks["gpu_inventory"]["hint"]
    assert checks["topology"]["status"] == "fail" and "nvswitch_mesh" in checks["topology"]["hint"]


@pytest.mark.parametrize(("scenario", "gpu"), [("h100-pcie", "H100_PCIE"), ("h100-nvl-pairs", "H100_NVL"),
                                               ("h100-sxm-healthy", "H100_SXM")])
def test_h100_variants_are_judged_against_their_own_interconnect(scenario: str, gpu: str) -> None:
    checks = {c["name"]: c for c in judge(Facts(PREFLIGHT / scenario), Expect(gpu, 8), resolve())}
    assert (checks["gpu_inventory"]["status"], checks["topology"]["status"]) == ("pass", "pass")
