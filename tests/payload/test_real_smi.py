"""``nvidia-smi topo -m`` matrices as published (tests/fixtures/preflight/real, sources in its README)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from benchctl.payload.node import node_facts as nf
from benchctl.payload.node.checks import Expect, Facts, check_numa, check_topology

REAL = Path(__file__).parent.parent / "fixtures" / "preflight" / "real"


def _topo(name: str) -> nf.Topology:
    return nf.parse_topo((REAL / name).read_text())


def _facts(tmp_path: Path, name: str) -> Facts:
    shutil.copy(REAL / name, tmp_path / "nvidia-smi-topo-m.txt")
    return Facts(tmp_path)


@pytest.mark.parametrize(("name", "gpus", "kind", "width", "numa"), [
    # space-aligned pastes: the old reader split on tabs only and found 0 GPUs
    ("thunderkittens-167-8xh100-spaces.txt", 8, "nvswitch_mesh", 18, [0, 0, 0, 0, 1, 1, 1, 1]),
    ("club-3090-46-5gpu-spaces.txt", 5, "pcie_only", None, [1, 0, 0, 0, 0]),
    ("dask-cuda-1358-2gpu-nv12-spaces.txt", 2, "nvswitch_mesh", 12, [3, 3]),
    # tab-separated as printed, NICs and an empty cell before "GPU NUMA ID"
    ("go-gpuallocator-17-8x4090-tabs.txt", 8, "pcie_only", None, [0, 0, 0, 0, 1, 1, 1, 1]),
    # tabs lost among the NIC columns ("NIC8NIC9", "NODENODE"): the old reader zipped cells with the
    # header and read CPU affinity as NUMA for GPUs 0-3, missing the split
    ("vllm-13855-dgx-h100-lost-tabs.txt", 8, "nvswitch_mesh", 18, [0, 0, 0, 0, 1, 1, 1, 1]),
])
def test_real_matrices_are_read(name: str, gpus: int, kind: str, width: int | None, numa: list[int]) -> None:
    topo = _topo(name)
    assert topo.problem == ""
    assert (len(topo.gpus), nf.classify_topology(topo), nf.nvlink_width(topo)) == (gpus, kind, width)
    assert [topo.numa[i] for i in range(gpus)] == numa


def test_numa_split_behind_lost_tabs_warns(tmp_path: Path) -> None:
    check = check_numa(_facts(tmp_path, "vllm-13855-dgx-h100-lost-tabs.txt"), Expect("H100_SXM", 8), {})
    assert check["status"] == "warn" and "[0, 1]" in check["hint"]


def test_space_aligned_healthy_mesh_passes_topology(tmp_path: Path) -> None:
    check = check_topology(_facts(tmp_path, "thunderkittens-167-8xh100-spaces.txt"), Expect("H100_SXM", 8), {})
    assert check["status"] == "pass" and check["observed"]["gpus"] == 8


def test_unreadable_matrix_warns_with_the_reason_and_never_fails(tmp_path: Path) -> None:
    # a paste cut after GPU3 of 8: the old reader (0 GPUs, "unknown") failed the node ("replace it")
    facts = _facts(tmp_path, "kubernetes-53497-old-no-numa-spaces.txt")
    topology = check_topology(facts, Expect("H100_SXM", 8), {})
    assert topology["status"] == "warn" and "GPU4, GPU5, GPU6, GPU7" in topology["hint"]
    numa = check_numa(facts, Expect("H100_SXM", 8), {})
    assert numa["status"] == "skip" and "could not be read" in numa["hint"]


def test_garbage_instead_of_a_matrix_warns(tmp_path: Path) -> None:
    (tmp_path / "nvidia-smi-topo-m.txt").write_text("NVIDIA-SMI has failed because it couldn't communicate "
                                                     "with the NVIDIA driver.\n")
    check = check_topology(Facts(tmp_path), Expect("A100_SXM", 8), {})
    assert check["status"] == "warn" and "GPU0" in check["hint"]


def test_pcie_cards_with_an_nvlink_bridge_pass_topology(tmp_path: Path) -> None:
    # two PCIe cards bridged by NV12 (PXB to the NICs, SYS beyond): was "pcie_only" or fail
    check = check_topology(_facts(tmp_path, "dask-cuda-1358-2gpu-nv12-spaces.txt"), Expect("A100_PCIE", 2), {})
    assert check["status"] == "pass", check


def test_pcie_model_with_bridged_pairs_passes_and_sxm_still_wants_a_mesh(tmp_path: Path) -> None:
    pairs = Path(__file__).parent.parent / "fixtures" / "preflight" / "h100-nvl-pairs"
    facts = Facts(pairs)
    assert check_topology(facts, Expect("H100_PCIE", 8), {})["status"] == "pass"
    assert check_topology(facts, Expect("H100_SXM", 8), {})["status"] == "fail"


@pytest.mark.parametrize(("env", "status"), [
    # NCCL docs: NCCL_P2P_LEVEL=LOC "Never use P2P (always disabled)"; the old check let it pass
    ("NCCL_P2P_LEVEL=LOC", "fail"), ("NCCL_P2P_LEVEL=0", "fail"), ("NCCL_P2P_LEVEL=NVL", "pass"),
    ("NCCL_MAX_NCHANNELS=1", "fail"), ("NCCL_MAX_CTAS=2", "fail"), ("NCCL_MAX_NCHANNELS=32", "pass"),
    ("NCCL_NET_GDR_LEVEL=LOC", "warn"), ("NCCL_NET_GDR_LEVEL=PHB", "pass"), ("NCCL_NET=Socket", "warn"),
    ("NCCL_NVLS_ENABLE=0", "warn"), ("NCCL_P2P_DISABLE=0", "pass"), ("NCCL_P2P_DISABLE=1", "fail"),
])
def test_nccl_settings_that_cripple_a_node(tmp_path: Path, env: str, status: str) -> None:
    from benchctl.payload.node.checks import check_nccl_env

    (tmp_path / "env.txt").write_text(f"PATH=/usr/bin\nNCCL_SOCKET_IFNAME=eth0\n{env}\n")
    check = check_nccl_env(Facts(tmp_path), Expect("H100_SXM", 8), {})
    assert check["status"] == status, check
    if status != "pass":
        assert env in check["hint"] and "docs.nvidia.com/deeplearning/nccl" in check["hint"]


def test_hints_cite_published_sources_not_a_file_users_do_not_have() -> None:
    from benchctl.payload.node import checks, thresholds

    for module in (checks, thresholds):
        assert "REFERENCE.md" not in Path(str(module.__file__)).read_text(), module.__name__


def test_a_captured_matrix_with_terminal_escapes_is_read(tmp_path: Path) -> None:
    # nvidia-smi 580 underlines the header with ANSI escapes even when writing to a file
    # ("\x1b[4mGPU0 ... \x1b[0m"): read as is, no GPU0 header was found, topology warned and numa
    # skipped on every node with this driver (seen on the project's H200, 2026-11-25)
    name = "benchctl-device-h200-1gpu-ansi-tabs.txt"
    assert "\x1b[4m" in (REAL / name).read_text()
    topo = _topo(name)
    assert (topo.problem, topo.gpus, nf.classify_topology(topo), topo.numa) == ("", ["GPU0"], "single_gpu", {0: 0})
    facts = _facts(tmp_path, name)
    assert check_topology(facts, Expect("H200", 1), {})["status"] == "pass"
    numa = check_numa(facts, Expect("H200", 1), {})
    assert numa["status"] == "pass" and numa["observed"]["gpu_numa"] == {"0": 0}


def test_a_pasted_matrix_whose_escape_bytes_were_stripped_is_read(tmp_path: Path) -> None:
    # a paste keeps nvidia-smi 580's underline codes without the ESC byte ("[4mGPU0 ... GPU NUMA ID[0m",
    # sgl-project/sglang#26039, 8× B300): the old reader dropped only real escapes, found no GPU0
    # header and warned "could not be read", skipping the NUMA check that this node fails
    name = "sglang-26039-8xb300-escapes-stripped-tabs.txt"
    text = (REAL / name).read_text()
    assert "\t[4mGPU0\t" in text and "\x1b" not in text
    topo = _topo(name)
    assert topo.problem == ""
    assert (len(topo.gpus), nf.classify_topology(topo), nf.nvlink_width(topo)) == (8, "nvswitch_mesh", 18)
    assert [topo.numa[i] for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert check_numa(_facts(tmp_path, name), Expect("H100_SXM", 8), {})["status"] == "warn"
    # shown as cat -v shows it ("^[[4m"), the same
    assert nf.parse_topo(text.replace("[4m", "^[[4m").replace("[0m", "^[[0m")).gpus == topo.gpus
