"""Fabric preflight: is this node's network between nodes what was sold, and will NCCL use it?
Pure functions of a facts snapshot (``payload.node.checks.Facts``), the job's env and ``FabricExpect``.

Entry point: ``fabric_checks(facts, job_env, expected) -> list[Check]`` (call it for ``nodes > 1``).
Checks (``{name, status, observed, expected, hint}`` as in ``payload.node.checks``):
``fabric_hca`` (at least the sold number of compute ports LinkUp at the sold rate; more ports,
storage HCAs or a spare that is down, are not counted against it) or ``fabric_efa`` (EFA devices),
``fabric_gdr`` (GPUDirect RDMA), ``fabric_nic_use`` (NCCL_IB_HCA and NCCL's list cover the sold
ports), ``fabric_roce_gid`` (RoCE GID index), ``fabric_pxn`` (PXN not disabled), ``fabric_transport``
(NCCL did not fall back to TCP sockets). A tool missing on the node makes its check ``skip``.
What was sold (``FabricExpect``) comes from the provider's offer or the cell's ``fabric``, never
from the GPU model: an offer that says nothing (``unknown``) or sells none fails no node.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import fabric_readers as fr
from . import node_facts as nf
from .checks import NCCL_ENV_DOC, NCCL_LOGS, Check, Facts, _result

FABRIC_FILES = ("ibstat.txt", "ibv_devinfo.txt", "ibdev2netdev.txt", "fi_info-efa.txt", "proc-modules.txt")
SOLD_KINDS = ("ib", "roce", "rdma", "efa")
"""Fabrics an offer can sell: InfiniBand, RoCE, either of them (``rdma``), AWS EFA."""
KINDS = (*SOLD_KINDS, "none")
SOCKET_LABEL = "socket fabric, not comparable"
"""What a cross-node result is labelled when NCCL ran over TCP sockets on an offer that sold no RDMA."""


class FabricError(ValueError):
    """A fabric declaration that is not in ``FabricExpect.parse``'s words."""


@dataclass(frozen=True)
class FabricExpect:
    """What the offer sold between nodes, per node (from the provider's offer or the cell's
    ``fabric``; never guessed from the GPU model). ``kind``: one of ``KINDS``, or ``unknown`` (nobody
    said: nothing is expected, nothing fails); ``nics``: compute ports (EFA: devices) sold, None
    when not said; ``rate_gbps``: each port's rate, None when not said; ``gdr``: GPUDirect RDMA
    sold with it."""

    kind: str = "unknown"
    nics: int | None = None
    rate_gbps: float | None = None
    gdr: bool = True

    @classmethod
    def parse(cls, text: str | None) -> FabricExpect:
        """``ib 8x400`` (8 InfiniBand ports at >= 400 Gb/s), ``roce 16x200``, ``rdma 8x400`` (IB or
        RoCE), ``ib 8`` (any rate), ``efa 32`` (EFA devices), ``none`` (no RDMA between nodes); None
        or empty: unknown. FabricError names the forms."""
        words = (text or "").strip().lower().split()
        if not words or words == ["unknown"]:
            return cls()
        kind, rest = words[0], " ".join(words[1:])
        shape = re.fullmatch(r"([1-9][0-9]{0,2})(?:x([0-9]{1,4}(?:\.[0-9]+)?))?", rest) if rest else None
        nics, rate = (shape.group(1), shape.group(2)) if shape else ("", None)
        if kind not in KINDS or (rest and not shape) or (kind == "none" and rest) or (kind == "efa" and rate) \
                or (rate is not None and float(rate) <= 0):
            raise FabricError(f"{text!r} is not a fabric: write ib 8x400, roce 16x200, rdma 8x400 (IB or RoCE), "
                              "efa 32 (EFA devices) or none (no RDMA between nodes)")
        return cls(kind, int(nics) if nics else None, float(rate) if rate else None, gdr=kind != "none")

    @property
    def sold(self) -> bool:
        """An RDMA fabric was sold: its checks can fail the node."""
        return self.kind in SOLD_KINDS

    def __str__(self) -> str:
        if not self.sold:
            return self.kind
        shape = f" {self.nics}" if self.nics else ""
        return f"{self.kind}{shape}{f'x{self.rate_gbps:g}' if self.rate_gbps and shape else ''}"


