"""Fabric checks on snapshots made of real published outputs (tests/fixtures/fabric), and on copies
of them changed the way a broken node would change them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from benchctl.payload.node import facts_capture
from benchctl.payload.node.checks import Facts, verdict
from benchctl.payload.node.fabric_checks import FabricExpect, compute_ports, fabric_checks, hca_filter
from benchctl.payload.node.fabric_readers import parse_ibstat
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "fabric"
IB = "ibstat-h100-ib-8x400-active.txt"
IB_LOG = "nccl-ib-gdrdma-azure-nd96asr-v4-2node.log"
PEERMEM = "lsmod-grep-nvidia-nccl-1737-peermem.txt"
H100 = FabricExpect.parse("rdma 8x400")  # sold: 8 IB or RoCE ports at 400 Gb/s


def snapshot(tmp_path: Path, edits: dict[str, str] | None = None, **files: str) -> Facts:
    """A snapshot directory: ``files`` maps a snapshot name (``ibstat`` → ``ibstat.txt``) to a fixture
    file (or to text); ``edits`` maps ``old`` → ``new`` text replaced in every copied file."""
    names = {"ibstat": "ibstat.txt", "ibv_devinfo": "ibv_devinfo.txt", "fi_info": "fi_info-efa.txt",
             "ibdev2netdev": "ibdev2netdev.txt",
             "modules": "proc-modules.txt", "log": "nccl-debug.host.1.log", "env": "env.txt"}
    directory = tmp_path / "facts"
    directory.mkdir(parents=True, exist_ok=True)
    for key, fixture in files.items():
        text = fixture if "\n" in fixture else (FIXTURES / fixture).read_text()
        for old, new in (edits or {}).items():
            text = text.replace(old, new)
        (directory / names[key]).write_text(text)
    return Facts(directory)


def by_name(checks: list[dict]) -> dict[str, dict]:  # type: ignore[type-arg]
    return {c["name"]: c for c in checks}


def statuses(checks: list[dict]) -> dict[str, str]:  # type: ignore[type-arg]
    return {c["name"]: c["status"] for c in checks}


RAILS_OF_IB = {"[2]mlx5_2:1/IB [3]mlx5_3:1/IB": "[2]mlx5_8:1/IB [3]mlx5_9:1/IB"}
"""The ibstat and the log come from different published machines: the log's NET/IB list renamed to the
rails of ``IB`` (mlx5_0, 1, 4-9) makes them one node."""


def test_healthy_infiniband_node_passes_every_check(tmp_path: Path) -> None:
    checks = fabric_checks(snapshot(tmp_path, RAILS_OF_IB, ibstat=IB, modules=PEERMEM, log=IB_LOG), {}, H100)
    assert statuses(checks) == {"fabric_hca": "pass", "fabric_gdr": "pass", "fabric_nic_use": "pass",
                                "fabric_roce_gid": "skip", "fabric_pxn": "pass", "fabric_transport": "pass"}
    hca = by_name(checks)["fabric_hca"]["observed"]
    assert hca["link_layer"] == "InfiniBand" and hca["active_at_rate"] == 8 and "mlx5_bond_0:1" not in hca["nics"]
    assert verdict(checks) == "pass"


def test_front_end_ethernet_ports_down_do_not_fail_the_rails(tmp_path: Path) -> None:
    checks = by_name(fabric_checks(snapshot(tmp_path, ibstat="ibstat-h100-ib-8x400-frontend-eth-down.txt"), {}, H100))
    assert checks["fabric_hca"]["status"] == "pass"
    assert checks["fabric_hca"]["observed"]["nics"] == [f"mlx5_{i}:1" for i in (0, 10, 11, 3, 4, 5, 6, 9)]


def test_roce_node_with_two_rails_down_fails_naming_them(tmp_path: Path) -> None:
    check = by_name(fabric_checks(snapshot(tmp_path, ibstat="ibstat-h100-roce-2-down.txt"), {}, H100))["fabric_hca"]
    assert check["status"] == "fail"
    assert "mlx5_11:1 Down/Disabled" in check["hint"] and "mlx5_5:1 Down/Disabled" in check["hint"]
    assert "6 of 8 sold ports LinkUp at rate" in check["hint"] and "mlx5_1:1" not in check["hint"]  # front end left out


def test_a_down_rail_is_named_with_its_netdev(tmp_path: Path) -> None:
    facts = snapshot(tmp_path, ibstat="ibstat-h100-roce-2-down.txt",
                     ibdev2netdev="ibdev2netdev-imbue-h100-column-t-annotated.txt")
    check = by_name(fabric_checks(facts, {}, H100))["fabric_hca"]
    assert "mlx5_5:1 (ibp94s0) Down/Disabled" in check["hint"] and check["observed"]["netdevs"]["mlx5_0:1"] == "ibp26s0"


def test_healthy_roce_node_passes(tmp_path: Path) -> None:
    checks = by_name(fabric_checks(snapshot(tmp_path, ibstat="ibstat-h100-roce-8x400-active.txt"), {}, H100))
    assert checks["fabric_hca"]["status"] == "pass"
    assert checks["fabric_hca"]["observed"]["link_layer"] == "Ethernet (RoCE)"


def test_a100_hdr_node_fails_a_400_offer_and_passes_its_own(tmp_path: Path) -> None:
    facts = snapshot(tmp_path, ibstat="ibstat-a100-ib-8x200-active.txt")
    sold_400 = by_name(fabric_checks(facts, {}, H100))["fabric_hca"]
    assert sold_400["status"] == "fail" and "mlx5_1:1 at 200 Gb/s" in sold_400["hint"]
    assert by_name(fabric_checks(facts, {}, FabricExpect.parse("ib 8x200")))["fabric_hca"]["status"] == "pass"


def test_a_rail_trained_down_to_200_fails(tmp_path: Path) -> None:
    # the node of ibstat-h100-ib-8x400-active with mlx5_6's rate edited (a link that trained at HDR)
    text = (FIXTURES / IB).read_text().replace("Rate: 400\n                Base lid: 1494",
                                               "Rate: 200\n                Base lid: 1494")
    check = by_name(fabric_checks(snapshot(tmp_path, ibstat=text), {}, H100))["fabric_hca"]
    assert check["status"] == "fail" and "mlx5_6:1 at 200 Gb/s" in check["hint"] and "7 of 8" in check["hint"]


def test_sold_infiniband_but_node_is_roce(tmp_path: Path) -> None:
    check = by_name(fabric_checks(snapshot(tmp_path, ibstat="ibstat-h100-roce-8x400-active.txt"), {},
                                  FabricExpect.parse("ib 8x400")))["fabric_hca"]
    assert check["status"] == "fail" and "sold ib" in check["hint"]


def test_ibv_devinfo_stands_in_when_ibstat_is_missing(tmp_path: Path) -> None:
    # two HCAs, port 1 of each Active, port 2 Down: two ports sold, the down ones are spares
    facts = snapshot(tmp_path, ibv_devinfo="ibv_devinfo-mlx4-2hca-2port.txt")
    check = by_name(fabric_checks(facts, {}, FabricExpect.parse("ib 2")))["fabric_hca"]
    assert check["observed"]["source"] == "ibv_devinfo.txt" and check["status"] == "pass"
    assert check["observed"]["not_counted"] == ["mlx4_1:2 Down/?", "mlx4_0:2 Down/?"]
    four = by_name(fabric_checks(facts, {}, FabricExpect.parse("ib 4")))["fabric_hca"]
    assert four["status"] == "fail" and "mlx4_1:2 Down" in four["hint"] and "mlx4_0:2 Down" in four["hint"]


def test_no_tools_on_the_node_is_not_a_failure(tmp_path: Path) -> None:
    checks = fabric_checks(snapshot(tmp_path), {}, H100)
    assert set(statuses(checks).values()) <= {"skip", "pass"}
    assert "not captured" in by_name(checks)["fabric_hca"]["hint"]


def test_socket_fallback_fails_and_says_why(tmp_path: Path) -> None:
    check = by_name(fabric_checks(snapshot(tmp_path, log="nccl-socket-fallback-azure-nd96asr-v4-2node.log"), {},
                                  H100))["fabric_transport"]
    assert check["status"] == "fail"
    assert "NET/Socket on eth0" in check["hint"] and "No device found" in check["hint"]


def test_socket_forced_by_the_job_env_is_named(tmp_path: Path) -> None:
    check = by_name(fabric_checks(snapshot(tmp_path, log="nccl-socket-fallback-azure-nd96asr-v4-2node.log"),
                                  {"NCCL_IB_DISABLE": "1"}, H100))["fabric_transport"]
    assert "NCCL_IB_DISABLE=1 forces sockets" in check["hint"]


def test_ib_log_without_gdrdma_fails_gdr(tmp_path: Path) -> None:
    facts = snapshot(tmp_path, {"/GDRDMA": ""}, ibstat=IB, modules="nvidia 56598528 147 - Live 0x0\n", log=IB_LOG)
    check = by_name(fabric_checks(facts, {}, H100))["fabric_gdr"]
    assert check["status"] == "fail" and "20 of 20 net channels on IB/0, IB/1, IB/4" in check["hint"]
    assert "nvidia-peermem" in check["hint"]


def test_peer_memory_module_alone_passes_and_its_absence_warns(tmp_path: Path) -> None:
    assert by_name(fabric_checks(snapshot(tmp_path, modules=PEERMEM), {}, H100))["fabric_gdr"]["status"] == "pass"
    without = snapshot(tmp_path / "b", modules="nvidia_uvm 1523712 0 - Live 0x0\n")
    assert by_name(fabric_checks(without, {}, H100))["fabric_gdr"]["status"] == "warn"


def test_efa_node_with_gdrdma(tmp_path: Path) -> None:
    facts = snapshot(tmp_path, fi_info="fi_info-efa-p4de-4-devices.txt", log="nccl-ofi-efa-gdrdma-p4d-4node.log")
    checks = by_name(fabric_checks(facts, {}, FabricExpect.parse("efa 4")))
    assert checks["fabric_efa"]["status"] == "pass" and checks["fabric_efa"]["observed"]["count"] == 4
    assert checks["fabric_gdr"]["status"] == "pass" and checks["fabric_transport"]["status"] == "pass"
    # that log's pods had one EFA each: against this node's four devices NCCL found too few
    assert checks["fabric_nic_use"]["status"] == "fail" and "found 1 of 4" in checks["fabric_nic_use"]["hint"]


def test_efa_without_gdr_fails_gdr_with_the_plugin_reason(tmp_path: Path) -> None:
    facts = snapshot(tmp_path, fi_info="fi_info-efa-p4de-4-devices.txt", log="nccl-ofi-efa-no-gdr-g6e-4node.log")
    checks = by_name(fabric_checks(facts, {}, FabricExpect.parse("efa")))
    assert checks["fabric_gdr"]["status"] == "fail" and "disabling GDR" in checks["fabric_gdr"]["hint"]
    assert checks["fabric_nic_use"]["status"] == "pass"  # found 4 nics of 4


def test_efa_devices_in_ibv_devinfo_are_not_taken_for_infiniband(tmp_path: Path) -> None:
    # older rdma-core prints an EFA device's link layer as InfiniBand (rdma-core#884)
    facts = snapshot(tmp_path, ibv_devinfo="ibv_devinfo-rdma-core-884-efa.txt",
                     fi_info="fi_info-efa-p4de-4-devices.txt")
    checks = by_name(fabric_checks(facts, {}, FabricExpect()))  # nothing said: whatever the node shows
    assert "fabric_efa" in checks and "fabric_hca" not in checks
    # without fi_info (not on the PATH) the verbs device list still counts the EFA devices
    alone = by_name(fabric_checks(snapshot(tmp_path / "b", ibv_devinfo="ibv_devinfo-rdma-core-884-efa.txt"), {},
                                  FabricExpect.parse("efa 1")))
    assert alone["fabric_efa"]["status"] == "pass" and alone["fabric_efa"]["observed"]["devices"] == ["efa_0"]
    sold_32 = FabricExpect.parse("efa 32")
    assert by_name(fabric_checks(snapshot(tmp_path / "b"), {}, sold_32))["fabric_efa"]["status"] == "fail"


def test_p5_sold_with_32_efa_devices_fails_on_4(tmp_path: Path) -> None:
    facts = snapshot(tmp_path, fi_info="fi_info-efa-p4de-4-devices.txt")
    check = by_name(fabric_checks(facts, {}, FabricExpect.parse("efa 32")))["fabric_efa"]
    assert check["status"] == "fail" and "4 EFA devices where 32 were sold" in check["hint"]


@pytest.mark.parametrize(("value", "left_out"), [
    ("mlx5_0,mlx5_1,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_9", []),
    ("mlx5", []),  # a prefix matches every mlx5 device
    ("mlx5_0,mlx5_1", ["mlx5_4:1", "mlx5_5:1", "mlx5_6:1", "mlx5_7:1", "mlx5_8:1", "mlx5_9:1"]),
    ("^mlx5_4,mlx5_5", ["mlx5_4:1", "mlx5_5:1"]),
    ("=mlx5_0:1,mlx5_1:1,mlx5_4,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_9:2", ["mlx5_9:1"]),
])
def test_nccl_ib_hca_must_cover_every_rail(tmp_path: Path, value: str, left_out: list[str]) -> None:
    check = by_name(fabric_checks(snapshot(tmp_path, ibstat=IB), {"NCCL_IB_HCA": value}, H100))["fabric_nic_use"]
    assert check["status"] == ("fail" if left_out else "pass")
    if left_out:
        assert f"leaves out {', '.join(left_out)}" in check["hint"]


def test_nccl_list_missing_a_rail_fails(tmp_path: Path) -> None:
    assert by_name(fabric_checks(snapshot(tmp_path, RAILS_OF_IB, ibstat=IB, log=IB_LOG), {}, H100))[
        "fabric_nic_use"]["observed"]["nccl_uses"] == ["mlx5_0:1", "mlx5_1:1", "mlx5_4:1", "mlx5_5:1", "mlx5_6:1",
                                                       "mlx5_7:1", "mlx5_8:1", "mlx5_9:1"]
    facts = snapshot(tmp_path / "b", {**RAILS_OF_IB, " [7]mlx5_7:1/IB": ""}, ibstat=IB, log=IB_LOG)
    check = by_name(fabric_checks(facts, {}, H100))["fabric_nic_use"]
    assert check["status"] == "fail" and "NET/IB list lacks mlx5_7:1:" in check["hint"]


def test_roce_gid_index(tmp_path: Path) -> None:
    roce = "ibstat-h100-roce-8x400-active.txt"
    assert by_name(fabric_checks(snapshot(tmp_path, ibstat=roce), {"NCCL_IB_GID_INDEX": "3"}, H100))[
        "fabric_roce_gid"]["status"] == "pass"
    new = by_name(fabric_checks(snapshot(tmp_path / "new", ibstat=roce, log=IB_LOG), {}, H100))["fabric_roce_gid"]
    assert new["status"] == "pass" and "2.21.5 selects" in new["hint"]
    old = snapshot(tmp_path / "old", {"NCCL version 2.21.5": "NCCL version 2.18.3"}, ibstat=roce, log=IB_LOG)
    check = by_name(fabric_checks(old, {}, H100))["fabric_roce_gid"]
    assert check["status"] == "fail" and "mlx5_0:1" in check["hint"] and "NCCL_IB_GID_INDEX" in check["hint"]
    unknown = by_name(fabric_checks(snapshot(tmp_path / "u", ibstat=roce), {}, H100))["fabric_roce_gid"]
    assert unknown["status"] == "warn"


@pytest.mark.parametrize(("env", "status"), [({}, "pass"), ({"NCCL_P2P_PXN_LEVEL": "0"}, "warn"),
                                             ({"NCCL_PXN_DISABLE": "1"}, "warn"),
                                             ({"NCCL_P2P_PXN_LEVEL": "2"}, "pass")])
def test_pxn(tmp_path: Path, env: dict[str, str], status: str) -> None:
    assert by_name(fabric_checks(snapshot(tmp_path, ibstat=IB), env, H100))["fabric_pxn"]["status"] == status


def test_node_env_counts_and_job_env_wins(tmp_path: Path) -> None:
    facts = snapshot(tmp_path, ibstat=IB, env="NCCL_IB_HCA=mlx5_0\n")
    assert by_name(fabric_checks(facts, {}, H100))["fabric_nic_use"]["status"] == "fail"
    assert by_name(fabric_checks(facts, {"NCCL_IB_HCA": "mlx5"}, H100))["fabric_nic_use"]["status"] == "pass"


def test_hca_filter_and_compute_ports() -> None:
    keep = hca_filter("^=mlx5_1")
    assert keep("mlx5_10", 1) and not keep("mlx5_1", 1)
    assert hca_filter("mlx5_1:1")("mlx5_10", 1) and not hca_filter("mlx5_1:1")("mlx5_1", 2)
    assert compute_ports([]) == []
    ports = parse_ibstat((FIXTURES / "ibstat-h100-roce-2-down.txt").read_text())
    assert sorted(p.ca for p in compute_ports(ports)) == sorted(f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11))


def test_every_failing_check_says_what_to_do(tmp_path: Path) -> None:
    facts = snapshot(tmp_path, {"/GDRDMA": ""}, ibstat="ibstat-h100-roce-2-down.txt",
                     log="nccl-socket-fallback-azure-nd96asr-v4-2node.log")
    checks = fabric_checks(facts, {"NCCL_IB_HCA": "mlx5_0", "NCCL_P2P_PXN_LEVEL": "0"}, H100)
    assert statuses(checks)["fabric_hca"] == "fail" and statuses(checks)["fabric_transport"] == "fail"
    assert all(c["hint"] for c in checks if c["status"] in ("warn", "fail"))


def test_capture_keeps_what_the_tools_print_and_skips_missing_ones(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # a node with ibstat and ibdev2netdev (stand-ins printing the published outputs), without
    # ibv_devinfo and fi_info; its snapshot replays through fabric_checks like any other
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, fixture in (("ibstat", "ibstat-h100-roce-2-down.txt"),
                          ("ibdev2netdev", "ibdev2netdev-imbue-h100-column-t-annotated.txt")):
        (bin_dir / tool).write_text(f"#!/bin/sh\ncat '{FIXTURES / fixture}'\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(facts_capture, "COMMANDS", dict(facts_capture.FABRIC_COMMANDS))
    directory = tmp_path / "facts"
    written = facts_capture.capture(directory, time.monotonic() + 60)
    assert {"ibstat.txt", "ibdev2netdev.txt"} <= set(written)
    assert ("proc-modules.txt" in written) == Path("/proc/modules").is_file()  # absent in some sandboxes
    assert not (directory / "fi_info-efa.txt").exists() and not (directory / "ibv_devinfo.txt").exists()
    assert (directory / "ibstat.txt").read_text() == (FIXTURES / "ibstat-h100-roce-2-down.txt").read_text()
    checks = by_name(fabric_checks(Facts(directory), {}, H100))
    assert checks["fabric_hca"]["status"] == "fail" and "mlx5_5:1 (ibp94s0) Down" in checks["fabric_hca"]["hint"]
    assert checks["fabric_transport"]["status"] == "skip"  # no NCCL log yet


def test_preflight_judges_the_fabric_only_for_a_gpu_job_across_nodes(tmp_path: Path) -> None:
    """``payload.node.preflight`` adds this node's fabric checks to its own (a fabric failure is this node's)
    for a GPU job of several nodes; one node, or CPU "nodes" without a fabric, get none."""
    from benchctl.payload.job import Job
    from benchctl.payload.node.preflight import _fabric

    facts = snapshot(tmp_path, log="nccl-socket-fallback-azure-nd96asr-v4-2node.log")
    job = Job(campaign="c", cell="k", attempt=1, token="t", gpu="H100_SXM", count=8, phases=["preflight"], nodes=2,
              fabric="ib 8x200")
    checks = by_name(_fabric(job, facts.directory))
    assert set(checks) == {"fabric_hca", "fabric_gdr", "fabric_nic_use", "fabric_roce_gid", "fabric_pxn",
                           "fabric_transport"}
    assert checks["fabric_transport"]["status"] == "fail" and "where fabric ib 8x200 was sold" in \
        checks["fabric_transport"]["hint"]
    assert _fabric(Job(**{**job.__dict__, "nodes": 1}), facts.directory) == []
    assert _fabric(Job(**{**job.__dict__, "gpu": "cpu"}), facts.directory) == []


@pytest.mark.parametrize("sold", [None, "none"])
def test_sockets_where_no_rdma_was_sold_label_the_result_and_fail_no_node(tmp_path: Path, sold: str | None) -> None:
    """An 8× H100 SXM cluster whose offer sells no RDMA (or says nothing): NCCL over sockets (the published
    Azure log without its IB devices) is "socket fabric, not comparable", a warning, not a bad node."""
    from benchctl.payload.job import Job
    from benchctl.payload.node.fabric_checks import SOCKET_LABEL
    from benchctl.payload.node.preflight import _fabric

    facts = snapshot(tmp_path, ibstat="ibstat-h100-roce-2-down.txt",
                     log="nccl-socket-fallback-azure-nd96asr-v4-2node.log")
    job = Job(campaign="c", cell="k", attempt=1, token="t", gpu="H100_SXM", count=8, phases=["preflight"], nodes=2,
              fabric=sold)
    checks = by_name(_fabric(job, facts.directory))
    transport = checks["fabric_transport"]
    assert transport["status"] == "warn" and transport["hint"].startswith(SOCKET_LABEL)
    assert transport["observed"]["fabric"] == "socket"
    assert verdict(list(checks.values())) == "warn"  # two rails down were not sold either: reported, not failed


def test_preflight_expects_the_efa_devices_the_offer_sold(tmp_path: Path) -> None:
    """p4de lists 4 EFA devices (the published fi_info): right for an offer of 4, 4 of 32 for a p5's."""
    from benchctl.payload.job import Job
    from benchctl.payload.node.preflight import _fabric

    facts = snapshot(tmp_path, fi_info="fi_info-efa-p4de-4-devices.txt")
    job = Job(campaign="c", cell="k", attempt=1, token="t", gpu="A100_SXM", count=8, phases=["preflight"], nodes=2,
              instance_type="p4de.24xlarge", fabric="efa 4")
    assert by_name(_fabric(job, facts.directory))["fabric_efa"]["status"] == "pass"
    p5 = by_name(_fabric(Job(**{**job.__dict__, "fabric": "efa 32"}), facts.directory))["fabric_efa"]
    assert p5["status"] == "fail" and p5["observed"]["count"] == 4


