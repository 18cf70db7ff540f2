"""``benchctl preflight --replay``: the six captured files are enough, and ``--expect`` names a known model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_here

FIXTURES = REPO / "tests" / "fixtures" / "preflight"
SIX = ("nvidia-smi-query.csv", "nvidia-smi-topo-m.txt", "nvidia-smi-nvlink-s.txt", "env.txt", "dev-shm.txt",
       "nproc.txt")


def test_six_files_without_torch_json_give_a_verdict_not_a_driver_fail(home: Path, tmp_path: Path) -> None:
    # The old driver check read the missing torch.json as "torch has no CUDA" and failed a healthy node.
    snapshot = tmp_path / "six"
    snapshot.mkdir()
    for name in SIX:
        shutil.copy(FIXTURES / "h100-sxm-healthy" / name, snapshot / name)
    result = cli_here("preflight", "--replay", str(snapshot), "--expect", "gpu=H100_SXM,count=8", "--format", "json",
                     home=home)
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["driver"]["status"] == "skip" and "torch.json" in checks["driver"]["hint"]
    assert checks["cuda_init"]["status"] == "skip"
    assert report["verdict"] in ("pass", "warn") and result.returncode == 0, result.stdout


@pytest.mark.parametrize("name", ["H100", "h100 sxm5", "A100-80GB", "H100SXM", "CPU1"])
def test_unknown_gpu_name_is_a_usage_error_listing_the_known_ones(home: Path, name: str) -> None:
    # The old CLI accepted any name, then failed a healthy node as "sold as something else; replace it".
    result = cli_here("preflight", "--replay", str(FIXTURES / "h100-sxm-healthy"), "--expect", f"gpu={name},count=8",
                     home=home)
    assert result.returncode == 2, result.stdout
    assert f"unknown GPU model {name!r}" in result.stderr and "H100_SXM, H100_NVL" in result.stderr
    assert "Traceback" not in result.stderr
    if name == "H100":
        assert "H100 is H100_SXM or H100_NVL or H100_PCIE: say which" in result.stderr


@pytest.mark.parametrize("name", ["h100_sxm", "H100-SXM", "h100 sxm"])
def test_case_and_separators_are_forgiven(home: Path, name: str) -> None:
    result = cli_here("preflight", "--replay", str(FIXTURES / "h100-sxm-healthy"), "--expect", f"gpu={name},count=8",
                     "--format", "json", home=home)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["expect"] == {"gpu": "H100_SXM", "count": 8}


def test_a_real_h200_snapshot_replays_to_pass(home: Path) -> None:
    # captured on one H200 (driver 580): its topo header carries terminal escapes, which made topology
    # warn and numa skip; its NCCL log names no IB device although it prints "NET/IB : Using [RO]; OOB …"
    result = cli_here("preflight", "--replay", str(FIXTURES / "h200-single-real"), "--expect", "gpu=H200,count=1",
                     "--format", "json", home=home)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    statuses = {c["name"]: c["status"] for c in report["checks"]}
    # the capture predates the compile_toolchain facts: that check has nothing to judge and skips
    assert statuses == {**{name: "pass" for name in statuses}, "nvlink": "skip", "compile_toolchain": "skip"}, statuses
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["topology"]["observed"] == {"class": "single_gpu", "gpus": 1, "nvlink_width": None}
    assert checks["gemm"]["observed"] == {"TFLOP/s_per_gpu": [788.0]}
    log = checks["nccl_allreduce"]["observed"]["log"]
    assert (log["networks"], log["ib_devices"], log["transports"]) == (["Socket"], None, {})
    assert report["verdict"] == "pass"


# --- models outside the table (issue 29 item 13): judged on what does not depend on the model ---

B300 = FIXTURES / "b300-8-published"
RTX4090 = FIXTURES / "rtx4090-8-pcie-published"


def _replay(home: Path, snapshot: Path, *expect: str) -> tuple[dict, dict]:
    result = cli_here("preflight", "--replay", str(snapshot), *expect, "--format", "json", home=home)
    assert result.returncode in (0, 3) and "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout)
    return report, {c["name"]: c for c in report["checks"]}


def test_a_b300_snapshot_replays_with_its_reported_name_and_is_judged_on_links_and_numa(home: Path) -> None:
    # Was: the B300 was not detected, so the replay judged a "cpu" cell and every GPU check skipped.
    report, checks = _replay(home, B300)
    assert report["expect"] == {"gpu": "NVIDIA B300 SXM6 AC", "count": 8}
    assert checks["gpu_inventory"]["status"] == "pass"
    assert checks["gpu_inventory"]["observed"]["models"] == ["NVIDIA B300 SXM6 AC"]
    assert (checks["topology"]["status"], checks["topology"]["observed"]["class"]) == ("pass", "nvswitch_mesh")
    assert checks["nvlink"]["status"] == "pass"
    assert checks["nvlink"]["observed"]["gbps_per_gpu"] == {str(g): 956.2 for g in range(8)}  # 18 × 53.125
    assert checks["numa"]["status"] == "warn" and "[0, 1]" in checks["numa"]["hint"]
    for name in ("gemm", "hbm", "nccl_allreduce"):  # measured, but no figure to hold it against: not a pass
        assert checks[name]["status"] == "skip", checks[name]
        assert "no reference" in checks[name]["hint"] and "NVIDIA B300 SXM6 AC" in checks[name]["hint"]
    assert checks["nccl_allreduce"]["observed"]["busbw_gbps"] == 641.3
    assert report["verdict"] == "warn"


@pytest.mark.parametrize("gpu", ["B300", "b300 sxm6", "NVIDIA B300 SXM6 AC"])
def test_expect_names_a_model_outside_the_table(home: Path, gpu: str) -> None:
    # Was: exit 2, "unknown GPU model 'B300'".
    report, checks = _replay(home, B300, "--expect", f"gpu={gpu},count=8")
    assert report["expect"] == {"gpu": gpu, "count": 8}
    assert checks["gpu_inventory"]["status"] == "pass", checks["gpu_inventory"]


def test_a_b300_link_down_fails_without_knowing_the_model(home: Path, tmp_path: Path) -> None:
    snapshot = tmp_path / "b300-link-down"
    shutil.copytree(B300, snapshot)
    nvlink = snapshot / "nvidia-smi-nvlink-s.txt"
    lines = nvlink.read_text().splitlines()
    gpu5 = lines.index(next(line for line in lines if line.startswith("GPU 5:")))
    lines[gpu5 + 4] = "\t Link 3: <inactive>"
    nvlink.write_text("\n".join(lines) + "\n")
    report, checks = _replay(home, snapshot, "--expect", "gpu=B300,count=8")
    assert checks["nvlink"]["status"] == "fail" and checks["nvlink"]["observed"]["inactive_links"] == {"5": [3]}
    assert report["verdict"] == "fail"


def test_a_model_outside_the_table_on_another_node_fails_the_inventory(home: Path) -> None:
    _, checks = _replay(home, FIXTURES / "h100-sxm-healthy", "--expect", "gpu=B300,count=8")
    assert checks["gpu_inventory"]["status"] == "fail"
    assert "the node has H100_SXM, not B300" in checks["gpu_inventory"]["hint"]
    _, checks = _replay(home, B300, "--expect", "gpu=B200,count=8")  # and a table model on a B300 node
    assert "the node has NVIDIA B300 SXM6 AC, not B200" in checks["gpu_inventory"]["hint"]


def test_eight_pcie_only_rtx_4090s_warn_on_topology(home: Path) -> None:
    # Was: topology passed ("any" class) for a model without a reference class, PCIe-only paths and all.
    report, checks = _replay(home, RTX4090)
    assert report["expect"] == {"gpu": "NVIDIA GeForce RTX 4090", "count": 8}
    assert checks["topology"]["status"] == "warn" and checks["topology"]["observed"]["class"] == "pcie_only"
    assert "no NVLink between these 8 GPUs" in checks["topology"]["hint"]
    assert checks["nvlink"]["status"] == "skip" and checks["numa"]["status"] == "warn"
    assert {checks[n]["status"] for n in ("gemm", "hbm", "nccl_allreduce")} == {"skip"}
    _, checks = _replay(home, RTX4090, "--expect", "gpu=RTX 4090,count=8")
    assert checks["gpu_inventory"]["status"] == "pass" and checks["topology"]["status"] == "warn"
