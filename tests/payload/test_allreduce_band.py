"""A node's own all_reduce busbw, one rule for the single-node ``nccl_allreduce`` check and the
cross-node ``intra_node_busbw`` check (issue 27, item 2), judged on published healthy figures:

- 8× H100 SXM: ≈ 370 GB/s with ring all_reduce (NVLink's effective bandwidth), ≈ 480 only with
  NVLink SHARP (NCCL's maintainer, github.com/NVIDIA/nccl-tests/issues/212); measured 365–370
  with NCCL_ALGO=RING and 480 with NVLS at 2–4 GiB (github.com/NVIDIA/nccl/issues/1455);
- 8× H200: 475 GB/s peak with NCCL's default (NVLS) (github.com/NVIDIA/nccl-tests/issues/272);
- 4× H200 SXM at 8 GiB: 337.7 GB/s with NVLink, 26.2 with it off (docs/REFERENCE figures).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from benchctl.payload.node.allreduce_band import Band
from benchctl.payload.node.checks import Expect, Facts, judge, verdict
from benchctl.payload.node.cluster_checks import bad_node_ranks, judge_cluster
from benchctl.payload.node.thresholds import resolve
from tests.conftest import REPO

HEALTHY = REPO / "tests" / "fixtures" / "preflight" / "h100-sxm-healthy"
RING_H100 = 370.0  # nccl-tests issue 212 (NCCL_ALGO=RING), the healthy node without NVLS
RING_H100_MEASURED = 365.0  # nccl issue 1455, the low end of 365–370 measured with ring
NVLS_H100 = 480.0  # nccl-tests issue 212 and nccl issue 1455, with NVLS on 8 GPUs
NVLS_H200 = 475.0  # nccl-tests issue 272


def _snapshot(tmp_path: Path, busbw: float, env: str = "") -> Path:
    snapshot = tmp_path / "facts"
    shutil.copytree(HEALTHY, snapshot)
    (snapshot / "probes.json").write_text(json.dumps({"allreduce": {"bytes": 1 << 30, "busbw_gbps": busbw,
                                                                    "wrong": 0}}))
    if env:
        (snapshot / "env.txt").write_text((snapshot / "env.txt").read_text() + env)
    return snapshot


def _cluster(busbw: float, whole: float = 362.0) -> dict[str, Any]:
    node = {"busbw_gbps": busbw, "algbw_gbps": busbw / 1.75, "wrong": 0, "ranks": 8}
    return {"bytes": 8 << 30, "nodes": 2, "count": 8, "intra_node": [{**node, "node_rank": n} for n in (0, 1)],
            "inter_node": [], "cluster": {"busbw_gbps": whole, "algbw_gbps": whole / 1.875, "wrong": 0, "ranks": 16}}


def _by_name(checks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in checks}


@pytest.mark.parametrize(("busbw", "status"), [(NVLS_H100, "pass"), (RING_H100, "pass"), (RING_H100_MEASURED, "pass"),
                                               (330.0, "warn"), (292.0, "warn"), (200.0, "fail")])
def test_both_checks_judge_a_node_s_figure_alike(tmp_path: Path, busbw: float, status: str) -> None:
    # the cross-node check failed every node under 460 with no margin, the single-node one under 0.8 × 460
    single = _by_name(judge(Facts(_snapshot(tmp_path, busbw)), Expect("H100_SXM", 8), resolve()))["nccl_allreduce"]
    intra = _by_name(judge_cluster(_cluster(busbw), "H100_SXM", 8, resolve(), set()))["intra_node_busbw"]
    assert (single["status"], intra["status"]) == (status, status), (single, intra)
    assert single["expected"] == ">= 365 GB/s (warn below, fail below 292)"
    assert intra["expected"] == single["expected"] + " per node"
    assert bad_node_ranks([intra]) == ([0, 1] if status == "fail" else [])


def test_a_healthy_node_without_nvls_passes_and_the_hint_names_nvls(tmp_path: Path) -> None:
    # NCCL_NVLS_ENABLE=0 (some images; aws-ofi-nccl sets it for NCCL < 2.18.5) was a warning in
    # nccl_env and then failed the node across nodes at its healthy ring figure
    snapshot = _snapshot(tmp_path, RING_H100, env="NCCL_NVLS_ENABLE=0\n")
    checks = _by_name(judge(Facts(snapshot), Expect("H100_SXM", 8), resolve()))
    cross = _by_name(judge_cluster(_cluster(RING_H100), "H100_SXM", 8, resolve(), set()))
    assert checks["nccl_env"]["status"] == "warn" and "NVLink SHARP" in checks["nccl_env"]["hint"]
    for check in (checks["nccl_allreduce"], cross["intra_node_busbw"]):
        assert check["status"] == "pass", check
        assert "NVLink SHARP (NVLS) not in use" in check["hint"] and "NCCL_NVLS_ENABLE=0" in check["hint"]
        assert "≈480 GB/s with it" in check["hint"]
    assert verdict([*checks.values(), *cross.values()]) == "warn"
    with_nvls = _by_name(judge_cluster(_cluster(NVLS_H100), "H100_SXM", 8, resolve(), set()))["intra_node_busbw"]
    assert with_nvls["status"] == "pass" and "NVLS" not in with_nvls["hint"]


def test_warn_and_fail_hints_name_the_ring_and_nvls_figures() -> None:
    checks = _by_name(judge_cluster(_cluster(330.0), "H100_SXM", 8, resolve(), set()))
    hint = checks["intra_node_busbw"]["hint"]
    assert "node 0 (330 GB/s), node 1 (330 GB/s)" in hint and "flagged, not replaced" in hint
    assert "healthy ring figure 365; ≈480 with NVLink SHARP (NVLS)" in hint
    failing = _by_name(judge_cluster(_cluster(200.0), "H100_SXM", 8, resolve(), set()))["intra_node_busbw"]
    assert "below 292, a floor a healthy node never falls under even without NVLS" in failing["hint"]
    assert "the node is replaced" in failing["hint"]


@pytest.mark.parametrize(("gpu", "count", "busbw", "status"), [
    ("H200", 8, NVLS_H200, "pass"), ("H200", 8, RING_H100, "pass"),
    ("H200", 4, 337.7, "pass"), ("H200", 4, 26.2, "fail"),  # 4× H200 SXM, NVLink on / off
])
def test_published_h200_figures(gpu: str, count: int, busbw: float, status: str) -> None:
    band = Band.of(gpu, count, resolve()["allreduce_min_fraction"])
    assert band is not None and band.status(busbw) == status


def test_a_floor_the_campaign_sets_replaces_the_band() -> None:
    th = resolve({"intra_node_busbw_min_gbps": 400})
    check = _by_name(judge_cluster(_cluster(RING_H100), "H100_SXM", 8, th, {"intra_node_busbw_min_gbps"}))[
        "intra_node_busbw"]
    assert check["status"] == "fail" and check["expected"] == ">= 400 GB/s per node"
    assert "below the floor set, 400 GB/s" in check["hint"]
