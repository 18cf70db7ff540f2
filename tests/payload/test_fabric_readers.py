"""The fabric readers on real published outputs (tests/fixtures/fabric/README.md names each source)."""

from __future__ import annotations

import pytest

from benchctl.payload.node import fabric_readers as fr
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "fabric"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_ibstat_h100_infiniband_eight_rails_and_a_bond() -> None:
    ports = fr.parse_ibstat(_read("ibstat-h100-ib-8x400-active.txt"))
    assert [p.ca for p in ports] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9",
                                     "mlx5_bond_0"]
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    assert len(ib) == 8 and all(p.active and p.rate_gbps == 400.0 and p.ca_type == "MT4129" for p in ib)
    bond = ports[-1]
    assert (bond.name, bond.link_layer, bond.rate_gbps, bond.ca_type) == ("mlx5_bond_0:1", "Ethernet", 200.0, "MT41692")


def test_ibstat_with_tabs_reads_the_down_front_end_ports() -> None:
    ports = {p.ca: p for p in fr.parse_ibstat(_read("ibstat-h100-ib-8x400-frontend-eth-down.txt"))}
    assert len(ports) == 12
    down = sorted(ca for ca, p in ports.items() if not p.active)
    assert down == ["mlx5_2", "mlx5_7", "mlx5_8"]
    assert (ports["mlx5_2"].state, ports["mlx5_2"].physical, ports["mlx5_2"].rate_gbps) == ("Down", "Disabled", 40.0)
    assert (ports["mlx5_1"].rate_gbps, ports["mlx5_1"].link_layer, ports["mlx5_1"].ca_type) == (100.0, "Ethernet",
                                                                                                "MT4125")
    assert sum(p.link_layer == "InfiniBand" and p.active and p.rate_gbps == 400 for p in ports.values()) == 8


def test_ibstat_roce_node_with_two_rails_down() -> None:
    ports = {p.ca: p for p in fr.parse_ibstat(_read("ibstat-h100-roce-2-down.txt"))}
    assert {p.link_layer for p in ports.values()} == {"Ethernet"}
    assert sorted(ca for ca, p in ports.items() if not p.active) == ["mlx5_11", "mlx5_5"]
    assert sorted(ca for ca, p in ports.items() if p.ca_type == "MT4125") == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]


def test_ibstat_a100_hdr() -> None:
    ports = fr.parse_ibstat(_read("ibstat-a100-ib-8x200-active.txt"))
    assert len(ports) == 9 and {p.rate_gbps for p in ports} == {200.0} and all(p.active for p in ports)
    assert [p.ca for p in ports if p.link_layer == "Ethernet"] == ["mlx5_0"]


@pytest.mark.parametrize(("name", "expected"), [
    ("ibv_devinfo-mlx4-2hca-2port.txt", [("mlx4_1:1", "Active", "InfiniBand", "4099"),
                                         ("mlx4_1:2", "Down", "InfiniBand", "4099"),
                                         ("mlx4_0:1", "Active", "InfiniBand", "4099"),
                                         ("mlx4_0:2", "Down", "InfiniBand", "4099")]),
    ("ibv_devinfo-deepep38-h100-roce-excerpt.txt", [("mlx5_2:1", "Active", "Ethernet", "4129")]),
    ("ibv_devinfo-deepep55-ib-excerpt.txt", [("mlx5_3:1", "Active", "InfiniBand", "4126")]),
    ("ibv_devinfo-deepep60-port-down-excerpt.txt", [("mlx5_12:1", "Down", "Ethernet", "4125")]),
    ("ibv_devinfo-rdma-core-884-efa.txt", [("efa_0:1", "Active", "InfiniBand", "61344")]),
])
def test_ibv_devinfo(name: str, expected: list[tuple[str, str, str, str]]) -> None:
    ports = fr.parse_ibv_devinfo(_read(name))
    assert [(p.name, p.state, p.link_layer, p.ca_type) for p in ports] == expected
    assert all(p.rate_gbps is None for p in ports)  # plain ibv_devinfo prints no width or speed


@pytest.mark.parametrize(("width", "rate"), [("2X (16)", 200.0), ("4X (2)", 400.0)])
def test_ibv_devinfo_verbose_rate_is_width_times_lane_speed(width: str, rate: float) -> None:
    # ibv_devinfo -v adds these fields; "2X (16)", "100.0 Gbps (128)" and "LINK_UP (5)" are the shapes a
    # published DGX Spark RoCE write-up shows (only their record is added to a real plain record here)
    text = _read("ibv_devinfo-deepep55-ib-excerpt.txt").replace(
        "link_layer:", f"active_width:\t\t{width}\n\t\t\tactive_speed:\t\t100.0 Gbps (128)\n"
                       "\t\t\tphys_state:\t\tLINK_UP (5)\n\t\t\tlink_layer:")
    port = fr.parse_ibv_devinfo(text)[0]
    assert (port.rate_gbps, port.physical, port.active) == (rate, "LinkUp", True)


def test_ibdev2netdev_column_t_with_comments() -> None:
    links = fr.parse_ibdev2netdev(_read("ibdev2netdev-imbue-h100-column-t-annotated.txt"))
    assert len(links) == 12
    assert [link.device for link in links if link.up] == ["mlx5_1", "mlx5_7"]
    assert links[2] == fr.NetdevLink("mlx5_10", 1, "ibp204s0", False)


