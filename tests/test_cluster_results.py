"""What a multi-node cell's result carries: the fabric preflight found on node 0 beside the NVLink
class, and the whole cluster's busbw (not one node's or one rail's sweep)."""

from __future__ import annotations

import shutil
from pathlib import Path

from benchctl.payload.node.checks import Facts
from benchctl.payload.node.fabric_checks import FabricExpect, fabric_checks
from benchctl.results.cell_evidence import fabric_label, largest_allreduce, whole_cluster
from tests.conftest import REPO

FABRIC = REPO / "tests" / "fixtures" / "fabric"


def observed_on(tmp_path: Path, **files: str) -> dict:  # type: ignore[type-arg]
    """The fabric checks' observations on a snapshot made of published outputs (``name=fixture``)."""
    for name, fixture in files.items():
        shutil.copy(FABRIC / fixture, tmp_path / name)
    return {c["name"]: c["observed"] for c in fabric_checks(Facts(tmp_path), {}, FabricExpect())}


def test_an_infiniband_cluster_reads_as_its_rails_rate_gdr_and_the_measured_figure(tmp_path: Path) -> None:
    observed = observed_on(tmp_path, **{"ibstat.txt": "ibstat-h100-ib-8x400-active.txt",
                                        "nccl-debug.h.1.log": "nccl-ib-gdrdma-azure-nd96asr-v4-2node.log"})
    observed["inter_node_busbw"] = {"busbw_gbps": 361.7, "nodes": 2}
    assert fabric_label(observed) == "IB 8×400G GDR, 362 GB/s between nodes"


def test_a_roce_cluster_with_two_rails_down_shows_how_many_are_up(tmp_path: Path) -> None:
    observed = observed_on(tmp_path, **{"ibstat.txt": "ibstat-h100-roce-2-down.txt"})
    label = fabric_label(observed)
    assert label is not None and label.startswith("RoCE 6") and "GDR" not in label


def test_an_efa_cluster_reads_as_its_devices(tmp_path: Path) -> None:
    observed = observed_on(tmp_path, **{"fi_info-efa.txt": "fi_info-efa-p4de-4-devices.txt",
                                        "nccl-debug.h.1.log": "nccl-ofi-efa-gdrdma-p4d-4node.log"})
    assert fabric_label(observed) == "EFA×4 GDR"


def test_a_cluster_over_sockets_that_sold_no_rdma_is_labelled_not_comparable(tmp_path: Path) -> None:
    observed = observed_on(tmp_path, **{"nccl-debug.h.1.log": "nccl-socket-fallback-azure-nd96asr-v4-2node.log"})
    observed["inter_node_busbw"] = {"busbw_gbps": 3.1, "nodes": 2}
    assert fabric_label(observed) == "socket fabric, not comparable, 3 GB/s between nodes"


def test_one_node_has_no_fabric() -> None:
    assert fabric_label({"topology": {"class": "NVSwitch"}}) is None


def test_the_busbw_of_a_cluster_is_the_whole_clusters_sweep() -> None:
    rows = [{"op": "all_reduce", "bytes": 1 << 30, "busbw_gbps": 400.0, "ranks": 16, "scope": "cluster"},
            {"op": "all_reduce", "bytes": 1 << 30, "busbw_gbps": 470.0, "ranks": 8, "scope": "intra_node"},
            {"op": "all_reduce", "bytes": 1 << 30, "busbw_gbps": 48.0, "ranks": 2, "scope": "inter_node"}]
    assert largest_allreduce([r for r in rows if whole_cluster(r)]) == (400.0, 1 << 30)
    assert whole_cluster({"op": "all_reduce"})  # one node's samples have no scope