def hca_filter(value: str) -> Callable[[str, int], bool]:
    """``NCCL_IB_HCA`` as NCCL reads it: comma-separated names with optional ``:port``; ``^`` first
    excludes them; ``=`` makes names exact instead of prefixes (NCCL docs, Environment Variables)."""
    text = value.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    tokens = [(t.split(":")[0], int(t.split(":")[1]) if ":" in t and t.split(":")[1].isdigit() else None)
              for t in text.split(",") if t.strip()]

    def listed(device: str, port: int) -> bool:
        return any((device == name if exact else device.startswith(name)) and (want is None or want == port)
                   for name, want in tokens)

    return lambda device, port: listed(device, port) != exclude


def _ports(facts: Facts) -> tuple[list[fr.IbPort], str | None]:
    for name, reader in (("ibstat.txt", fr.parse_ibstat), ("ibv_devinfo.txt", fr.parse_ibv_devinfo)):
        text = facts.text(name)
        if text is not None:
            return reader(text), name
    return [], None


EFA_PART_IDS = ("61344", "61345", "61346", "61347")
"""EFA's PCI device ids 0xefa0-0xefa3 as ``ibv_devinfo`` prints ``vendor_part_id`` (vendor 0x1d0f)."""


def is_efa_port(port: fr.IbPort) -> bool:
    """An EFA device: its part id, or the names rdma-core gives devices of no IB/RoCE link layer
    (``rdmap…``) and the EFA driver's own (``efa_N``). Older rdma-core prints its link layer as
    InfiniBand (linux-rdma/rdma-core#884), so the link layer alone cannot tell."""
    return port.ca_type in EFA_PART_IDS or port.ca.startswith(("rdmap", "efa_"))


def compute_ports(ports: list[fr.IbPort]) -> list[fr.IbPort]:
    """The NICs meant for GPU traffic, EFA devices left out: the InfiniBand ports when there are any
    (Ethernet ones are then the front end), else (RoCE) the ports of the fastest port's adapter type."""
    ports = [p for p in ports if not is_efa_port(p)]
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    ether = [p for p in ports if p.link_layer in ("Ethernet", "")]
    if ib or not ether:
        return ib
    fastest = max(ether, key=lambda p: p.rate_gbps or 0.0)
    return [p for p in ether if p.ca_type == fastest.ca_type]


def _efa(facts: Facts) -> list[str] | None:
    """The EFA devices per ``fi_info``, else per ibstat/ibv_devinfo; None when neither was captured."""
    text = facts.text("fi_info-efa.txt")
    if text is not None:
        return fr.efa_devices(fr.parse_fi_info(text))
    ports, source = _ports(facts)
    return sorted({p.ca for p in ports if is_efa_port(p)}) if source else None


def _log(facts: Facts) -> fr.NcclNet | None:
    text = facts.texts(NCCL_LOGS)
    return fr.parse_nccl_net(text) if text else None


def _is_efa(facts: Facts, expected: FabricExpect) -> bool:
    return expected.kind == "efa" or (expected.kind not in ("ib", "roce", "rdma") and bool(_efa(facts))
                                      and not compute_ports(_ports(facts)[0]))


def check_efa(facts: Facts, env: Mapping[str, str], expected: FabricExpect) -> Check:
    devices = _efa(facts)
    sold = expected.nics if expected.kind == "efa" else None
    wanted = f">= {sold} EFA devices" if sold else "EFA devices"
    if devices is None:
        return _result("fabric_efa", "skip", None, wanted, "neither fi_info nor ibstat/ibv_devinfo was captured "
                                                          "(not on the node)")
    observed = {"devices": devices, "count": len(devices)}
    if len(devices) < (sold or 1):
        return _result("fabric_efa", "fail", observed, wanted,
                       f"{len(devices)} EFA devices where {sold or 1} were sold: the instance was "
                       "launched without (all) its EFA interfaces or the EFA driver is not loaded; relaunch it "
                       "with every network card as an EFA interface")
    return _result("fabric_efa", "pass", observed, wanted)


