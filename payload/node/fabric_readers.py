"""Readers of a node's fabric tools (pure: stdlib only). Each takes a command's output and returns
plain data; none raises on odd input: what cannot be read is left out.

Files (under ``artifacts/facts/``, written by ``payload.node.facts_capture``): ``ibstat.txt``,
``ibv_devinfo.txt`` (``ibv_devinfo -v``), ``ibdev2netdev.txt``, ``fi_info-efa.txt``
(``fi_info -p efa -t FI_EP_RDM``), ``proc-modules.txt`` (``/proc/modules``; ``lsmod`` output reads
the same) and the ranks' ``nccl-debug*.log``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class IbPort:
    """One port of an RDMA device (HCA) as ``ibstat`` or ``ibv_devinfo`` shows it."""

    ca: str  # mlx5_0
    port: int
    state: str  # Active, Down, Init, Armed (ibstat spelling)
    physical: str  # LinkUp, Disabled, Polling ("" when not printed)
    rate_gbps: float | None  # 400 for NDR 4x; None when not printed
    link_layer: str  # InfiniBand or Ethernet ("" when not printed)
    ca_type: str = ""  # MT4129 (ibstat) or the vendor part id 4129 (ibv_devinfo)

    @property
    def name(self) -> str:
        return f"{self.ca}:{self.port}"

    @property
    def active(self) -> bool:
        return self.state == "Active" and self.physical in ("", "LinkUp")


_CA = re.compile(r"^CA '([^']+)'")
_KEY = re.compile(r"^\s*([A-Za-z][A-Za-z _]*?):\s*(.*)$")


def _float(text: str) -> float | None:
    match = re.search(r"\d+(\.\d+)?", text)
    return float(match.group()) if match else None


def parse_ibstat(text: str) -> list[IbPort]:
    """``ibstat``: ``CA 'mlx5_0'`` blocks with ``CA type``, then ``Port N:`` blocks with ``State``,
    ``Physical state``, ``Rate`` (Gb/s) and ``Link layer``. Tabs or spaces; stray lines (``ibwarn``,
    ``ibpanic``) are ignored."""
    ports: list[IbPort] = []
    ca = ca_type = ""
    current: dict[str, str] | None = None

    def close() -> None:
        if current is not None and ca:
            ports.append(IbPort(ca, int(current["port"]), current.get("State", ""),
                                current.get("Physical state", ""), _float(current.get("Rate", "")),
                                current.get("Link layer", ""), ca_type))

    for line in text.splitlines():
        head = _CA.match(line)
        if head:
            close()
            ca, ca_type, current = head.group(1), "", None
            continue
        port = re.match(r"^\s+Port (\d+):\s*$", line)
        if port and ca:
            close()
            current = {"port": port.group(1)}
            continue
        key = _KEY.match(line)
        if not key:
            continue
        name, value = key.group(1).strip(), key.group(2).strip()
        if current is not None and name in ("State", "Physical state", "Rate", "Link layer"):
            current[name] = value
        elif current is None and name == "CA type":
            ca_type = value
    close()
    return ports


_PORT_STATES = {"PORT_ACTIVE": "Active", "PORT_DOWN": "Down", "PORT_INIT": "Init", "PORT_ARMED": "Armed",
                "PORT_ACTIVE_DEFER": "Active"}
_PHYS_STATES = {"LINK_UP": "LinkUp", "DISABLED": "Disabled", "POLLING": "Polling", "SLEEP": "Sleep"}
_WIDTHS = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}


def _devinfo_rate(width: str, speed: str) -> float | None:
    """``active_width: 4X (2)`` × ``active_speed: 100.0 Gbps (128)`` → 400 Gb/s."""
    lanes = _WIDTHS.get(width.split()[0]) if width else None
    per_lane = _float(speed) if speed else None
    return lanes * per_lane if lanes and per_lane else None


def parse_ibv_devinfo(text: str) -> list[IbPort]:
    """``ibv_devinfo`` (or ``-v``): ``hca_id: mlx5_0`` blocks with ``vendor_part_id``, then
    ``port: N`` blocks with ``state: PORT_ACTIVE (4)``, ``phys_state: LINK_UP (5)`` (``-v``),
    ``active_width``/``active_speed`` (``-v``) and ``link_layer``. The rate is width × lane speed
    when both are printed."""
    ports: list[IbPort] = []
    ca = part = ""
    current: dict[str, str] | None = None

    def close() -> None:
        if current is None or not ca:
            return
        state = current.get("state", "").split()
        phys = current.get("phys_state", "").split()
        ports.append(IbPort(ca, int(current["port"]), _PORT_STATES.get(state[0], state[0]) if state else "",
                            _PHYS_STATES.get(phys[0], phys[0]) if phys else "",
                            _devinfo_rate(current.get("active_width", ""), current.get("active_speed", "")),
                            current.get("link_layer", ""), part))

    for line in text.splitlines():
        hca = re.match(r"^\s*hca_id:\s*(\S+)", line)
        if hca:
            close()
            ca, part, current = hca.group(1), "", None
            continue
        port = re.match(r"^\s*port:\s*(\d+)\s*$", line)
        if port and ca:
            close()
            current = {"port": port.group(1)}
            continue
        key = re.match(r"^\s*([a-z_]+):\s*(.*)$", line)
        if not key:
            continue
        if current is not None:
            current.setdefault(key.group(1), key.group(2).strip())
        elif key.group(1) == "vendor_part_id":
            part = key.group(2).strip()
    close()
    return ports


@dataclass(frozen=True)
class NetdevLink:
    device: str  # mlx5_0
    port: int
    netdev: str  # ib0, enp27s0f0np0
    up: bool  # the netdev's state (for IB this is IPoIB, not the RDMA link)


def parse_ibdev2netdev(text: str) -> list[NetdevLink]:
    """``ibdev2netdev``: ``mlx5_0 port 1 ==> ib0 (Up)`` per line; any spacing (``column -t``),
    anything after the state (comments) ignored."""
    out = []
    for line in text.splitlines():
        match = re.match(r"^\s*(\S+)\s+port\s+(\d+)\s+==>\s+(\S+)\s+\((\w+)\)", line)
        if match:
            out.append(NetdevLink(match.group(1), int(match.group(2)), match.group(3),
                                  match.group(4).lower() == "up"))
    return out


@dataclass(frozen=True)
class FiDomain:
    provider: str
    fabric: str
    domain: str
    ep_type: str


def parse_fi_info(text: str) -> list[FiDomain]:
    """``fi_info -p efa [-t FI_EP_RDM]``: ``provider:`` entries with indented ``fabric``, ``domain``,
    ``type``. ``fi_getinfo: -61`` (no provider) reads as none."""
    entries: list[dict[str, str]] = []
    for line in text.splitlines():
        key = re.match(r"^\s*(provider|fabric|domain|type):\s*(\S+)", line)
        if not key:
            continue
        if key.group(1) == "provider":
            entries.append({})
        if entries:
            entries[-1][key.group(1)] = key.group(2)
    return [FiDomain(e.get("provider", ""), e.get("fabric", ""), e.get("domain", ""), e.get("type", ""))
            for e in entries if "provider" in e]


def efa_devices(domains: list[FiDomain]) -> list[str]:
    """The distinct EFA devices (``rdmap16s27``) behind the efa provider's domains."""
    names = {re.sub(r"-(rdm|dgrm)$", "", d.domain) for d in domains if d.provider.split(";")[0] == "efa"}
    return sorted(n for n in names if n)