SPARE = "ibstat-nccl-tests-128-ib-spare-down-excerpt.txt"


def test_a_down_spare_beside_the_sold_ports_is_not_counted_against_the_node(tmp_path: Path) -> None:
    """The published ibstat with one IB port Active at 200 and one Down/Disabled: sold one port, the
    node passes, the down one is reported; pinning NCCL_IB_HCA to the active HCA passes fabric_nic_use."""
    facts = snapshot(tmp_path, ibstat=SPARE)
    checks = by_name(fabric_checks(facts, {"NCCL_IB_HCA": "mlx5_0"}, FabricExpect.parse("ib 1x200")))
    assert checks["fabric_hca"]["status"] == "pass"
    assert checks["fabric_hca"]["observed"]["not_counted"] == ["mlx5_1:1 Down/Disabled"]
    nic_use = checks["fabric_nic_use"]
    assert nic_use["status"] == "pass" and nic_use["observed"]["rails"] == ["mlx5_0:1"]
    two = by_name(fabric_checks(facts, {}, FabricExpect.parse("ib 2x200")))["fabric_hca"]
    assert two["status"] == "fail" and "1 of 2 sold ports" in two["hint"] and "mlx5_1:1 Down/Disabled" in two["hint"]


def _sixteen_by_200() -> str:
    """``ibstat-h100-roce-8x400-active`` as a 16 × 200 Gb/s node (see the fixtures' README): each CX-7
    record copied under a new name (mlx5_12 … mlx5_19), every CX-7 port at 200."""
    text = (FIXTURES / "ibstat-h100-roce-8x400-active.txt").read_text()
    records = ["CA '" + r.rstrip("\n") + "\n" for r in text.split("CA '")[1:]]
    cx7 = [r for r in records if "MT4129" in r]
    copies = [r.replace(r.split("'")[1], f"mlx5_{12 + i}", 1) for i, r in enumerate(cx7)]
    return "".join(records + copies).replace("Rate: 400", "Rate: 200")


