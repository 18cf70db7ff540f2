"""The cross-node preflight checks (nodes > 1), pure functions of the cluster probe's figures.

The probe (``payload.node.probes.cluster_rank``, saved as ``facts/cluster.json``) measures an all_reduce
on each node's ranks, on each rail and on the whole cluster. Judged against the thresholds of
``payload.node.thresholds``. Each node's own figure (``intra_node_busbw``) by the rule the single-node
``nccl_allreduce`` check applies (``payload.node.allreduce_band``: pass at the healthy ring figure, warn
below, fail below ``allreduce_min_fraction`` of it), or below ``intra_node_busbw_min_gbps`` when the
campaign sets it. The node pair (``inter_node_busbw_min_gbps``: pass at the published figure, warn
down to ``allreduce_min_fraction`` of it, fail below) and the falloff (``cluster_falloff_max_fraction``;
on 2 nodes reported only, the pair decides) by default only on nodes of the configuration the
published figures were measured on (``CLUSTER_REFERENCE``: 8× H100 SXM / H200), anywhere else (CPU
included) only when the campaign sets the threshold. Each check is ``{name, status, observed,
expected, hint}`` as ``payload.node.checks``; ``intra_node_busbw`` names the nodes that fail it in
``observed["bad_node_ranks"]`` (the rails and the cluster span every node: they name none).

The published node-pair figure is nccl-tests' all_reduce over both nodes' 16 GPUs (``mpirun -np
16``, one GPU per process, ``ACCEPTANCE_DOC``), so it is judged on the whole 2-node cluster's
figure: one rail carries one NIC (NDR-400: 50 GB/s) and can never reach it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from .allreduce_band import Band
from .thresholds import CLUSTER_REFERENCE

Check = dict[str, Any]
ACCEPTANCE_DOC = "https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests"
"""The published pre-launch acceptance (nccl-tests on a new H100 cluster) the thresholds come from."""
FABRIC_CAUSES = ("GPUDirect RDMA not active (no GDRDMA in NCCL's log, nvidia_peermem not loaded), NCCL_IB_HCA "
                 "missing NICs, the wrong NCCL_IB_GID_INDEX on RoCE, PXN off")
DEBUG_BELOW_GBPS = 200.0
"""Published practice for 2 × 8 H100 with 8× NDR-400: a node pair below this is something to debug."""


def _check(name: str, status: str, observed: Any, expected: Any, hint: str = "") -> Check:
    return {"name": name, "status": status, "observed": observed, "expected": expected, "hint": hint}


def _gbps(value: float) -> float:
    return round(float(value), 2)


def judge_cluster(cluster: dict[str, Any], gpu: str, count: int, thresholds: dict[str, float],
                  explicit: Collection[str]) -> list[Check]:
    """The cross-node checks of one probe result; ``explicit`` names the thresholds the campaign set."""
    wants_gpu = gpu.lower() != "cpu"

    def applies(name: str) -> bool:
        return name in explicit or (wants_gpu and (gpu, count) in CLUSTER_REFERENCE)

    pair = _inter(cluster, thresholds, applies("inter_node_busbw_min_gbps"), "inter_node_busbw_min_gbps" in explicit)
    return [_intra(cluster, _intra_band(gpu, count, thresholds, explicit)), _rails(cluster), pair,
            _falloff(cluster, thresholds, applies("cluster_falloff_max_fraction"),
                     "cluster_falloff_max_fraction" in explicit, pair_judged=pair["expected"] is not None)]


def _intra_band(gpu: str, count: int, th: dict[str, float], explicit: Collection[str]) -> Band | None:
    """The single-node all_reduce rule (``payload.node.allreduce_band``) for each node's own figure, or
    the campaign's ``intra_node_busbw_min_gbps`` when it set one (a floor, no warn band)."""
    if "intra_node_busbw_min_gbps" in explicit:
        floor = th["intra_node_busbw_min_gbps"]
        return Band(floor, floor)
    return Band.of(gpu, count, th["allreduce_min_fraction"]) if gpu.lower() != "cpu" else None


def _not_judged(name: str) -> str:
    return f"not judged: no published figure for this configuration; set {name} to judge it"


