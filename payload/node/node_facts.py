"""Parsers of captured command outputs (pure: no torch). Each takes the file's text and returns
plain data; none raises on odd input: what cannot be read is left out.

Files (under ``artifacts/facts/``): nvidia-smi-query.csv, nvidia-smi-topo-m.txt,
nvidia-smi-nvlink-s.txt, dev-shm.txt, nproc.txt, lscpu.txt, numactl-H.txt, env.txt,
nccl-debug.<host>.<pid>.log (one per rank), torch.json.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any

from .fabric_readers import parse_nccl_net


@dataclass(frozen=True)
class GpuRow:
    index: int
    name: str
    driver: str
    memory_mib: int | None
    power_limit_w: float | None
    ecc_uncorrected: int | None
    """None when the GPU reports no count (``[N/A]`` on GeForce and other cards without ECC or with it off,
    ``[Not Supported]``, or any other text): not reported, never 0."""
    ecc_text: str = ""
    """The ECC column as printed."""


def _number(text: str) -> float | None:
    match = re.search(r"-?\d+(\.\d+)?", text)
    return float(match.group()) if match else None


def parse_query_csv(text: str) -> list[GpuRow]:
    """``nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,power.limit,
    ecc.errors.uncorrected.volatile.total,clocks.max.sm --format=csv``."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows:
        return []
    header = [h.split(" [")[0].strip() for h in rows[0]]
    gpus = []
    for raw in rows[1:]:
        if len(raw) != len(header):
            continue
        cell = dict(zip(header, (v.strip() for v in raw), strict=True))
        memory, power, ecc = (_number(cell.get(k, "")) for k in ("memory.total", "power.limit",
                                                                  "ecc.errors.uncorrected.volatile.total"))
        index = _number(cell.get("index", ""))
        if index is None:
            continue
        gpus.append(GpuRow(int(index), cell.get("name", ""), cell.get("driver_version", ""),
                           int(memory) if memory is not None else None, power,
                           int(ecc) if ecc is not None else None,
                           cell.get("ecc.errors.uncorrected.volatile.total", "")))
    return gpus


@dataclass(frozen=True)
class Topology:
    gpus: list[str]
    links: dict[tuple[int, int], str]  # (i, j) -> X | NV# | PIX | PXB | PHB | NODE | SYS
    numa: dict[int, int | None] = field(default_factory=dict)  # GPU index -> NUMA node
    problem: str = ""  # why the matrix could not be read (then ``gpus`` is empty)