def test_ibdev2netdev_one_vf() -> None:
    assert fr.parse_ibdev2netdev(_read("ibdev2netdev-sriov-operator-382-vf-down.txt")) == [
        fr.NetdevLink("mlx5_3", 1, "net1", False)]


def test_fi_info_efa_p4de() -> None:
    domains = fr.parse_fi_info(_read("fi_info-efa-p4de-4-devices.txt"))
    assert len(domains) == 4 and {(d.provider, d.fabric, d.ep_type) for d in domains} == {("efa", "efa", "FI_EP_RDM")}
    assert fr.efa_devices(domains) == ["rdmap144s27", "rdmap160s27", "rdmap16s27", "rdmap32s27"]


def test_fi_info_without_a_provider_is_no_device() -> None:
    assert fr.efa_devices(fr.parse_fi_info("fi_getinfo: -61\n")) == []


def test_modules_from_lsmod_and_proc_modules() -> None:
    assert "nvidia_peermem" in fr.parse_modules(_read("lsmod-grep-nvidia-nccl-1737-peermem.txt"))
    proc = "nvidia_peermem 16384 0 - Live 0x0000000000000000 (OE)\nnvidia 56598528 147 - Live 0x0 (POE)\n"
    assert fr.parse_modules(proc) == {"nvidia_peermem", "nvidia"}
    assert fr.parse_modules("Module                  Size  Used by\n") == set()


def test_nccl_ib_with_gdrdma() -> None:
    net = fr.parse_nccl_net(_read("nccl-ib-gdrdma-azure-nd96asr-v4-2node.log"))
    assert net.version == "2.21.5" and net.networks == ["IB"] and net.nodes == 2
    assert net.ib_devices == [(f"mlx5_{i}", 1, "IB") for i in range(8)]
    assert net.net_channels == {"IB": 20} and net.gdr_channels == 20
    assert net.nics_on_channels == {"IB/0", "IB/1", "IB/4"}
    assert net.dmabuf and not net.ib_none and net.env["NCCL_NET_GDR_LEVEL"] == "SYS"


def test_nccl_socket_fallback_through_colour_codes() -> None:
    net = fr.parse_nccl_net(_read("nccl-socket-fallback-azure-nd96asr-v4-2node.log"))
    assert net.networks == ["Socket"] and net.ib_none and net.socket_devices == ["eth0"]
    assert net.net_channels == {"Socket": 16} and net.gdr_channels == 0 and net.nodes == 2
    assert net.ib_devices == []


def test_nccl_ofi_efa_with_gdrdma() -> None:
    net = fr.parse_nccl_net(_read("nccl-ofi-efa-gdrdma-p4d-4node.log"))
    assert (net.version, net.ofi_provider, net.ofi_fabric, net.ofi_nics) == ("2.27.3", "efa", "efa", 1)
    assert net.networks == ["Libfabric"] and net.nodes == 4
    assert net.net_channels == {"Libfabric": 24} and net.gdr_channels == 24 and net.pxn_rings == {0}


def test_nccl_ofi_efa_without_gdr() -> None:
    net = fr.parse_nccl_net(_read("nccl-ofi-efa-no-gdr-g6e-4node.log"))
    assert (net.ofi_provider, net.ofi_nics, net.nodes) == ("efa", 4, 4)
    assert net.net_channels == {"Libfabric": 24} and net.gdr_channels == 0
    assert any("GDR not supported" in line for line in net.gdr_off)


def test_nccl_pxn_proxy_roce_and_gid_lines() -> None:
    # line shapes published in public NCCL logs (PXN proxy "(8)", RoCE device list, GID echo, the
    # NCCL_DEBUG_SUBSYS=NET connection line with the GID used)
    text = ("h:1:2 [1] NCCL INFO Channel 00/0 : 9[1] -> 0[0] [send] via NET/IB/0(8)/GDRDMA\n"
            "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB ens16f1:10.0.0.1<0>\n"
            "h:1:2 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.\n"
            "h:1:2 [0] NCCL INFO Connected all rings, use ring PXN 1 GDR 1\n"
            "NCCL INFO NET/IB: NCCL Dev 0 IBDev 0 Port 1 qpn 364 mtu 5 GID 3 (0/B9D4E80AFFFF0000) fifoRKey=0x41200 "
            "fifoLKey=0x41200\n")
    net = fr.parse_nccl_net(text)
    assert net.gid_indexes == {3}
    assert net.proxied_channels == 1 and net.gdr_channels == 1 and net.pxn_rings == {1}
    assert net.ib_devices == [("mlx5_0", 1, "RoCE"), ("mlx5_1", 1, "RoCE")]
    assert net.env["NCCL_IB_GID_INDEX"] == "3"


def test_odd_input_gives_nothing() -> None:
    for reader in (fr.parse_ibstat, fr.parse_ibv_devinfo, fr.parse_ibdev2netdev, fr.parse_fi_info):
        assert reader("") == [] and reader("garbage\n\x00 ==> (\n") == []
    assert fr.parse_nccl_net("").networks == []
