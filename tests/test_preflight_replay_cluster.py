"""``benchctl preflight --replay`` of one node of a cluster: its ``cluster.json`` adds the checks
the payload made across nodes (fabric and cross-node), and a bad figure fails the verdict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, cli_here

FIXTURES = REPO / "tests" / "fixtures" / "preflight"
CROSS = ["intra_node_busbw", "rail_busbw", "inter_node_busbw", "cluster_falloff"]
FABRIC = ["fabric_hca", "fabric_gdr", "fabric_nic_use", "fabric_roce_gid", "fabric_pxn", "fabric_transport"]


def _figures(busbw: float, ranks: int, **extra: Any) -> dict[str, Any]:
    return {"busbw_gbps": busbw, "algbw_gbps": busbw * ranks / (2 * (ranks - 1)), "wrong": 0, "ranks": ranks, **extra}


def _probe(intra: tuple[float, float] = (472.0, 468.0), whole: float = 362.0) -> dict[str, Any]:
    """What the payload's cluster probe writes for 2 nodes × 8 H100 (8 GiB all_reduce)."""
    return {"bytes": 8 << 30, "nodes": 2, "count": 8,
            "intra_node": [_figures(bw, 8, node_rank=rank) for rank, bw in enumerate(intra)],
            "inter_node": [_figures(45.0, 2, rail=rail) for rail in range(8)],
            "cluster": _figures(whole, 16)}


def _snapshot(tmp_path: Path, cluster: Any, source: str = "h100-sxm-healthy") -> Path:
    snapshot = tmp_path / "facts"
    shutil.copytree(FIXTURES / source, snapshot)
    if cluster is not None:
        (snapshot / "cluster.json").write_text(cluster if isinstance(cluster, str) else json.dumps(cluster))
    return snapshot


def _replay(home: Path, snapshot: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = cli_here("preflight", "--replay", str(snapshot), "--format", "json", *extra, home=home)
    assert result.stderr == "", result.stderr
    return result.returncode, json.loads(result.stdout)


def test_a_healthy_cluster_node_shows_its_fabric_and_cross_node_checks(home: Path, tmp_path: Path) -> None:
    code, report = _replay(home, _snapshot(tmp_path, _probe()))
    checks = {c["name"]: c for c in report["checks"]}
    assert [c["name"] for c in report["checks"]][-10:] == FABRIC + CROSS
    assert {name: checks[name]["status"] for name in CROSS} == {**dict.fromkeys(CROSS, "pass"),
                                                                "cluster_falloff": "skip"}  # 2 nodes: the pair decides
    assert checks["inter_node_busbw"]["expected"] == ">= 350 GB/s (warn below, fail below 280)", \
        "8× H100 SXM: judged on the published figure"
    assert checks["intra_node_busbw"]["observed"]["busbw_gbps"] == {"node0": 472.0, "node1": 468.0}
    assert (code, report["verdict"], report["nodes"]) == (0, "pass", 2)


def test_a_slow_node_in_the_cluster_fails_the_replay_and_is_named(home: Path, tmp_path: Path) -> None:
    code, report = _replay(home, _snapshot(tmp_path, _probe(intra=(470.0, 200.0), whole=250.0)))
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["intra_node_busbw"]["status"] == "fail"
    assert checks["intra_node_busbw"]["observed"]["bad_node_ranks"] == [1]
    assert checks["inter_node_busbw"]["status"] == "fail", "250 GB/s for the pair is below 350"
    assert (code, report["verdict"]) == (3, "fail")


def test_the_table_says_which_checks_failed_and_that_the_node_is_one_of_a_cluster(home: Path,
                                                                                  tmp_path: Path) -> None:
    result = cli_here("preflight", "--replay", str(_snapshot(tmp_path, _probe(whole=150.0))), home=home)
    assert result.returncode == 3
    line = next(row for row in result.stdout.splitlines() if row.startswith("inter_node_busbw"))
    assert "fail" in line and "something to debug" in line
    assert "verdict: fail (8× H100_SXM, a node of 2," in result.stdout


def test_a_snapshot_without_cluster_json_is_judged_as_one_node(home: Path, tmp_path: Path) -> None:
    code, report = _replay(home, _snapshot(tmp_path, None))
    names = {c["name"] for c in report["checks"]}
    assert not names & {*CROSS, *FABRIC} and "nodes" not in report
    assert code == 0


def test_a_real_cpu_cluster_snapshot_reports_its_figures_without_judging_them(home: Path) -> None:
    code, report = _replay(home, FIXTURES / "cpu-cluster-node0")
    checks = {c["name"]: c for c in report["checks"]}
    assert report["expect"] == {"gpu": "cpu", "count": 2}, "ranks per node from cluster.json"
    assert {name: checks[name]["status"] for name in CROSS} == dict.fromkeys(CROSS, "pass")
    assert "not judged" in checks["inter_node_busbw"]["hint"]
    assert not {c["name"] for c in report["checks"]} & set(FABRIC), "CPU nodes have no fabric to judge"
    assert (code, report["nodes"]) == (0, 2)


@pytest.mark.parametrize("cluster", ["{not json", [], {"nodes": 1}, {"nodes": 2, "intra_node": 7},
                                     {"nodes": 2, "intra_node": [{"node_rank": 0}], "cluster": {}}])
def test_a_cluster_json_that_is_no_probe_result_is_one_line_exit_2(home: Path, tmp_path: Path, cluster: Any) -> None:
    result = cli_here("preflight", "--replay", str(_snapshot(tmp_path, cluster)), home=home)
    assert result.returncode == 2, result.stdout
    assert "cluster.json is not a cluster probe result" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