def _rails(ports: list[fr.IbPort], expected: FabricExpect) -> list[fr.IbPort]:
    """The compute ports that count for the offer: Active/LinkUp at the sold rate or faster."""
    rate = expected.rate_gbps or 0.0
    return [p for p in compute_ports(ports) if p.active and (p.rate_gbps is None or p.rate_gbps >= rate)]


def check_hca(facts: Facts, env: Mapping[str, str], expected: FabricExpect) -> Check:
    """At least the sold number of compute ports LinkUp at the sold rate; more ports than that (a
    storage HCA, a spare that is down) are reported, never a failure."""
    ports, source = _ports(facts)
    kind = {"rdma": "IB/RoCE", "ib": "InfiniBand", "roce": "RoCE"}.get(expected.kind, expected.kind)
    wanted = (f">= {expected.nics or 1} {kind} ports LinkUp" + (f" at >= {expected.rate_gbps:g} Gb/s"
                                                                 if expected.rate_gbps else "")
              if expected.sold else f"not judged: fabric {expected}")
    if source is None:
        return _result("fabric_hca", "skip", None, wanted, "ibstat and ibv_devinfo were not captured (not on the "
                                                          "node): fabric_transport judges from the NCCL log")
    nics = compute_ports(ports)
    good = _rails(ports, expected)
    layer = "InfiniBand" if any(p.link_layer == "InfiniBand" for p in nics) else "Ethernet (RoCE)"
    netdev = {f"{n.device}:{n.port}": n.netdev for n in fr.parse_ibdev2netdev(facts.text("ibdev2netdev.txt") or "")}
    others = [f"{p.name}{f' ({netdev[p.name]})' if p.name in netdev else ''} "
              + (f"at {p.rate_gbps:g} Gb/s" if p.active else f"{p.state}/{p.physical or '?'}")
              for p in nics if p not in good]
    observed = {"source": source, "link_layer": layer, "nics": [p.name for p in nics], "active_at_rate": len(good),
                "rates_gbps": sorted({p.rate_gbps for p in good if p.rate_gbps is not None}),
                "not_counted": others, "netdevs": {p.name: netdev[p.name] for p in nics if p.name in netdev}}
    if not expected.sold:
        return _result("fabric_hca", "pass", observed, wanted, "the offer names no RDMA fabric (declare the cell's "
                                                                "fabric, e.g. fabric: ib 8x400, to judge it)")
    problems = []
    if not nics:
        problems.append(f"no RDMA NIC on the node ({source} lists none)")
    elif expected.kind in ("ib", "roce") and (expected.kind == "ib") != (layer == "InfiniBand"):
        problems.append(f"sold {expected.kind}, the NICs run {layer}")
    need = expected.nics or 1
    if nics and len(good) < need:
        problems.append(f"{len(good)} of {need} sold ports LinkUp at rate" + (f"; not counted: {', '.join(others)}"
                                                                                   if others else ""))
    if problems:
        return _result("fabric_hca", "fail", observed, wanted,
                       "; ".join(problems) + ": a link down or trained to a lower rate (cable, transceiver, switch "
                       "port) cuts busbw between nodes; replace the node or have the provider fix the link")
    return _result("fabric_hca", "pass", observed, wanted,
                   f"more ports than sold; not counted: {', '.join(others)}" if others else "")


