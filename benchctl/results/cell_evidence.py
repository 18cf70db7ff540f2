"""What a cell's stored events say beside its step times: flags, the node's facts, bus bandwidth.

All of it comes from the node that produced the cell's numbers: the last attempt that ran
preflight (for flags and facts) and the last attempt that ran collectives (for busbw).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from benchctl.outcomes import OutcomeKind
from benchctl.payload.node.fabric_checks import SOCKET_LABEL
from benchctl.payload.stats import median
from benchctl.results.check_status import CheckStatus
from benchctl.store import queries as q

FLAG_OF_CHECK = {"numa": "numa_split", "cpu": "few_cpus", "nccl_env": "nccl_env", "shm": "small_shm",
                 "gemm": "slow_gemm", "hbm": "slow_hbm", "nccl_allreduce": "slow_allreduce",
                 "compile_toolchain": "eager_fallback"}


@dataclass(frozen=True)
class NodeFacts:
    interconnect: str | None = None
    vcpus: int | None = None
    numa: str | None = None


def _last_attempt_rows(engine: Engine, cell_id: int, phase: str) -> list[dict[str, Any]]:
    """The ``sample`` events of ``phase`` from the last attempt that recorded any."""
    events = q.events(engine, cell_id, kind="sample", phase=phase)
    if not events:
        return []
    last = events[-1].attempt_id
    return [json.loads(e.data_json) for e in events if e.attempt_id == last]


def cell_flags(engine: Engine, cell_id: int) -> list[str]:
    """Preflight warnings on the node that produced the cell's numbers, nodes replaced after a
    failed preflight (``bad_nodes×N``), and preemptions survived (``preempted×N``)."""
    outcomes: dict[str, int] = {}
    for a in q.attempts(engine, cell_id):
        if a.outcome is not None:
            outcomes[a.outcome] = outcomes.get(a.outcome, 0) + 1
    return flags_from(_last_attempt_rows(engine, cell_id, "preflight"), outcomes)


def flags_from(preflight: list[dict[str, Any]], outcomes: dict[str, int]) -> list[str]:
    """``cell_flags`` of a cell's last preflight samples and its attempts' outcome counts (read in
    bulk for many cells by ``benchctl.store.aggregates.flag_evidence``)."""
    flags = {FLAG_OF_CHECK.get(str(c.get("name")), str(c.get("name")))
             for c in preflight if isinstance(c, dict) and c.get("status") == CheckStatus.WARN}
    for outcome, label in ((OutcomeKind.BAD_NODE, "bad_nodes"), (OutcomeKind.PREEMPTED, "preempted")):
        times = outcomes.get(outcome.value, 0)
        if times:
            flags.add(f"{label}×{times}")
    return sorted(flags)


def node_facts(engine: Engine, cell_id: int) -> NodeFacts:
    """Interconnect class (with the NVLink width), vCPUs and NUMA layout from preflight's checks."""
    observed = {str(c.get("name")): c.get("observed") for c in _last_attempt_rows(engine, cell_id, "preflight")}
    topo, cpu, numa = (_mapping(observed.get(n)) for n in ("topology", "cpu", "numa"))
    interconnect = topo.get("class")
    if interconnect and topo.get("nvlink_width"):
        interconnect = f"{interconnect} NV{topo['nvlink_width']}"
    fabric = fabric_label(observed)
    if fabric:
        interconnect = f"{interconnect} + {fabric}" if interconnect else fabric
    return NodeFacts(interconnect=interconnect, vcpus=cpu.get("vcpus"), numa=numa_layout(numa))