_GPU = re.compile(r"GPU\d+")
_LINK = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC")
_TERMINAL_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|(?:\^\[)?\[[0-9;]*m")
"""ANSI control sequences: nvidia-smi 580 underlines the topo header (``\\x1b[4m`` … ``\\x1b[0m``) even
when it writes to a file; a paste often keeps them with the ESC byte gone (``[4mGPU0`` … ``[0m``, as in
sgl-project/sglang#26039) or shown as ``^[``. Without the ESC only colour codes (``[…m``) are dropped:
nothing else in the matrix ends that way."""


def parse_topo(text: str) -> Topology:
    """``nvidia-smi topo -m``, tab-separated as printed or space-aligned as pasted: a header naming
    GPU0..GPUn-1 first (then NICs, then ``CPU Affinity``, ``NUMA Affinity``, ``GPU NUMA ID``), a row
    per GPU, then a legend. Rows are split on any whitespace; the GPU links are the n cells after the
    row name, the NUMA node is read from the right (``GPU NUMA ID`` is last when present), so a lost
    tab among the NIC columns shifts nothing. A matrix that cannot be read gives no GPUs and
    ``problem`` saying why. Terminal escapes (``_TERMINAL_ESCAPE``) are dropped first."""
    lines = [line for line in _TERMINAL_ESCAPE.sub("", text).splitlines() if line.strip()]
    header = next((line for line in lines if line.split()[0] == "GPU0" and len(line.split()) > 1
                   and not _LINK.fullmatch(line.split()[1])), None)
    if header is None:
        return Topology([], {}, problem="no GPU0 column header in the nvidia-smi topo -m output")
    gpus = [cell for cell in header.split() if _GPU.fullmatch(cell)]
    trailing = 2 if "GPU NUMA ID" in header else 0  # "N/A" or a number after "NUMA Affinity"
    has_numa = "NUMA Affinity" in header
    links: dict[tuple[int, int], str] = {}
    numa: dict[int, int | None] = {}
    for line in lines:
        cells = line.split()
        if line is header or not _GPU.fullmatch(cells[0]):
            continue
        row = int(cells[0][3:])
        values = cells[1:1 + len(gpus)]
        if len(values) < len(gpus) or not all(_LINK.fullmatch(v) for v in values):
            return Topology([], {}, problem=f"the row of {cells[0]} does not hold {len(gpus)} links "
                                            f"(X, NV#, PIX, PXB, PHB, NODE or SYS): {line.strip()[:80]!r}")
        for name, value in zip(gpus, values, strict=True):
            links[(row, int(name[3:]))] = value
        affinity = cells[-trailing] if has_numa and trailing else (cells[-1] if has_numa else "")
        numa[row] = int(affinity) if re.fullmatch(r"\d+", affinity) else None
    missing = [name for name in gpus if int(name[3:]) not in numa]
    if missing:
        return Topology([], {}, problem=f"the header names {len(gpus)} GPUs but no row for {', '.join(missing)} "
                                        "(a cut-off paste?)")
    return Topology(gpus, links, numa)


def classify_topology(topo: Topology) -> str:
    """``nvswitch_mesh`` (every pair NV#), ``nvlink_pairs`` (each GPU has exactly one NV peer),
    ``nvlink_quads`` (NVLink-bridged groups of four, as 4-way bridged H200 NVL cards),
    ``partial_nvlink``, ``pcie_only``, ``single_gpu`` or ``unknown``."""
    n = len(topo.gpus)
    if n == 0:
        return "unknown"
    if n == 1:
        return "single_gpu"
    pairs = [(i, j) for (i, j), v in topo.links.items() if i != j]
    nv = {(i, j) for i, j in pairs if topo.links[(i, j)].startswith("NV")}
    if not nv:
        return "pcie_only"
    if len(nv) == len(pairs):
        return "nvswitch_mesh"
    groups = {i: frozenset({i} | {b for a, b in nv if a == i}) for i in range(n)}
    cliques = all(groups[j] == group for group in groups.values() for j in group)
    sizes = {len(group) for group in groups.values()}
    if cliques and sizes == {2}:
        return "nvlink_pairs"
    return "nvlink_quads" if cliques and sizes == {4} else "partial_nvlink"


def nvlink_width(topo: Topology) -> int | None:
    """The smallest NV# link count between NVLink peers (NV18 on a healthy H100 SXM)."""
    widths = [int(v[2:]) for (i, j), v in topo.links.items() if i != j and re.fullmatch(r"NV\d+", v)]
    return min(widths) if widths else None


@dataclass(frozen=True)
class NvLinkGpu:
    index: int
    active_gbps: list[float]
    inactive: list[int]


def parse_nvlink_status(text: str) -> list[NvLinkGpu]:
    """``nvidia-smi nvlink -s``: ``GPU n: …`` then ``Link k: 26.562 GB/s`` or ``Link k: <inactive>``."""
    gpus: list[NvLinkGpu] = []
    current: int | None = None
    active: list[float] = []
    inactive: list[int] = []
    for line in text.splitlines():
        gpu = re.match(r"\s*GPU (\d+):", line)
        if gpu:
            if current is not None:
                gpus.append(NvLinkGpu(current, active, inactive))
            current, active, inactive = int(gpu.group(1)), [], []
            continue
        link = re.match(r"\s*Link (\d+):\s*(.*)", line)
        if link and current is not None:
            if "inactive" in link.group(2).lower():
                inactive.append(int(link.group(1)))
            elif (value := _number(link.group(2))) is not None:
                active.append(value)
    if current is not None:
        gpus.append(NvLinkGpu(current, active, inactive))
    return gpus


@dataclass(frozen=True)
class RemappedRows:
    bus_id: str
    uncorrectable: int
    pending: bool
    failure: bool


def parse_remapped_rows(text: str) -> list[RemappedRows]:
    """``nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.correctable,
    remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv``. A GPU
    that reports none of them (``[N/A]``: no ECC, or a MIG-enabled GPU) is left out: not reported, not 0."""
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    out = []
    for raw in rows[1:]:
        if len(raw) != 5:
            continue
        uncorrectable = _number(raw[2])
        pending, failure = (raw[k].strip().lower() for k in (3, 4))
        if uncorrectable is None and pending not in ("yes", "no") and failure not in ("yes", "no"):
            continue
        out.append(RemappedRows(raw[0].strip(), int(uncorrectable or 0), pending == "yes", failure == "yes"))
    return out


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``max 100000`` or ``800000 100000``) → CPUs allowed, None when unlimited."""
    fields = text.split()
    if len(fields) != 2 or not fields[1].isdigit() or not fields[0].isdigit():
        return None
    return int(fields[0]) / int(fields[1])


def parse_df_kb(text: str) -> int | None:
    """``df -k /dev/shm`` → size in KiB."""
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 2 and fields[1].isdigit():
            return int(fields[1])
    return None


def parse_int(text: str) -> int | None:
    value = text.strip()
    return int(value) if value.isdigit() else None


def parse_lscpu(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            out[key.strip()] = value.strip()
    return out


def parse_numa_nodes(text: str) -> int | None:
    """``numactl -H`` → number of NUMA nodes (``available: 2 nodes (0-1)``)."""
    match = re.search(r"available:\s*(\d+)\s+nodes?", text)
    return int(match.group(1)) if match else None


def parse_env(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        if "=" in line and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", line):
            name, value = line.split("=", 1)
            env[name] = value
    return env


def parse_torch(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


LOCAL_TRANSPORTS = {
    "nvlink_p2p": re.compile(r"via P2P/", re.IGNORECASE),
    "shm": re.compile(r"via SHM", re.IGNORECASE),
}


def triage_nccl_log(text: str) -> dict[str, Any]:
    """What an ``NCCL_DEBUG=INFO`` log says about transports: channel lines per transport
    (``via P2P/…``, ``via SHM``, ``via NET/<name>`` as ``net_<name>``, and ``gdrdma`` for those with
    GPUDirect RDMA), the NCCL version, the networks NCCL said it uses and the IB/RoCE ports it listed
    (None when none: NCCL 2.28 prints ``NET/IB : Using [RO]; OOB eth0…`` and then fails to load IB).
    The network facts are ``payload.node.fabric_readers.parse_nccl_net``'s."""
    net = parse_nccl_net(text)
    found = {name: len(pattern.findall(text)) for name, pattern in LOCAL_TRANSPORTS.items()}
    found |= {f"net_{name.lower()}": count for name, count in net.net_channels.items()}
    found["gdrdma"] = net.gdr_channels
    version = re.search(r"NCCL version ([\d.]+\S*)", text)
    devices = ", ".join(f"{dev}:{port}/{layer}" for dev, port, layer in net.ib_devices)
    return {"transports": {k: v for k, v in found.items() if v}, "version": version.group(1) if version else None,
            "networks": net.networks, "ib_devices": devices or None}