def check_gdr(facts: Facts, env: Mapping[str, str], expected: FabricExpect) -> Check:
    modules_text = facts.text("proc-modules.txt")
    loaded = sorted(set(fr.PEER_MEMORY_MODULES) & fr.parse_modules(modules_text)) if modules_text else None
    log = _log(facts)
    channels = sum(log.net_channels.values()) if log else 0
    observed = {"peer_memory_modules": loaded, "net_channels": channels, "gdrdma_channels": log.gdr_channels if log
                else None, "dmabuf": log.dmabuf if log else None, "gdr_off": (log.gdr_off[:3] if log else [])}
    wanted = "every net channel via …/GDRDMA; a peer-memory module loaded or DMA-BUF"
    if not expected.gdr:
        return _result("fabric_gdr", "pass", observed, "not sold with GPUDirect RDMA")
    if log and channels and set(log.net_channels) == {"Socket"}:
        return _result("fabric_gdr", "skip", observed, wanted, "NCCL moved the traffic between nodes over TCP "
                                                              "sockets: no RDMA to judge (fabric_transport)")
    if log and channels:
        if log.gdr_channels == channels:
            return _result("fabric_gdr", "pass", observed, wanted)
        nics = ", ".join(sorted(log.nics_on_channels))
        status = "fail" if log.gdr_channels == 0 else "warn"
        why = f" (NCCL: {log.gdr_off[0]})" if log.gdr_off else ""
        return _result("fabric_gdr", status, observed, wanted,
                       f"{channels - log.gdr_channels} of {channels} net channels on {nics} move data through host "
                       f"memory, not GPUDirect RDMA{why}: load nvidia-peermem (modprobe nvidia-peermem) or use a "
                       "DMA-BUF capable driver, check NCCL_NET_GDR_LEVEL and PCIe ACS; an instance type without "
                       "GPUDirect RDMA cannot reach the sold busbw")
    if loaded or (log and log.dmabuf):
        return _result("fabric_gdr", "pass", observed, wanted, "no inter-node NCCL channel logged to confirm it")
    if loaded is None:
        return _result("fabric_gdr", "skip", observed, wanted, "neither /proc/modules nor an NCCL log with net "
                                                              "channels was captured")
    return _result("fabric_gdr", "warn", observed, wanted,
                   "no peer-memory module (nvidia_peermem, nv_peer_mem, efa_nv_peermem) is loaded and no NCCL log "
                   "shows DMA-BUF: GPUDirect RDMA is likely off; modprobe nvidia-peermem")


def _merged_env(facts: Facts, env: Mapping[str, str], log: fr.NcclNet | None) -> dict[str, str]:
    node = {k: v for k, v in nf.parse_env(facts.text("env.txt") or "").items() if k.startswith("NCCL_")}
    return {**(log.env if log else {}), **node, **env}