def _intra(cluster: dict[str, Any], band: Band | None) -> Check:
    nodes = cluster.get("intra_node") or []
    if not nodes:
        return _check("intra_node_busbw", "skip", None, None, "one rank per node: nothing inside a node to measure")
    observed: dict[str, Any] = {"busbw_gbps": {f"node{n['node_rank']}": _gbps(n["busbw_gbps"]) for n in nodes},
                                "bytes": cluster.get("bytes")}
    wrong = [n["node_rank"] for n in nodes if n["wrong"]]
    if wrong:
        observed["bad_node_ranks"] = wrong
        return _check("intra_node_busbw", "fail", observed, "0 wrong elements",
                      f"node(s) {', '.join(map(str, wrong))}: all_reduce returned wrong values: replace the node")
    if band is None:
        return _check("intra_node_busbw", "pass", observed, None, _not_judged("intra_node_busbw_min_gbps"))
    judged = [(n, band.status(float(n["busbw_gbps"]))) for n in nodes]
    worst = max((status for _, status in judged), key=("pass", "warn", "fail").index)
    if worst == "pass":
        return _check("intra_node_busbw", "pass", observed, band.expected_text() + " per node",
                      band.nvls_note(min(float(n["busbw_gbps"]) for n in nodes)))
    off = [n for n, status in judged if status == worst]
    if worst == "fail":
        observed["bad_node_ranks"] = [n["node_rank"] for n in off]
    named = ", ".join(f"node {n['node_rank']} ({n['busbw_gbps']:.0f} GB/s)" for n in off)
    causes = ("an NVLink lane down, NCCL_P2P_DISABLE / NCCL_SHM_DISABLE, GPUs split across NUMA nodes"
              + ("; the node is replaced" if worst == "fail" else ""))
    return _check("intra_node_busbw", worst, observed, band.expected_text() + " per node",
                  f"{named}: " + band.hint(float(off[0]["busbw_gbps"]), causes))


def _rails(cluster: dict[str, Any]) -> Check:
    rails = cluster.get("inter_node") or []
    observed = {"busbw_gbps": {f"rail{r['rail']}": _gbps(r["busbw_gbps"]) for r in rails},
                "ranks_per_rail": rails[0]["ranks"] if rails else None}
    wrong = [r["rail"] for r in rails if r["wrong"]]
    if wrong:
        return _check("rail_busbw", "fail", observed, "0 wrong elements",
                      f"rail(s) {', '.join(map(str, wrong))}: all_reduce across nodes returned wrong values")
    return _check("rail_busbw", "pass", observed, None,
                  "one rank per node per rail, every rail at once; reported, not judged")


def _inter(cluster: dict[str, Any], th: dict[str, float], judged: bool, explicit: bool) -> Check:
    whole = cluster.get("cluster") or {}
    busbw = float(whole.get("busbw_gbps") or 0.0)
    nodes = int(cluster.get("nodes") or 0)
    observed = {"busbw_gbps": _gbps(busbw), "nodes": nodes, "ranks": whole.get("ranks"), "bytes": cluster.get("bytes")}
    if whole.get("wrong"):
        return _check("inter_node_busbw", "fail", observed, "0 wrong elements",
                      "the cluster's all_reduce returned wrong values: " + FABRIC_CAUSES)
    if nodes != 2:
        return _check("inter_node_busbw", "pass", observed, None,
                      "the node-pair figure is judged on 2-node clusters; see cluster_falloff")
    if not judged:
        return _check("inter_node_busbw", "pass", observed, None, _not_judged("inter_node_busbw_min_gbps"))
    figure = th["inter_node_busbw_min_gbps"]
    band = Band(figure, figure if explicit else round(figure * th["allreduce_min_fraction"], 1))
    status = band.status(busbw)
    if status == "fail":
        how = "something to debug" if busbw < DEBUG_BELOW_GBPS else "below the published node-pair figure"
        return _check("inter_node_busbw", "fail", observed, band.expected_text(),
                      f"node pair at {busbw:.0f} GB/s, {how}; the fabric, not one node: check {FABRIC_CAUSES}")
    if status == "warn":
        return _check("inter_node_busbw", "warn", observed, band.expected_text(),
                      f"node pair at {busbw:.0f} GB/s, below the published node-pair figure but above "
                      f"{band.floor:.0f}, where healthy pairs on older stacks were published (2× p5.48xlarge: "
                      f"{P5_PAIR_OLD_STACK_GBPS:.0f} GB/s, {P5_PAIR_SOURCE}): flagged, not failed; "
                      f"check {FABRIC_CAUSES}")
    return _check("inter_node_busbw", "pass", observed, band.expected_text())


