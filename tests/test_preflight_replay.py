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


@pytest.mark.parametrize("name", ["H100", "h100 sxm5", "A100-80GB", "B100"])
def test_unknown_gpu_name_is_a_usage_error_listing_the_known_ones(home: Path, name: str) -> None:
    # The old CLI accepted any name, then failed a healthy node as "sold as something else; replace it".
    result = cli_here("preflight", "--replay", str(FIXTURES / "h100-sxm-healthy"), "--expect", f"gpu={name},count=8",
                     home=home)
    assert result.returncode == 2, result.stdout
    assert f"unknown GPU model {name!r}" in result.stderr and "H100_SXM, H100_NVL" in result.stderr
    assert "Traceback" not in result.stderr


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