def check_nic_use(facts: Facts, env: Mapping[str, str], expected: FabricExpect) -> Check:
    log = _log(facts)
    settings = _merged_env(facts, env, log)
    if _is_efa(facts, expected):
        devices = _efa(facts)
        if devices is None or log is None or log.ofi_nics is None:
            return _result("fabric_nic_use", "skip", None, "NCCL finds every EFA device",
                           "needs both fi_info-efa.txt and an NCCL log with NET/OFI lines")
        found = {"efa_devices": len(devices), "nccl_found": log.ofi_nics}
        if log.ofi_nics < len(devices):
            return _result("fabric_nic_use", "fail", found, f"{len(devices)} nics",
                           f"aws-ofi-nccl found {log.ofi_nics} of {len(devices)} EFA devices: check FI_PROVIDER, the "
                           "device plugin's vpc.amazonaws.com/efa request and the container's /dev/infiniband")
        return _result("fabric_nic_use", "pass", found, f"{len(devices)} nics")
    ports = _rails(_ports(facts)[0], expected)
    rails = [p.name for p in ports]
    need = min(expected.nics or len(rails), len(rails))  # fabric_hca judges ports that are missing
    wanted = f"NCCL_IB_HCA and NCCL's NET/IB list cover {need} ports LinkUp at rate"
    if not rails:
        return _result("fabric_nic_use", "skip", None, wanted, "no compute port LinkUp at rate was read "
                                                              "(ibstat/ibv_devinfo)")
    problems = []
    if settings.get("NCCL_IB_HCA"):
        keep = hca_filter(settings["NCCL_IB_HCA"])
        kept = [p.name for p in ports if keep(p.ca, p.port)]
        if len(kept) < need:
            left = [n for n in rails if n not in kept]
            problems.append(f"NCCL_IB_HCA={settings['NCCL_IB_HCA']} keeps {len(kept)} of {need}: leaves out "
                            f"{', '.join(left)}")
    used = {f"{d}:{p}" for d, p, _ in log.ib_devices} if log and log.ib_devices else None
    if used is not None and len([n for n in rails if n in used]) < need:
        problems.append(f"NCCL's NET/IB list lacks {', '.join(n for n in rails if n not in used)}")
    observed = {"rails": rails, "sold": need, "NCCL_IB_HCA": settings.get("NCCL_IB_HCA"),
                "nccl_uses": sorted(used or [])}
    if problems:
        return _result("fabric_nic_use", "fail", observed, wanted,
                       "; ".join(problems) + ": those rails carry nothing and busbw drops by their share; unset "
                       f"NCCL_IB_HCA or list the compute NICs ({NCCL_ENV_DOC})")
    return _result("fabric_nic_use", "pass", observed, wanted)


def _version(text: str | None) -> tuple[int, ...] | None:
    parts = tuple(int(p) for p in (text or "").split(".")[:2] if p.isdigit())
    return parts if len(parts) == 2 else None


def check_roce_gid(facts: Facts, env: Mapping[str, str], expected: FabricExpect) -> Check:
    nics = compute_ports(_ports(facts)[0])
    roce = [p.name for p in nics if p.link_layer == "Ethernet"]
    wanted = "a RoCE v2 GID index: NCCL_IB_GID_INDEX set, or NCCL >= 2.21 (selects it itself)"
    if not roce:
        return _result("fabric_roce_gid", "skip", None, wanted, "no RoCE NIC")
    log = _log(facts)
    value = _merged_env(facts, env, log).get("NCCL_IB_GID_INDEX")
    version = (log.version if log else None) or nf.parse_torch(facts.text("torch.json") or "").get("nccl")
    observed = {"roce_nics": roce, "NCCL_IB_GID_INDEX": value, "gid_logged": sorted(log.gid_indexes) if log else [],
                "nccl": version}
    if (value and value.strip() != "-1") or (log and log.gid_indexes):
        return _result("fabric_roce_gid", "pass", observed, wanted)
    parsed = _version(str(version) if version else None)
    if parsed is not None and parsed >= (2, 21):
        return _result("fabric_roce_gid", "pass", observed, wanted, f"NCCL {version} selects the RoCE v2 GID")
    hint = (f"RoCE on {', '.join(roce)} with no NCCL_IB_GID_INDEX and NCCL {version or 'of unknown version'}: "
            "before 2.21 NCCL uses GID 0 (RoCE v1, link-local) and transfers across subnets time out (error 12); "
            "set NCCL_IB_GID_INDEX to the RoCE v2 GID (show_gids, usually 3)")
    return _result("fabric_roce_gid", "fail" if parsed else "warn", observed, wanted, hint)


def check_pxn(facts: Facts, env: Mapping[str, str], expected: FabricExpect) -> Check:
    log = _log(facts)
    settings = _merged_env(facts, env, log)
    level, disabled = settings.get("NCCL_P2P_PXN_LEVEL"), settings.get("NCCL_PXN_DISABLE")
    observed = {"NCCL_P2P_PXN_LEVEL": level, "NCCL_PXN_DISABLE": disabled,
                "rings_with_pxn": sorted(log.pxn_rings) if log else [],
                "proxied_channels": log.proxied_channels if log else None}
    if (level or "").strip() == "0" or (disabled or "").strip() not in ("", "0"):
        return _result("fabric_pxn", "warn", observed, "PXN on (NCCL default)",
                       "PXN is off: a GPU whose nearest NIC is on another rail sends over PCIe and the CPU "
                       "instead of moving the data over NVLink to the GPU next to the NIC; unset NCCL_P2P_PXN_LEVEL "
                       f"and NCCL_PXN_DISABLE ({NCCL_ENV_DOC})")
    return _result("fabric_pxn", "pass", observed, "PXN on (NCCL default)")