def test_sixteen_200g_rails_pass_when_that_was_sold(tmp_path: Path) -> None:
    facts = snapshot(tmp_path, ibstat=_sixteen_by_200())
    sold = FabricExpect.parse("roce 16x200")
    found = by_name(fabric_checks(facts, {}, sold))["fabric_nic_use"]["observed"]["rails"]
    rails = sorted(n.split(":")[0] for n in found)
    pinned = {"NCCL_IB_HCA": ",".join(f"={name}" if i == 0 else name for i, name in enumerate(rails)),
              "NCCL_IB_GID_INDEX": "3"}
    checks = by_name(fabric_checks(facts, pinned, sold))
    assert checks["fabric_hca"]["status"] == "pass" and checks["fabric_hca"]["observed"]["active_at_rate"] == 16
    assert checks["fabric_hca"]["observed"]["rates_gbps"] == [200.0]
    assert checks["fabric_nic_use"]["status"] == "pass"  # pinned to the 16 compute ports, the CX-6 Dx left out
    # the same node judged against 8 × 400 (what the GPU model alone suggested) fails
    assert by_name(fabric_checks(facts, {}, H100))["fabric_hca"]["status"] == "fail"
    # and a node of 8 × 400 does not pass for 16 × 200
    eight = by_name(fabric_checks(snapshot(tmp_path / "b", ibstat="ibstat-h100-roce-8x400-active.txt"), {}, sold))
    assert eight["fabric_hca"]["status"] == "fail" and "8 of 16 sold ports" in eight["fabric_hca"]["hint"]
