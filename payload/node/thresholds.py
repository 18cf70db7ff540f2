"""Every preflight threshold in one table, with its source. A campaign overrides any of them with
``payload.preflight.thresholds: {name: value}`` (pure)."""

from __future__ import annotations

THRESHOLDS: dict[str, tuple[float, str]] = {
    "budget_s": (90, "default time budget of the whole preflight; a check still running then fails"),
    "cluster_probe_budget_s": (300, "across nodes: the cluster probe's own time budget from its start (budget_s "
                                    "does not include it): a first NCCL init between nodes can take tens of "
                                    "seconds on a healthy cluster"),
    "shm_min_mb": (1024, "NCCL's SHM transport lives in /dev/shm; containers default to 64 MB, far too small"),
    "cpus_per_gpu_min": (8, "NCCL proxy threads and input pipelines need cores: too few vCPUs starve the "
                            "proxy threads"),
    "gemm_min_fraction": (0.8, "warn below 80% of the GPU model's expected bf16 matmul TFLOP/s"),
    "hbm_min_fraction": (0.8, "warn below 80% of the GPU model's expected device-to-device copy GB/s"),
    "allreduce_min_fraction": (0.8, "acceptance practice: more than 20% below the expected busbw (as nccl-tests "
                                    "doc/PERFORMANCE.md defines it) means something is wrong: a node's own "
                                    "all_reduce fails below this fraction of its healthy ring figure and warns "
                                    "between (payload.node.allreduce_band, single-node and intra-node checks "
                                    "alike)"),
    # across nodes (nodes > 1; payload.node.cluster_checks): published pre-launch acceptance of an H100 cluster,
    # nccl-tests all_reduce at 8 GB. The pair and the falloff are judged by default on 8× H100_SXM / H200 nodes only,
    # elsewhere (CPU included) when set; each node's own figure by the nccl_allreduce rule wherever it has a figure
    "intra_node_busbw_min_gbps": (0, "unset: each node's own all_reduce busbw is judged by the nccl_allreduce "
                                     "rule (payload.node.allreduce_band); set: a node below this many GB/s is "
                                     "named and replaced instead, on any configuration (CPU included)"),
    "inter_node_busbw_min_gbps": (350, "node-pair all_reduce busbw (2 nodes × 8 H100, 8× NDR-400 InfiniBand + "
                                       "GPUDirect RDMA: 350–380 GB/s at 8 GB; below 200 something to debug); "
                                       "judged on 2-node clusters: warn below it, fail below allreduce_min_fraction "
                                       "of it (2× p5.48xlarge published 313 at 1 GiB on an older EFA stack); when "
                                       "set, a plain floor"),
    "cluster_falloff_max_fraction": (0.25, "the full-cluster all_reduce busbw at most 25% below the nodes' intra-node "
                                           "figure (published H100 + 8× NDR-400: 2 / 4 / 8 / 16 nodes 350–380 / "
                                           "320–360 / 280–320 / 240–280 GB/s; unless set, widened to those "
                                           "figures' own falloff on 4+ nodes: "
                                           "payload.node.cluster_checks.falloff_limit)"),
}
CLUSTER_REFERENCE = {("H100_SXM", 8), ("H200", 8)}
"""The (GPU model, GPUs per node) the cross-node thresholds' published figures were measured on."""

EXPECTED_GEMM_TFLOPS = {
    # achievable dense bf16 matmul (8192³), about 70% of the published peak
    "H100_SXM": 690.0, "H100_NVL": 580.0, "H100_PCIE": 520.0, "H200": 690.0, "H200_NVL": 580.0, "GH200": 690.0,
    "A100_SXM": 250.0, "A100_PCIE": 230.0, "L40S": 250.0, "B200": 1500.0,
}
EXPECTED_HBM_GBPS = {
    # device-to-device copy, bytes read + written, about 80% of the published HBM bandwidth
    "H100_SXM": 2680.0, "H100_NVL": 3120.0, "H100_PCIE": 1600.0, "H200": 3840.0, "H200_NVL": 3840.0,
    "GH200": 3200.0,
    "A100_SXM": 1630.0, "A100_PCIE": 1550.0, "L40S": 690.0, "B200": 6400.0,
}
EXPECTED_ALLREDUCE_BUSBW = {
    # a healthy node's all_reduce busbw at large sizes with ring all_reduce, i.e. without NVLink SHARP
    # (nccl-tests all_reduce_perf; lower end of the published ranges). 8× H100 / H200 SXM: NCCL's maintainer
    # puts NVLink's effective bandwidth at ≈ 370 GB/s, seen as all_reduce busbw with NCCL_ALGO=RING, and
    # ≈ 480 only with NVLS (github.com/NVIDIA/nccl-tests/issues/212); 8× H100 SXM measured 365–370 with
    # ring and 480 with NVLS (github.com/NVIDIA/nccl/issues/1455); 4 GPUs gain nothing from NVLS there.
    ("H100_SXM", 8): 365.0, ("H200", 8): 365.0, ("A100_SXM", 8): 230.0, ("H100_PCIE", 8): 35.0,
    ("H100_NVL", 4): 200.0, ("H200", 4): 337.7,
}
NVLS_ALLREDUCE_BUSBW = {
    # the same with NVLink SHARP (NVLS, NCCL ≥ 2.17 on NVSwitch 3): ≈ 480 on 8× H100 (nccl-tests issue 212),
    # 475 on 8× H200 (github.com/NVIDIA/nccl-tests/issues/272)
    ("H100_SXM", 8): 480.0, ("H200", 8): 475.0,
}
EXPECTED_TOPOLOGY: dict[str, tuple[str, ...]] = {
    # the classes (``node_facts.classify_topology``) a healthy multi-GPU node of the model shows
    "H100_SXM": ("nvswitch_mesh",), "H200": ("nvswitch_mesh",), "A100_SXM": ("nvswitch_mesh",),
    "B200": ("nvswitch_mesh",),
    "H100_NVL": ("nvlink_pairs",),  # PCIe cards, NVLink-bridged in pairs
    "H200_NVL": ("nvlink_pairs", "nvlink_quads"),  # PCIe cards, 2- or 4-way NVLink bridges
    # PCIe cards, plain or with NVLink bridges in pairs (A100 PCIe and H100 PCIe take a 2-way bridge;
    # nvidia-smi may name an H100 NVL "H100 PCIe")
    "H100_PCIE": ("pcie_only", "nvlink_pairs"), "A100_PCIE": ("pcie_only", "nvlink_pairs"),
    "L40S": ("pcie_only",),
}
MIN_DRIVER_FOR_CUDA_MAJOR = {
    # NVIDIA's CUDA toolkit release notes: minimum driver for minor-version compatibility (Linux)
    11: "450.80.02", 12: "525.60.13", 13: "580.65.06",
}


def resolve(overrides: dict[str, float] | None = None) -> dict[str, float]:
    """The thresholds in force; an unknown name in ``overrides`` raises ValueError."""
    values = {name: value for name, (value, _) in THRESHOLDS.items()}
    for name, value in (overrides or {}).items():
        if name not in values:
            raise ValueError(f"unknown preflight threshold {name!r}; known: {', '.join(sorted(values))}")
        values[name] = float(value)
    return values
