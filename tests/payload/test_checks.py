"""Preflight checks on captured snapshots of real node kinds (tests/fixtures/preflight, real formats)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchctl.payload.node import node_facts as nf
from benchctl.payload.node.checks import Expect, Facts, judge, verdict
from benchctl.payload.node.thresholds import resolve
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "preflight"


def _judge(scenario: str, gpu: str, count: int, **overrides: float) -> dict[str, dict]:  # type: ignore[type-arg]
    checks = judge(Facts(FIXTURES / scenario), Expect(gpu, count), resolve(overrides))
    return {c["name"]: c for c in checks}


def _statuses(checks: dict[str, dict]) -> dict[str, str]:  # type: ignore[type-arg]
    return {name: c["status"] for name, c in checks.items() if c["status"] not in ("pass", "skip")}


LIVE_ONLY = {"gemm", "hbm", "nccl_allreduce"}  # no probes.json in these snapshots


@pytest.mark.parametrize(("scenario", "gpu", "count", "verdict_", "problems"), [
    ("h100-sxm-healthy", "H100_SXM", 8, "pass", {}),
    ("h100-sxm-numa-split", "H100_SXM", 8, "warn", {"numa": "warn"}),
    ("h100-pcie", "H100_PCIE", 8, "warn", {"numa": "warn"}),
    ("h100-nvl-pairs", "H100_NVL", 8, "fail", {"numa": "warn", "nccl_env": "fail"}),
    ("h100-sxm-nvlink-down", "H100_SXM", 8, "fail", {"nvlink": "fail"}),
    ("h100-sxm-7-of-8", "H100_SXM", 8, "fail", {"gpu_inventory": "fail", "cuda_init": "fail"}),
    ("h100-single", "H100_SXM", 1, "warn", {"shm": "warn"}),
    ("cpu-only", "cpu", 1, "pass", {}),
])
def test_verdicts(scenario: str, gpu: str, count: int, verdict_: str, problems: dict[str, str]) -> None:
    checks = _judge(scenario, gpu, count)
    assert _statuses(checks) == problems
    assert verdict(list(checks.values())) == verdict_
    assert all(checks[name]["status"] == "skip" for name in LIVE_ONLY)
    assert all(c["hint"] for c in checks.values() if c["status"] in ("warn", "fail"))


def test_topology_classes_and_nvlink_widths() -> None:
    expected = {"h100-sxm-healthy": ("nvswitch_mesh", 18), "h100-pcie": ("pcie_only", None),
                "h100-nvl-pairs": ("nvlink_pairs", 12), "h100-sxm-nvlink-down": ("nvswitch_mesh", 16),
                "h100-single": ("single_gpu", None)}
    for scenario, (kind, width) in expected.items():
        topo = nf.parse_topo((FIXTURES / scenario / "nvidia-smi-topo-m.txt").read_text())
        assert (nf.classify_topology(topo), nf.nvlink_width(topo)) == (kind, width), scenario


def test_a_pcie_node_sold_as_sxm_fails() -> None:
    checks = _judge("h100-pcie", "H100_SXM", 8)
    assert checks["gpu_inventory"]["status"] == "fail" and "H100_PCIE" in checks["gpu_inventory"]["hint"]
    assert checks["topology"]["status"] == "fail" and "pcie_only" in checks["topology"]["hint"]


def test_numa_split_hint_carries_the_measured_cost() -> None:
    hint = _judge("h100-sxm-numa-split", "H100_SXM", 8)["numa"]["hint"]
    assert "1,295 ms" in hint and "702 ms" in hint and "[0, 1]" in hint


def test_nvlink_reports_bandwidth_and_the_dead_lanes() -> None:
    nvlink = _judge("h100-sxm-nvlink-down", "H100_SXM", 8)["nvlink"]
    assert nvlink["observed"]["inactive_links"] == {"3": [5, 11]}
    assert nvlink["observed"]["gbps_per_gpu"]["0"] == pytest.approx(18 * 26.562, abs=0.1)


def test_nccl_env_names_the_cost() -> None:
    env = _judge("h100-nvl-pairs", "H100_NVL", 8)["nccl_env"]
    assert env["observed"]["NCCL_SHM_DISABLE"] == "1" and "3.2×" in env["hint"]


def test_cpu_only_node_for_a_gpu_cell() -> None:
    checks = _judge("cpu-only", "H100_SXM", 8)
    assert checks["cuda_init"]["status"] == "fail"  # torch.json: cuda_available false
    assert checks["gpu_inventory"]["status"] == "skip" and "not captured" in checks["gpu_inventory"]["hint"]


def test_thresholds_can_be_overridden() -> None:
    assert _judge("h100-sxm-numa-split", "H100_SXM", 8, cpus_per_gpu_min=32)["cpu"]["status"] == "warn"
    with pytest.raises(ValueError, match="unknown preflight threshold"):
        resolve({"shm_min": 1})


def test_live_measurements_in_a_snapshot_are_judged(tmp_path: Path) -> None:
    import json
    import shutil

    snapshot = tmp_path / "snap"
    shutil.copytree(FIXTURES / "h100-sxm-healthy", snapshot)
    (snapshot / "probes.json").write_text(json.dumps({
        "cuda_init": {"ok_devices": 8}, "gemm_tflops": [700.0] * 7 + [300.0], "hbm_gbps": [2900.0] * 8,
        "allreduce": {"bytes": 1 << 30, "busbw_gbps": 200.0, "wrong": 0}}))
    checks = {c["name"]: c for c in judge(Facts(snapshot), Expect("H100_SXM", 8), resolve())}
    assert checks["gemm"]["status"] == "warn" and "[7]" in checks["gemm"]["hint"]
    assert checks["hbm"]["status"] == "pass"
    allreduce = checks["nccl_allreduce"]
    assert allreduce["status"] == "fail"  # 200 < 0.8 × 365, the healthy ring figure
    assert "nvlink_p2p" in allreduce["hint"] and "NCCL_P2P_DISABLE" in allreduce["hint"]


def test_a_missing_or_garbled_file_never_crashes(tmp_path: Path) -> None:
    for name in ("nvidia-smi-query.csv", "nvidia-smi-topo-m.txt", "nvidia-smi-nvlink-s.txt", "dev-shm.txt",
                 "nproc.txt", "lscpu.txt", "numactl-H.txt", "env.txt", "torch.json", "probes.json", "toolchain.json"):
        (tmp_path / name).write_text("\x00garbage\n,,,\n{not json")
    checks = judge(Facts(tmp_path), Expect("H100_SXM", 8), resolve())
    assert len(checks) == 14 and {c["status"] for c in checks} <= {"pass", "warn", "fail", "skip"}
    empty = judge(Facts(tmp_path / "nothing"), Expect("H100_SXM", 8), resolve())
    assert all(c["status"] == "skip" for c in empty)


def test_remapped_rows_and_the_cgroup_cpu_limit(tmp_path: Path) -> None:
    import shutil

    snapshot = tmp_path / "snap"
    shutil.copytree(FIXTURES / "h100-sxm-healthy", snapshot)
    assert _judge("h100-sxm-healthy", "H100_SXM", 8)["ecc"]["observed"]["remapped_rows_read"] is True
    rows = (snapshot / "nvidia-smi-remapped-rows.csv").read_text().splitlines()
    rows[3] = rows[3].replace(", 0, No, No", ", 1, Yes, No")
    (snapshot / "nvidia-smi-remapped-rows.csv").write_text("\n".join(rows) + "\n")
    (snapshot / "cgroup-cpu.max").write_text("3200000 100000\n")  # 32 CPUs for 8 GPUs
    checks = {c["name"]: c for c in judge(Facts(snapshot), Expect("H100_SXM", 8), resolve())}
    assert checks["ecc"]["status"] == "fail"
    assert list(checks["ecc"]["observed"]["remapped_rows"].values()) == [
        {"uncorrectable": 1, "pending": True, "failure": False}]
    assert checks["cpu"]["status"] == "warn" and checks["cpu"]["observed"]["per_rank"] == 4.0
    single = _judge("h100-single", "H100_SXM", 1)["cpu"]
    assert single["observed"]["cgroup_cpu_limit"] == 16.0 and single["status"] == "pass"


def test_every_rank_s_nccl_log_is_read(tmp_path: Path) -> None:
    import json
    import shutil

    snapshot = tmp_path / "snap"
    shutil.copytree(FIXTURES / "h100-sxm-healthy", snapshot)
    lines = (snapshot / "nccl-debug.log").read_text().splitlines(keepends=True)
    (snapshot / "nccl-debug.log").unlink()
    half = len(lines) // 2  # two ranks, each its own file (NCCL_DEBUG_FILE=nccl-debug.%h.%p.log)
    (snapshot / "nccl-debug.node-a.101.log").write_text("".join(lines[:half]))
    (snapshot / "nccl-debug.node-a.102.log").write_text("".join(lines[half:]))
    probe = {"allreduce": {"bytes": 1 << 30, "busbw_gbps": 470.0, "wrong": 0}}
    (snapshot / "probes.json").write_text(json.dumps(probe))
    log = nf.triage_nccl_log("".join(lines))
    checks = {c["name"]: c for c in judge(Facts(snapshot), Expect("H100_SXM", 8), resolve())}
    assert checks["nccl_allreduce"]["observed"]["log"] == log and log["transports"]


def test_each_preflight_rank_gets_its_own_nccl_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import time

    from benchctl.payload.comm import ranks
    from benchctl.payload.job import Job
    from benchctl.payload.node import preflight

    seen: dict[str, str | None] = {}
    monkeypatch.setattr(ranks, "launch", lambda *a, **k: seen.update(
        {k: os.environ.get(k) for k in ("NCCL_DEBUG", "NCCL_DEBUG_FILE")}))
    job = Job(campaign="t", cell="c", attempt=1, token="t", gpu="H100_SXM", count=8, phases=["preflight"])
    preflight._allreduce(job, tmp_path / "job.json", tmp_path, time.monotonic() + 60, {})
    assert seen == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(tmp_path / "nccl-debug.%h.%p.log")}
    assert "NCCL_DEBUG_FILE" not in os.environ or os.environ["NCCL_DEBUG_FILE"] != seen["NCCL_DEBUG_FILE"]
