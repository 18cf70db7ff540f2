"""Across nodes, without processes: where ranks sit, where they meet, how the cross-node figures
are judged and how a bad node is named."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchctl.payload import runner
from benchctl.payload.comm.group import Layout
from benchctl.payload.comm.ranks import init_method
from benchctl.payload.events import EventLog
from benchctl.payload.job import EXIT_BAD_NODE, Job
from benchctl.payload.node.cluster_checks import bad_node_ranks, falloff_limit, judge_cluster
from benchctl.payload.node.preflight import BadNode
from benchctl.payload.node.thresholds import resolve


def _job(**fields: Any) -> Job:
    return Job(**{"campaign": "t", "cell": "c", "attempt": 1, "token": "t", "gpu": "H100_SXM", "count": 8,
                  "phases": ["preflight"], **fields})


def test_global_ranks_are_node_major_and_rails_take_one_rank_per_node() -> None:
    layout = Layout.of(_job(nodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29500))
    assert layout.world_size == 16
    assert [layout.global_rank(r) for r in range(8)] == list(range(8, 16))
    assert layout.node_groups() == [list(range(8)), list(range(8, 16))]
    assert layout.rail_groups()[0] == [0, 8] and layout.rail_groups()[7] == [7, 15]
    assert len(layout.rail_groups()) == 8
    assert Layout(4, 2).rail_groups() == [[0, 2, 4, 6], [1, 3, 5, 7]]


@pytest.mark.parametrize("fields", [{"nodes": 2, "node_rank": 2}, {"nodes": 0}, {"count": 0}])
def test_a_node_rank_outside_the_cluster_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="is not a cluster"):
        Layout.of(_job(**fields))


def test_one_node_meets_in_a_file_many_at_node_zeros_port(tmp_path: Path) -> None:
    assert init_method(_job(), tmp_path / "rdv") == f"file://{tmp_path / 'rdv'}"
    job = _job(nodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29500)
    assert init_method(job, tmp_path / "rdv") == "tcp://10.0.0.1:29500"
    assert init_method(job, tmp_path / "rdv", incarnation=1) == "tcp://10.0.0.1:29501"  # the nsys profile's ranks
    assert init_method(_job(nodes=2, master_addr="fd00::1", master_port=29500), "x") == "tcp://[fd00::1]:29500"
    with pytest.raises(ValueError, match="master_addr and master_port"):
        init_method(_job(nodes=2), "x")


def _cluster(intra: list[float], cluster: float, rails: tuple[float, ...] = (45.0, 46.0),
             wrong: int = 0) -> dict[str, Any]:
    return {"bytes": 8 * 1024**3, "nodes": len(intra), "count": 8,
            "intra_node": [{"node_rank": n, "busbw_gbps": b, "algbw_gbps": b / 1.75, "wrong": 0, "ranks": 8}
                           for n, b in enumerate(intra)],
            "inter_node": [{"rail": r, "busbw_gbps": b, "algbw_gbps": b, "wrong": wrong, "ranks": len(intra)}
                           for r, b in enumerate(rails)],
            "cluster": {"busbw_gbps": cluster, "algbw_gbps": cluster / 1.875, "wrong": 0, "ranks": 8 * len(intra)}}


def _statuses(checks: list[dict[str, Any]]) -> dict[str, str]:
    return {c["name"]: c["status"] for c in checks}


def test_a_healthy_h100_pair_passes_the_published_figures() -> None:
    checks = judge_cluster(_cluster([470.0, 475.0], 360.0), "H100_SXM", 8, resolve(), set())
    assert _statuses(checks) == {"intra_node_busbw": "pass", "rail_busbw": "pass", "inter_node_busbw": "pass",
                                 "cluster_falloff": "skip"}  # on 2 nodes the pair decides
    assert bad_node_ranks(checks) == []
    by_name = {c["name"]: c for c in checks}
    assert by_name["intra_node_busbw"]["expected"] == ">= 365 GB/s (warn below, fail below 292) per node"
    assert by_name["cluster_falloff"]["observed"]["falloff"] == pytest.approx(1 - 360 / 472.5, abs=1e-4)


def test_a_slow_node_is_named() -> None:
    checks = judge_cluster(_cluster([470.0, 200.0], 190.0), "H100_SXM", 8, resolve(), set())
    by_name = {c["name"]: c for c in checks}
    assert by_name["intra_node_busbw"]["status"] == "fail"
    assert "node 1 (200 GB/s)" in by_name["intra_node_busbw"]["hint"]
    assert bad_node_ranks(checks) == [1]


def test_a_slow_node_pair_names_no_node_and_says_debug_below_200() -> None:
    checks = judge_cluster(_cluster([470.0, 470.0], 150.0), "H100_SXM", 8, resolve(), set())
    by_name = {c["name"]: c for c in checks}
    assert by_name["inter_node_busbw"]["status"] == "fail" and "something to debug" in by_name["inter_node_busbw"][
        "hint"]
    assert "GDRDMA" in by_name["inter_node_busbw"]["hint"]
    assert by_name["cluster_falloff"]["status"] == "skip"  # reported: the failing pair already says it
    assert bad_node_ranks(checks) == []
    between = judge_cluster(_cluster([470.0, 470.0], 300.0), "H100_SXM", 8, resolve(), set())
    assert "below the published node-pair figure" in {c["name"]: c for c in between}["inter_node_busbw"]["hint"]


def test_four_nodes_judge_the_falloff_not_the_pair() -> None:
    th = resolve({"cluster_falloff_max_fraction": 0.3})
    checks = judge_cluster(_cluster([470.0] * 4, 340.0), "H100_SXM", 8, th, {"cluster_falloff_max_fraction"})
    by_name = {c["name"]: c for c in checks}
    assert by_name["inter_node_busbw"]["status"] == "pass" and "2-node" in by_name["inter_node_busbw"]["hint"]
    assert by_name["cluster_falloff"]["status"] == "pass"  # 28 % ≤ 30 %
    strict = resolve({"cluster_falloff_max_fraction": 0.25})
    assert _statuses(judge_cluster(_cluster([470.0] * 4, 340.0), "H100_SXM", 8, strict,
                                   {"cluster_falloff_max_fraction"}))["cluster_falloff"] == "fail"  # 28 % > a set 25 %
    defaults = resolve()  # unset: 4 nodes may fall off as far as the published 320 GB/s (30 %)
    assert _statuses(judge_cluster(_cluster([470.0] * 4, 340.0), "H100_SXM", 8, defaults, set()))[
        "cluster_falloff"] == "pass"
    assert _statuses(judge_cluster(_cluster([470.0] * 4, 300.0), "H100_SXM", 8, defaults, set()))[
        "cluster_falloff"] == "fail"  # 36 % below: past the published 4-node range


@pytest.mark.parametrize(("nodes", "limit"), [(2, 0.2708), (3, 0.3333), (4, 0.3333), (8, 0.4167), (16, 0.5),
                                              (32, 0.5)])
def test_the_default_falloff_widens_to_the_published_figures_of_larger_clusters(nodes: int, limit: float) -> None:
    assert falloff_limit(nodes, 0.25, explicit=False) == pytest.approx(limit, abs=1e-4)
    assert falloff_limit(nodes, 0.1, explicit=True) == 0.1  # the campaign's own figure stands


@pytest.mark.parametrize(("gpu", "count"), [("cpu", 2), ("B200", 8), ("H100_SXM", 4)])
def test_without_a_published_figure_nothing_is_judged_unless_set(gpu: str, count: int) -> None:
    slow = _cluster([1.0, 1.0], 0.5)
    checks = judge_cluster(slow, gpu, count, resolve(), set())
    assert set(_statuses(checks).values()) == {"pass"}
    assert all("not judged" in c["hint"] for c in checks if c["name"] != "rail_busbw")
    explicit = judge_cluster(slow, gpu, count, resolve({"intra_node_busbw_min_gbps": 2}), {"intra_node_busbw_min_gbps"})
    assert _statuses(explicit)["intra_node_busbw"] == "fail" and bad_node_ranks(explicit) == [0, 1]


def test_wrong_values_fail_and_one_rank_per_node_skips_what_it_cannot_measure() -> None:
    assert _statuses(judge_cluster(_cluster([470.0, 470.0], 360.0, wrong=3), "H100_SXM", 8, resolve(), set()))[
        "rail_busbw"] == "fail"
    single = {**_cluster([470.0, 470.0], 40.0), "intra_node": [], "count": 1}
    statuses = _statuses(judge_cluster(single, "H100_SXM", 1, resolve(), set()))
    assert statuses["intra_node_busbw"] == statuses["cluster_falloff"] == "skip"


def test_the_thresholds_are_named_with_their_source() -> None:
    from benchctl.payload.node.thresholds import THRESHOLDS

    assert THRESHOLDS["intra_node_busbw_min_gbps"][0] == 0  # unset: the nccl_allreduce rule
    assert THRESHOLDS["inter_node_busbw_min_gbps"][0] == 350 and "200" in THRESHOLDS["inter_node_busbw_min_gbps"][1]
    assert THRESHOLDS["cluster_falloff_max_fraction"][0] == 0.25
    assert resolve({"inter_node_busbw_min_gbps": 300})["inter_node_busbw_min_gbps"] == 300


@pytest.mark.parametrize(("node_rank", "expected"), [(1, {"bad_node_rank": 1}), (None, {})])
def test_the_error_event_carries_the_named_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                node_rank: int | None, expected: dict[str, int]) -> None:
    def failing(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise BadNode("preflight failed across nodes", node_rank)

    monkeypatch.setattr(runner, "run_preflight", failing)
    with EventLog(tmp_path / "events.jsonl") as log:
        code = runner._run_phases(_job(nodes=2), tmp_path / "job.json", log, ranks=None)  # type: ignore[arg-type]
    assert code == EXIT_BAD_NODE
    found = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in found] == ["phase_start", "error"]
    error = found[-1]
    assert {k: v for k, v in error.items() if k not in ("t", "message")} == {
        "kind": "error", "phase": "preflight", "bad_node": True, **expected}


def test_each_node_starts_its_own_ranks_as_global_ranks_of_one_world(tmp_path: Path) -> None:
    from benchctl.payload.comm.ranks import launch

    job_path = tmp_path / "job.json"
    job_path.write_text(_job(gpu="cpu", count=2, nodes=2, node_rank=1, master_addr="127.0.0.1",
                             master_port=29500).to_json())
    argv = tmp_path / "argv-rank{}.json"
    record = ("import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:] + [os.environ[k] for k in "
              "('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'NODE_RANK')]))")

    def arg(command: list[str], name: str) -> str:
        return command[command.index(name) + 1]

    ports = []
    for _ in range(2):  # a second set of ranks in the same attempt meets at the next port
        launch(job_path, "profile", 2, wrapper=lambda rank: [sys.executable, "-c", record, str(argv).format(rank)])
        commands = [json.loads(Path(str(argv).format(rank)).read_text()) for rank in (2, 3)]
        assert [(arg(c, "--rank"), arg(c, "--local-rank"), arg(c, "--world-size")) for c in commands] == [
            ("2", "0", "4"), ("3", "1", "4")]
        assert [c[-5:] for c in commands] == [["2", "0", "4", "2", "1"], ["3", "1", "4", "2", "1"]]  # torchrun's env
        (meet,) = {arg(c, "--init-method") for c in commands}
        assert meet.startswith("tcp://127.0.0.1:")
        ports.append(int(meet.rsplit(":", 1)[1]))
    assert ports[1] == ports[0] + 1 and ports[0] >= 29500
    assert not (tmp_path / "argv-rank0.json").exists()  # node 1 runs no rank of node 0