def parse_modules(text: str) -> set[str]:
    """``/proc/modules`` or ``lsmod``: the first word of each line is a loaded module."""
    names = {line.split()[0] for line in text.splitlines() if line.split()}
    names.discard("Module")  # lsmod's header
    return names


PEER_MEMORY_MODULES = ("nvidia_peermem", "nv_peer_mem", "efa_nv_peermem")
"""Kernel modules that let a NIC DMA into GPU memory (GPUDirect RDMA): NVIDIA's in-driver module,
Mellanox's older out-of-tree one, and AWS EFA's."""


@dataclass
class NcclNet:
    """What ``NCCL_DEBUG=INFO`` logs say about the network between nodes."""

    version: str | None = None
    networks: list[str] = field(default_factory=list)  # "Using network IB" / Socket / Libfabric / AWS Libfabric
    ib_devices: list[tuple[str, int, str]] = field(default_factory=list)  # (mlx5_0, 1, IB|RoCE) from NET/IB : Using
    socket_devices: list[str] = field(default_factory=list)  # eth0 from NET/Socket : Using
    ib_none: bool = False  # "NET/IB : No device found."
    ofi_provider: str | None = None  # efa
    ofi_fabric: str | None = None
    ofi_nics: int | None = None  # "(found 4 nics)"
    net_channels: dict[str, int] = field(default_factory=dict)  # transport -> channel lines ("IB", "Socket", …)
    gdr_channels: int = 0  # net channel lines ending /GDRDMA
    proxied_channels: int = 0  # "NET/IB/0(8)/…": through another GPU's NIC (PXN)
    nics_on_channels: set[str] = field(default_factory=set)  # "IB/0", "Libfabric/0"
    gdr_off: list[str] = field(default_factory=list)  # lines saying GPU Direct RDMA is off / not supported
    dmabuf: bool = False  # "DMA-BUF is available on GPU device"
    nodes: int | None = None  # the largest "nNodes N"
    pxn_rings: set[int] = field(default_factory=set)  # "use ring PXN n GDR m"
    env: dict[str, str] = field(default_factory=dict)  # "NCCL_X set by environment to V"
    gid_indexes: set[int] = field(default_factory=set)  # "GID <n> (" on NET/IB connection lines


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VIA_NET = re.compile(r"via NET/([A-Za-z][\w ]*?)/(\d+)(\(\d+\))?(/GDRDMA)?(/Shared)?\b")