PUBLISHED_CLUSTER_FLOOR_GBPS = {2: 350.0, 4: 320.0, 8: 280.0, 16: 240.0}
"""The low end of the published full-cluster all_reduce busbw by node count (H100 + 8× NDR-400)."""
PUBLISHED_INTRA_NODE_GBPS = 480.0
"""The intra-node figure falloff is measured from: 8× H100 SXM with NVLink SHARP (≈ 480, the top of
the published 460–480; NCCL's maintainer in nccl-tests issue 212), the fastest a healthy node shows,
so a cluster of such nodes at the published low end is still within the limit."""
P5_PAIR_OLD_STACK_GBPS = 313.29
"""2× p5.48xlarge, all_reduce busbw at 1 GiB on EFA installer 1.28.0, aws-ofi-nccl 1.7.3, NCCL 2.18.5;
437–479 GB/s at 1–8 GiB on the current stack (aws-ofi-nccl 1.16.3, NCCL 2.27.7)."""
P5_PAIR_SOURCE = "aws-samples/awsome-distributed-training, micro-benchmarks/nccl-tests/README.md"


def falloff_limit(nodes: int, configured: float, explicit: bool) -> float:
    """The falloff allowed for ``nodes`` nodes: the campaign's own figure when it set one; else 25 %,
    widened to what the published figures show for larger clusters (a healthy 8-node ring runs at
    280–320 GB/s, 42 % below 480): ``max(configured, 1 - floor(nodes) / 480)`` with the floor of the
    smallest published node count at or above ``nodes``."""
    if explicit:
        return configured
    floors = [floor for count, floor in sorted(PUBLISHED_CLUSTER_FLOOR_GBPS.items()) if count >= nodes]
    floor = floors[0] if floors else min(PUBLISHED_CLUSTER_FLOOR_GBPS.values())
    return max(configured, round(1 - floor / PUBLISHED_INTRA_NODE_GBPS, 4))


def _falloff(cluster: dict[str, Any], th: dict[str, float], judged: bool, explicit: bool = False,
             pair_judged: bool = False) -> Check:
    """The whole cluster's busbw against the nodes' own; on 2 nodes whose pair figure is judged
    (``inter_node_busbw``) reported only: that measurement decides, and a falloff never overrides
    it (intra 480 with NVLS and a healthy pair at 355 is 26 % below)."""
    nodes = cluster.get("intra_node") or []
    if not nodes:
        return _check("cluster_falloff", "skip", None, None, "one rank per node: no intra-node figure to compare")
    intra = sum(float(n["busbw_gbps"]) for n in nodes) / len(nodes)
    whole = float((cluster.get("cluster") or {}).get("busbw_gbps") or 0.0)
    falloff = 1 - whole / intra if intra > 0 else 1.0
    observed = {"cluster_busbw_gbps": _gbps(whole), "intra_node_mean_gbps": _gbps(intra),
                "falloff": round(falloff, 4), "nodes": cluster.get("nodes")}
    if pair_judged and cluster.get("nodes") == 2:
        return _check("cluster_falloff", "skip", observed, None,
                      "reported, not judged: on 2 nodes the node-pair figure (inter_node_busbw) judges the fabric")
    if not judged:
        return _check("cluster_falloff", "pass", observed, None, _not_judged("cluster_falloff_max_fraction"))
    limit = falloff_limit(int(cluster.get("nodes") or 2), th["cluster_falloff_max_fraction"], explicit)
    if round(falloff, 4) > limit:  # as rounded as the limit: a cluster at the published floor passes
        return _check("cluster_falloff", "fail", observed, f"<= {limit:.0%} below the intra-node figure",
                      f"the whole cluster's busbw is {falloff:.0%} below the nodes' own: check {FABRIC_CAUSES}")
    return _check("cluster_falloff", "pass", observed, f"<= {limit:.0%} below the intra-node figure")


def bad_node_ranks(checks: list[Check]) -> list[int]:
    """The node ranks the failed cross-node checks name (empty: the fabric, no one node)."""
    return [rank for c in checks if c["status"] == "fail" and isinstance(c.get("observed"), dict)
            for rank in c["observed"].get("bad_node_ranks", [])]