def fabric_label(observed: dict[str, Any]) -> str | None:
    """The fabric between nodes as preflight found it on node 0, from its fabric and cross-node
    checks' observations: ``IB 8×400G GDR, 362 GB/s between nodes`` (EFA: ``EFA×32``); NCCL over
    TCP sockets on an offer that sold no RDMA: ``socket fabric, not comparable``. None on one node
    (no such checks)."""
    hca, efa, gdr = (_mapping(observed.get(n)) for n in ("fabric_hca", "fabric_efa", "fabric_gdr"))
    parts = []
    if _mapping(observed.get("fabric_transport")).get("fabric") == "socket":
        parts.append(SOCKET_LABEL)
    elif efa.get("count"):
        parts.append(f"EFA×{efa['count']}")
    elif hca.get("nics"):
        layer = "IB" if hca.get("link_layer") == "InfiniBand" else "RoCE"
        rates = hca.get("rates_gbps") or []
        parts.append(f"{layer} {hca.get('active_at_rate', 0)}×{rates[0]:.0f}G" if len(rates) == 1
                     else f"{layer} {hca.get('active_at_rate', 0)} of {len(hca['nics'])} NICs")
    if parts and gdr.get("gdrdma_channels"):
        parts[-1] += " GDR"
    busbw = _mapping(observed.get("inter_node_busbw")).get("busbw_gbps")
    if isinstance(busbw, (int, float)):
        parts.append(f"{busbw:.0f} GB/s between nodes")
    return ", ".join(parts) or None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def numa_layout(observed: dict[str, Any]) -> str | None:
    """``2 nodes, GPUs on 0+1`` from the numa check's observation (``1 node`` when all in one)."""
    nodes = observed.get("numa_nodes")
    used = sorted({v for v in (observed.get("gpu_numa") or {}).values() if v is not None})
    if nodes is None and not used:
        return None
    text = f"{nodes} node{'s' if nodes != 1 else ''}" if nodes is not None else "? nodes"
    if len(used) > 1:
        text += ", GPUs on " + "+".join(map(str, used))
    return text


def allreduce_busbw(engine: Engine, cell_id: int) -> tuple[float, int] | None:
    """(busbw GB/s, bytes) of the cell's last collectives run: ``largest_allreduce`` of the whole
    cluster's sweep (across nodes the payload also sweeps each node and each rail: ``scope``)."""
    return largest_allreduce([r for r in _last_attempt_rows(engine, cell_id, "collectives") if whole_cluster(r)])


def whole_cluster(row: dict[str, Any]) -> bool:
    """A collectives sample of the whole cluster's sweep: on one node every sample; across nodes
    the ``cluster`` scope (not one node's or one rail's sweep)."""
    return row.get("scope") in (None, "cluster")


MEASURED_DTYPE = "float"
"""The type the payload's collectives sweep (``payload.comm.collectives``: float32), nccl-tests' default."""


def measured_dtype(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` of the type a campaign measures, per collective whose rows hold several (nccl-tests
    ``-d all``, several ``-d``, or several runs): ``MEASURED_DTYPE``'s, none when it has none; all of a
    collective's rows when they hold one (a file of all_reduce in float and all_gather in half keeps both)."""
    return _narrowed(rows, "dtype", MEASURED_DTYPE)


MEASURED_REDOP = "sum"
"""The reduction the payload's collectives sweep (``torch.distributed`` ``all_reduce``: SUM), nccl-tests'
default (``-o sum``)."""


def measured_redop(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` of the reduction a campaign measures, per collective whose rows hold several (nccl-tests
    ``-o all``: sum, prod, max, min, avg, mulsum, each a row per size): ``MEASURED_REDOP``'s, none when it
    has none; all of a collective's rows when they hold one (``none`` for all_gather, or no redop column)."""
    return _narrowed(rows, "redop", MEASURED_REDOP)


def _narrowed(rows: list[dict[str, Any]], key: str, wanted: str) -> list[dict[str, Any]]:
    """``rows`` less, per collective (``op``) whose rows hold several values of ``key``, those of another
    value than ``wanted``."""
    values: dict[Any, set[Any]] = {}
    for r in rows:
        values.setdefault(r.get("op"), set()).add(r.get(key))
    return [r for r in rows if len(values[r.get("op")]) <= 1 or r.get(key) == wanted]


def measured(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` of what a campaign measures: its type (``measured_dtype``) and its reduction
    (``measured_redop``)."""
    return measured_redop(measured_dtype(rows))


def largest_allreduce(rows: list[dict[str, Any]]) -> tuple[float, int] | None:
    """(busbw GB/s, bytes): the median all_reduce busbw at the largest size among ``rows``
    (collectives samples of the measured type and reduction, ``measured``; nccl-tests' out-of-place
    and in-place rows both count). None without such all_reduce rows, or when they ran on one rank:
    busbw is 0 there by definition, no measurement."""
    rows = [r for r in measured(rows) if r.get("op") == "all_reduce" and r.get("busbw_gbps") is not None
            and r.get("ranks") != 1]
    if not rows:
        return None
    size = max(int(r["bytes"]) for r in rows)
    return median([float(r["busbw_gbps"]) for r in rows if int(r["bytes"]) == size]), size