def parse_nccl_net(text: str) -> NcclNet:
    """Read the network facts from NCCL INFO lines wherever they sit in a line (Ray, Slurm and MPI
    prefixes and terminal colour codes are ignored)."""
    net = NcclNet()
    for raw in text.splitlines():
        line = _ANSI.sub("", raw)
        if "NCCL" not in line and "NET/" not in line:
            continue
        _read_line(net, line)
    return net


def _read_line(net: NcclNet, line: str) -> None:
    if net.version is None and (m := re.search(r"NCCL version (\d+\.\d+\.\d+)", line)):
        net.version = m.group(1)
    if (m := re.search(r"Using network (.+?)\s*(\[repeated|$)", line)) and m.group(1) not in net.networks:
        net.networks.append(m.group(1))
    if m := re.search(r"NET/IB ?: Using (.*?)(;|\[RO\]|$)", line):
        for dev in re.finditer(r"\[\d+\]([\w.]+):(\d+)/(\w+)", m.group(1)):
            entry = (dev.group(1), int(dev.group(2)), dev.group(3))
            if entry not in net.ib_devices:
                net.ib_devices.append(entry)
    if "NET/IB : No device found" in line:
        net.ib_none = True
    if m := re.search(r"NET/Socket : Using (.*)", line):
        for dev in re.finditer(r"\[\d+\]([^:\s]+):", m.group(1)):
            if dev.group(1) not in net.socket_devices:
                net.socket_devices.append(dev.group(1))
    if m := re.search(r"NET/OFI Selected [Pp]rovider is (\w+)(?:, fabric is ([\w-]+))?(?: \(found (\d+) nics\))?",
                      line):
        net.ofi_provider, net.ofi_fabric = m.group(1), m.group(2) or net.ofi_fabric
        net.ofi_nics = int(m.group(3)) if m.group(3) else net.ofi_nics
    if m := _VIA_NET.search(line):
        transport = m.group(1)
        net.net_channels[transport] = net.net_channels.get(transport, 0) + 1
        net.nics_on_channels.add(f"{transport}/{m.group(2)}")
        net.gdr_channels += 1 if m.group(4) else 0
        net.proxied_channels += 1 if m.group(3) else 0
    if re.search(r"GPU Direct RDMA Disabled|disabling GDR|GDR not supported", line):
        net.gdr_off.append(line.split("NCCL INFO", 1)[-1].strip()[:160])
    if "DMA-BUF is available" in line:
        net.dmabuf = True
    if m := re.search(r"nNodes (\d+)", line):
        net.nodes = max(net.nodes or 0, int(m.group(1)))
    if m := re.search(r"use ring PXN (\d+)", line):
        net.pxn_rings.add(int(m.group(1)))
    if m := re.search(r"\b(NCCL_[A-Z0-9_]+) set by environment to (\S+?)\.?(\s|$)", line):
        net.env[m.group(1)] = m.group(2)
    if m := re.search(r"\b(NCCL_IB_HCA) set to (\S+)", line):
        net.env.setdefault(m.group(1), m.group(2))
    if m := re.search(r"NET/IB.*\bGID (\d+) \(", line):
        net.gid_indexes.add(int(m.group(1)))