def check_transport(facts: Facts, env: Mapping[str, str], expected: FabricExpect) -> Check:
    """NCCL's network between nodes: RDMA passes; TCP sockets fail where RDMA was sold, and are
    ``warn`` with the ``SOCKET_LABEL`` (``observed["fabric"] = "socket"``) where none was."""
    log = _log(facts)
    wanted = "NCCL's network between nodes is RDMA (IB/RoCE or OFI/EFA), not NET/Socket"
    if log is None:
        return _result("fabric_transport", "skip", None, wanted, "no NCCL log in the snapshot")
    socket = "Socket" in log.networks or "Socket" in log.net_channels
    observed = {"networks": log.networks, "net_channels": log.net_channels, "nodes": log.nodes,
                "ib_devices": len(log.ib_devices), "ofi_provider": log.ofi_provider, "nccl": log.version}
    if not socket:
        if log.networks or log.net_channels:
            return _result("fabric_transport", "pass", observed, wanted)
        return _result("fabric_transport", "skip", observed, wanted, "the log shows no network selection")
    settings = _merged_env(facts, env, log)
    reasons = []
    if log.ib_none:
        reasons.append("NCCL found no RDMA device (NET/IB : No device found): the container lacks /dev/infiniband "
                       "or the node has no HCA")
    for name in ("NCCL_IB_DISABLE", "NCCL_NET"):
        if settings.get(name) and settings[name].strip().lower() in ("1", "socket"):
            reasons.append(f"{name}={settings[name]} forces sockets; unset it")
    if _efa(facts) and not log.ofi_provider:
        reasons.append("EFA devices are present but the aws-ofi-nccl plugin was not loaded (no NET/OFI lines): "
                       "put libnccl-net.so on LD_LIBRARY_PATH")
    over = (f"NCCL moves inter-node traffic over TCP sockets (NET/Socket on "
            f"{', '.join(log.socket_devices) or 'an Ethernet interface'}), tens of times below RDMA")
    if not expected.sold:
        return _result("fabric_transport", "warn", {**observed, "fabric": "socket"}, wanted,
                       f"{SOCKET_LABEL}: {over}; the offer sold no RDMA fabric (fabric {expected}), so no node is "
                       "blamed" + (f" ({'; '.join(reasons)})" if reasons else "")
                       + "; declare the cell's fabric (e.g. fabric: ib 8x400) where the provider sells one")
    return _result("fabric_transport", "fail", observed, wanted,
                   f"{over}, where fabric {expected} was sold: "
                   + ("; ".join(reasons) or "check the RDMA devices and NCCL's network plugin"))


def fabric_checks(facts: Facts, job_env: Mapping[str, str], expected: FabricExpect) -> list[Check]:
    """The fabric checks of one node's snapshot, for a job across nodes. ``job_env`` is the env the
    ranks run with (``NCCL_*`` there overrides the node's ``env.txt`` and the log's echo). Where the
    offer sold no RDMA fabric (``expected.sold`` false) nothing fails: what would is a ``warn``."""
    nics = check_efa if _is_efa(facts, expected) else check_hca
    checks = [check(facts, job_env, expected) for check in (nics, check_gdr, check_nic_use, check_roce_gid,
                                                            check_pxn, check_transport)]
    if not expected.sold:
        for check in checks:
            if check["status"] == "fail":
                check.update(status="warn", hint=f"not sold (fabric {expected}), so not failed: {check['hint']}")
    return checks
