"""The preflight checks, each a pure function of a facts snapshot (``Facts``) and what the cell
expects. A check returns ``{name, status: pass|warn|fail|skip, observed, expected, hint}``; a
missing file makes its check ``skip`` with the reason. Live measurements (CUDA init, GEMM, HBM,
all-reduce) are facts too (``probes.json``), so a saved snapshot can be judged again anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import node_facts as nf
from . import toolchain
from .allreduce_band import Band
from .gpu_models import BF16_PEAK_FLOPS, gpu_model, names_model
from .thresholds import (
    EXPECTED_GEMM_TFLOPS,
    EXPECTED_HBM_GBPS,
    EXPECTED_TOPOLOGY,
    MIN_DRIVER_FOR_CUDA_MAJOR,
)

Check = dict[str, Any]
NCCL_LOGS = "nccl-debug*.log"
"""The NCCL_DEBUG=INFO logs of a snapshot: one per rank (``nccl-debug.<host>.<pid>.log``), or one
``nccl-debug.log`` in snapshots taken before."""
STATUS_ORDER = {"skip": -1, "pass": 0, "warn": 1, "fail": 2}
BUSBW_DOC = "nccl-tests doc/PERFORMANCE.md: https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"
NCCL_ENV_DOC = "NCCL docs, Environment Variables: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"


def _set(value: str) -> bool:
    return value.strip() not in ("", "0")


def _few(value: str) -> bool:
    return value.strip().isdigit() and int(value) < 4


NCCL_COSTS: dict[str, tuple[Callable[[str], bool], str, str]] = {
    # name -> (does this value cost?, status, what it costs); values per NCCL_ENV_DOC
    "NCCL_P2P_DISABLE": (_set, "fail", "direct GPU-to-GPU (P2P over NVLink or PCIe) is off: traffic goes through "
                                       "host memory; unset it"),
    "NCCL_P2P_LEVEL": (lambda v: v.strip().upper() in ("LOC", "0"), "fail",
                       "LOC means never use P2P (as NCCL_P2P_DISABLE=1): unset it"),
    "NCCL_SHM_DISABLE": (_set, "fail", "shared-memory transport off, so NCCL goes over the network between "
                                       "GPUs without P2P; measured on an 8×H100 NVL node: 3.2× step time and "
                                       "14.3× NCCL kernel time; unset it"),
    "NCCL_IB_DISABLE": (_set, "warn", "InfiniBand/RoCE off: traffic between nodes goes over TCP sockets"),
    "NCCL_NET": (lambda v: v.strip().lower() == "socket", "warn", "the network forced to TCP sockets"),
    "NCCL_NET_GDR_LEVEL": (lambda v: v.strip().upper() in ("LOC", "0"), "warn",
                           "LOC means never use GPUDirect RDMA: NIC traffic bounces through host memory"),
    "NCCL_NVLS_ENABLE": (lambda v: v.strip() == "0", "warn", "NVLink SHARP off: slower all_reduce on NVSwitch"),
    "NCCL_ALGO": (_set, "warn", "forcing an algorithm (e.g. Ring) hurts small sizes: unset unless measuring it"),
    "NCCL_PROTO": (_set, "warn", "forcing a protocol changes latency and bandwidth: unset unless measuring it"),
    "NCCL_MAX_NCHANNELS": (_few, "fail", "fewer than 4 channels caps the bandwidth of every collective; unset it"),
    "NCCL_MAX_CTAS": (_few, "fail", "fewer than 4 CTAs caps the bandwidth of every collective; unset it"),
    "NCCL_MIN_NCHANNELS": (_set, "warn", "channel count forced"),
}
"""The NCCL settings that silently cripple or bend a node's collectives."""


@dataclass(frozen=True)
class Expect:
    gpu: str  # e.g. H100_SXM, or cpu
    count: int

    @property
    def wants_gpu(self) -> bool:
        return self.gpu.lower() != "cpu"


class Facts:
    """A snapshot directory; ``text(name)`` is None when the file was not captured."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def text(self, name: str) -> str | None:
        path = self.directory / name
        return path.read_text(errors="replace") if path.is_file() else None

    def texts(self, pattern: str) -> str | None:
        """Every file matching the glob ``pattern``, in name order, joined; None when none matches."""
        paths = sorted(p for p in self.directory.glob(pattern) if p.is_file()) if self.directory.is_dir() else []
        return "".join(p.read_text(errors="replace") for p in paths) if paths else None


def _result(name: str, status: str, observed: Any, expected: Any, hint: str = "") -> Check:
    return {"name": name, "status": status, "observed": observed, "expected": expected, "hint": hint}


def _missing(name: str, file: str) -> Check:
    return _result(name, "skip", None, None, f"{file} was not captured (the command is missing or failed)")


def _gpus(facts: Facts) -> list[nf.GpuRow] | None:
    text = facts.text("nvidia-smi-query.csv")
    return None if text is None else nf.parse_query_csv(text)


def _probes(facts: Facts) -> dict[str, Any]:
    text = facts.text("probes.json")
    return nf.parse_torch(text) if text else {}


def _model(row: nf.GpuRow) -> str | None:
    model = gpu_model(row.name)
    if model in ("H100_SXM", "H100_PCIE") and row.power_limit_w is not None:
        # names can be ambiguous in VMs; the power limit is not: SXM 700 W, NVL 400 W, PCIe 350 W
        model = "H100_SXM" if row.power_limit_w >= 600 else ("H100_NVL" if row.power_limit_w >= 380 else "H100_PCIE")
    return model


def _label(row: nf.GpuRow) -> str:
    """The row's table model, else the name its driver reports (``NVIDIA B300 SXM6 AC``)."""
    return _model(row) or row.name


def detected_model(facts: Facts) -> str | None:
    """The one model every GPU of the snapshot is: a table name, or the driver's name for a model
    outside the table; None without GPUs or with several models."""
    rows = _gpus(facts) or []
    models = {_label(r) for r in rows}
    return models.pop() if len(models) == 1 else None


def _is(row: nf.GpuRow, gpu: str) -> bool:
    """Is ``row`` the model ``gpu``: a table model by ``_model``, one outside the table by name."""
    return _model(row) == gpu if gpu in BF16_PEAK_FLOPS else names_model(gpu, row.name)


def check_cuda_init(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    if not expect.wants_gpu:
        return _result("cuda_init", "skip", "cpu cell", None, "no GPU needed")
    probe = _probes(facts).get("cuda_init")
    torch_facts = nf.parse_torch(facts.text("torch.json") or "")
    if probe is None and not torch_facts:
        return _missing("cuda_init", "torch.json")
    if probe and probe.get("error"):
        return _result("cuda_init", "fail", probe["error"], "a kernel runs on every GPU",
                       "CUDA does not initialise on this node (a broken host or driver): replace it")
    count = (probe or {}).get("ok_devices", torch_facts.get("device_count", 0))
    ok = bool(torch_facts.get("cuda_available", probe is not None)) and count >= expect.count
    return _result("cuda_init", "pass" if ok else "fail", {"devices_ok": count}, f">= {expect.count}",
                   "" if ok else "CUDA sees fewer GPUs than the cell needs: replace the node")


def check_gpu_inventory(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    if not expect.wants_gpu:
        return _result("gpu_inventory", "skip", "cpu cell", None, "no GPU needed")
    rows = _gpus(facts)
    if rows is None:
        return _missing("gpu_inventory", "nvidia-smi-query.csv")
    observed = {"count": len(rows), "models": sorted({_label(r) for r in rows}),
                "names": sorted({r.name for r in rows})}
    if len(rows) < expect.count:
        return _result("gpu_inventory", "fail", observed, f"{expect.count}× {expect.gpu}",
                       f"{len(rows)} of {expect.count} GPUs visible: a GPU fell off the bus or is hidden; "
                       "replace the node")
    wrong = sorted({_label(r) for r in rows if not _is(r, expect.gpu)})
    if wrong:
        return _result("gpu_inventory", "fail", observed, f"{expect.count}× {expect.gpu}",
                       f"the node has {', '.join(wrong)}, not {expect.gpu} (told apart by name, memory and power "
                       "limit): it was sold as something else; replace it")
    return _result("gpu_inventory", "pass", observed, f"{expect.count}× {expect.gpu}")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def check_driver(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    torch_facts = nf.parse_torch(facts.text("torch.json") or "")
    rows = _gpus(facts)
    if not expect.wants_gpu:
        return _result("driver", "skip", {"torch": torch_facts.get("torch")}, None, "no GPU needed")
    if rows is None or not rows:
        return _missing("driver", "nvidia-smi-query.csv")
    if not torch_facts:  # no evidence of torch's CUDA is not evidence that it has none
        return _result("driver", "skip", {"driver": rows[0].driver}, None,
                       "torch.json was not captured: the driver cannot be matched to torch's CUDA")
    driver = rows[0].driver
    cuda = torch_facts.get("cuda")
    observed = {"driver": driver, "torch_cuda": cuda, "nccl": torch_facts.get("nccl"),
                "torch": torch_facts.get("torch")}
    if not cuda:
        return _result("driver", "fail", observed, "a CUDA build of torch",
                       "torch on this image has no CUDA: fix the image")
    needed = MIN_DRIVER_FOR_CUDA_MAJOR.get(_version(str(cuda))[0])
    if needed and _version(driver) < _version(needed):
        return _result("driver", "fail", observed, f"driver >= {needed} for CUDA {cuda}",
                       "the driver is too old for this torch's CUDA: pick an image built for an older CUDA or "
                       "another node")
    return _result("driver", "pass", observed, f"driver >= {needed}" if needed else "known CUDA")


def check_topology(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    if not expect.wants_gpu:
        return _result("topology", "skip", "cpu cell", None, "no GPU needed")
    text = facts.text("nvidia-smi-topo-m.txt")
    if text is None:
        return _missing("topology", "nvidia-smi-topo-m.txt")
    topo = nf.parse_topo(text)
    kind = nf.classify_topology(topo)
    observed = {"class": kind, "gpus": len(topo.gpus), "nvlink_width": nf.nvlink_width(topo)}
    classes = EXPECTED_TOPOLOGY.get(expect.gpu)
    wanted = " or ".join(classes) if classes else "any"
    if topo.problem:  # unreadable evidence says nothing about the node
        return _result("topology", "warn", observed, wanted,
                       f"nvidia-smi topo -m could not be read ({topo.problem}): check the interconnect by hand")
    if expect.count > 1 and not classes and kind == "pcie_only":
        return _result("topology", "warn", observed, wanted,
                       f"no NVLink between these {len(topo.gpus)} GPUs: every path is PCIe (SYS: across sockets "
                       f"too), so collectives are PCIe-bound (8× H100 PCIe: all_reduce ≈ 35–45 GB/s, ≈ 370 on an "
                       f"NVSwitch mesh); benchctl has no reference class for {expect.gpu}: fine if a PCIe node is "
                       "what was rented, slower steps if not")
    if expect.count == 1 or not classes:
        return _result("topology", "pass", observed, wanted)
    if len(topo.gpus) == 2 and kind == "nvswitch_mesh":
        kind = "nvlink_pairs" if "nvlink_pairs" in classes else kind  # one NVLink pair is both
    if kind not in classes:
        return _result("topology", "fail", observed, wanted,
                       f"a {expect.gpu} node should be an {wanted} but this one is {kind}: it is not the "
                       "interconnect you pay for; replace it")
    return _result("topology", "pass", observed, wanted)


def check_numa(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    nodes = nf.parse_numa_nodes(facts.text("numactl-H.txt") or "")
    if nodes is None:  # numactl is often not installed; lscpu says it too
        nodes = nf.parse_int(nf.parse_lscpu(facts.text("lscpu.txt") or "").get("NUMA node(s)", ""))
    if not expect.wants_gpu:
        if nodes is None:
            return _missing("numa", "numactl-H.txt and lscpu.txt")
        status = "warn" if nodes > 1 and expect.count > 1 else "pass"
        return _result("numa", status, {"numa_nodes": nodes}, "one NUMA node",
                       "CPU ranks span NUMA nodes: their traffic crosses sockets" if status == "warn" else "")
    text = facts.text("nvidia-smi-topo-m.txt")
    if text is None:
        return _missing("numa", "nvidia-smi-topo-m.txt")
    topo = nf.parse_topo(text)
    if topo.problem:
        return _result("numa", "skip", None, "all GPUs on one NUMA node",
                       f"nvidia-smi topo -m could not be read: {topo.problem}")
    affinity = topo.numa
    used = sorted({n for n in affinity.values() if n is not None})
    observed = {"gpu_numa": {str(k): v for k, v in sorted(affinity.items())}, "numa_nodes": nodes}
    if len(used) > 1:
        return _result("numa", "warn", observed, "all GPUs on one NUMA node",
                       f"GPUs split across NUMA nodes {used}: measured on 8×H100 nanochat-d26, 1,295 ms per step "
                       "against 702 ms on one node; expect slower steps (flag numa_split)")
    return _result("numa", "pass", observed, "all GPUs on one NUMA node")


def check_nvlink(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    if not expect.wants_gpu:
        return _result("nvlink", "skip", "cpu cell", None, "no GPU needed")
    text = facts.text("nvidia-smi-nvlink-s.txt")
    if text is None:
        return _missing("nvlink", "nvidia-smi-nvlink-s.txt")
    gpus = nf.parse_nvlink_status(text)
    if not any(g.active_gbps or g.inactive for g in gpus):
        return _result("nvlink", "skip", "no NVLink", None, "this node has no NVLink links")
    per_gpu = {str(g.index): round(sum(g.active_gbps), 1) for g in gpus}
    down = {str(g.index): g.inactive for g in gpus if g.inactive}
    if down:
        return _result("nvlink", "fail", {"inactive_links": down, "gbps_per_gpu": per_gpu}, "every link active",
                       "an NVLink lane is down: collectives through that GPU slow down; replace the node")
    return _result("nvlink", "pass", {"gbps_per_gpu": per_gpu}, "every link active")


def check_nccl_env(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    text = facts.text("env.txt")
    if text is None:
        return _missing("nccl_env", "env.txt")
    env = nf.parse_env(text)
    nccl = {k: v for k, v in env.items() if k.startswith("NCCL_")}
    found = []
    worst = "pass"
    for name, (costs, status, cost) in NCCL_COSTS.items():
        value = nccl.get(name)
        if value is None or not costs(value):
            continue
        found.append(f"{name}={value}: {cost}")
        worst = max(worst, status, key=STATUS_ORDER.__getitem__)
    return _result("nccl_env", worst, nccl, "no NCCL setting that disables a transport or forces an algorithm",
                   "; ".join(found) + f" ({NCCL_ENV_DOC})" if found else "")


def check_shm(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    text = facts.text("dev-shm.txt")
    if text is None:
        return _missing("shm", "dev-shm.txt")
    kb = nf.parse_df_kb(text)
    if kb is None:
        return _result("shm", "warn", text.strip()[:200], "df output", "could not read the size of /dev/shm")
    mb = kb / 1024
    if mb >= th["shm_min_mb"]:
        return _result("shm", "pass", {"dev_shm_mb": round(mb)}, f">= {th['shm_min_mb']:.0f} MB")
    # NCCL's SHM transport needs it between ranks; with one rank only data loaders suffer
    status = "fail" if expect.count > 1 else "warn"
    return _result("shm", status, {"dev_shm_mb": round(mb)}, f">= {th['shm_min_mb']:.0f} MB",
                   "/dev/shm is too small (a container default?) for NCCL's SHM transport and data loader "
                   "workers: run the container with a larger --shm-size or pick another image")


def check_cpu(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    nproc = nf.parse_int(facts.text("nproc.txt") or "")
    if nproc is None:
        return _missing("cpu", "nproc.txt")
    lscpu = nf.parse_lscpu(facts.text("lscpu.txt") or "")
    quota = nf.parse_cpu_max(facts.text("cgroup-cpu.max") or "")
    usable = min(float(nproc), quota) if quota is not None else float(nproc)
    per = usable / max(1, expect.count)
    wanted = th["cpus_per_gpu_min"] if expect.wants_gpu else 1
    observed = {"vcpus": nproc, "cgroup_cpu_limit": quota, "per_rank": round(per, 1),
                "sockets": lscpu.get("Socket(s)"), "model": lscpu.get("Model name")}
    if per < wanted:
        return _result("cpu", "warn", observed, f">= {wanted:.0f} per rank",
                       "too few vCPUs per rank (counting the cgroup CPU limit): NCCL proxy threads and data loading "
                       "will starve (flag few_cpus)")
    return _result("cpu", "pass", observed, f">= {wanted:.0f} per rank")


def check_ecc(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    if not expect.wants_gpu:
        return _result("ecc", "skip", "cpu cell", None, "no GPU needed")
    rows = _gpus(facts)
    if rows is None:
        return _missing("ecc", "nvidia-smi-query.csv")
    errors = {str(r.index): r.ecc_uncorrected for r in rows if r.ecc_uncorrected}
    unreported = {str(r.index): r.ecc_text[:40] for r in rows if r.ecc_uncorrected is None}
    remapped = nf.parse_remapped_rows(facts.text("nvidia-smi-remapped-rows.csv") or "")
    bad_rows = {r.bus_id: {"uncorrectable": r.uncorrectable, "pending": r.pending, "failure": r.failure}
                for r in remapped if r.uncorrectable or r.pending or r.failure}
    expected = "0 uncorrected ECC errors, no remapped-row uncorrectable/pending/failure"
    not_reported = {"not_reported": unreported} if unreported else {}
    if errors or bad_rows:
        return _result("ecc", "fail", {"uncorrected": errors, "remapped_rows": bad_rows, **not_reported}, expected,
                       "uncorrected memory errors or rows remapped after them (a pending remap needs a GPU reset, "
                       "a failed one a new GPU): replace the node")
    if len(unreported) == len(rows) and not remapped:
        return _result("ecc", "skip", not_reported or None, expected,
                       "ECC not reported: nvidia-smi prints no error count ([N/A]: GeForce and other cards without "
                       "ECC, or ECC turned off), so memory errors cannot be checked on this node"
                       if rows else "no GPU rows in nvidia-smi-query.csv")
    return _result("ecc", "pass", {"uncorrected": 0, "remapped_rows_read": bool(remapped), **not_reported}, expected)


def _per_gpu_check(name: str, key: str, table: dict[str, float], fraction: str, unit: str) -> Callable[..., Check]:
    def check(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
        if not expect.wants_gpu:
            return _result(name, "skip", "cpu cell", None, "no GPU needed")
        values = _probes(facts).get(key)
        if not values:
            return _result(name, "skip", None, None, "no live measurement in this snapshot (probes.json)")
        model = detected_model(facts) or expect.gpu
        reference = table.get(model)
        observed = {f"{unit}_per_gpu": [round(v, 1) for v in values]}
        if reference is None:  # measured, but nothing to hold it against: not a pass
            return _result(name, "skip", observed, None,
                           f"no reference figure for {model} (payload/node/thresholds.py): measured, not judged")
        floor = reference * th[fraction]
        slow = [i for i, v in enumerate(values) if v < floor]
        return _result(name, "warn" if slow else "pass", observed, f">= {floor:.0f} {unit} ({model})",
                       f"GPUs {slow} are below {th[fraction]:.0%} of the expected {reference:.0f} {unit}: "
                       "throttled or unhealthy" if slow else "")
    return check


check_gemm = _per_gpu_check("gemm", "gemm_tflops", EXPECTED_GEMM_TFLOPS, "gemm_min_fraction", "TFLOP/s")
check_hbm = _per_gpu_check("hbm", "hbm_gbps", EXPECTED_HBM_GBPS, "hbm_min_fraction", "GB/s")


def check_nccl_allreduce(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    if not expect.wants_gpu:
        return _result("nccl_allreduce", "skip", "cpu cell", None, "no GPU needed")
    log = facts.texts(NCCL_LOGS)
    triage = nf.triage_nccl_log(log) if log else {}
    probe = _probes(facts).get("allreduce")
    if not probe:
        return _result("nccl_allreduce", "skip", {"log": triage} if triage else None, None,
                       "no live all_reduce measurement in this snapshot (probes.json)")
    model = detected_model(facts) or expect.gpu
    band = Band.of(model, expect.count, th["allreduce_min_fraction"])
    observed = {"busbw_gbps": probe.get("busbw_gbps"), "bytes": probe.get("bytes"), "wrong": probe.get("wrong"),
                "log": triage}
    transports = ", ".join(triage.get("transports", {})) or "none logged"
    if probe.get("wrong"):
        return _result("nccl_allreduce", "fail", observed, "0 wrong elements",
                       f"all_reduce returned wrong values (transports: {transports}): replace the node")
    if expect.count < 2:  # one rank moves nothing between GPUs: the values are what is judged
        return _result("nccl_allreduce", "pass", observed, "0 wrong elements", f"transports: {transports}")
    if band is None:
        return _result("nccl_allreduce", "skip", observed, None,
                       f"no reference busbw for {expect.count}× {model} (payload/node/thresholds.py): values correct, "
                       f"busbw measured, not judged; transports: {transports}")
    busbw = float(probe.get("busbw_gbps") or 0.0)
    causes = (f"transports: {transports}. Check in order: NCCL_P2P_DISABLE / NCCL_SHM_DISABLE, an NVLink lane "
              "down, GPUs split across NUMA nodes, GPUDirect RDMA (GDRDMA) not active (busbw as defined in "
              f"{BUSBW_DOC})")
    status = band.status(busbw)
    hint = band.hint(busbw, causes) if status != "pass" else "; ".join(
        filter(None, [band.nvls_note(busbw), f"transports: {transports}"]))
    return _result("nccl_allreduce", status, observed, band.expected_text(), hint)


def check_compile_toolchain(facts: Facts, expect: Expect, th: dict[str, float]) -> Check:
    """Can the profile ``torch.compile`` here (``payload.node.toolchain``)? An image without a C compiler or
    Python's headers is not a bad host: warn, and the profile runs eager with the reason recorded."""
    text = facts.text(toolchain.FILE)
    if text is None:
        return _missing("compile_toolchain", toolchain.FILE)
    found = nf.parse_torch(text)
    if not found.get("compile"):
        return _result("compile_toolchain", "skip", None, None,
                       "the profile does not compile here (compile: false, a CPU cell, or no profile phase)")
    observed = {k: found.get(k) for k in ("cc", "cc_from", "python_include", "python_h")}
    expected = "a C compiler (CC, gcc or clang) and Python.h, as Triton looks for them"
    missing = toolchain.blockers(found)
    if missing:
        return _result("compile_toolchain", "warn", observed, expected,
                       f"torch.compile cannot build Triton kernels on this image ({'; '.join(missing)}): the profile "
                       "runs eager, slower per step and not comparable with compiled results (flag "
                       f"eager_fallback); {toolchain.FIX}")
    return _result("compile_toolchain", "pass", observed, expected)


CHECKS: list[Callable[[Facts, Expect, dict[str, float]], Check]] = [
    check_cuda_init, check_gpu_inventory, check_driver, check_topology, check_numa, check_nvlink, check_nccl_env,
    check_shm, check_cpu, check_ecc, check_gemm, check_hbm, check_nccl_allreduce, check_compile_toolchain,
]


def verdict(checks: list[Check]) -> str:
    """The worst status among the checks that ran (``pass`` when all were skipped)."""
    ran = [c["status"] for c in checks if c["status"] != "skip"]
    return max(ran, key=STATUS_ORDER.__getitem__) if ran else "pass"


def judge(facts: Facts, expect: Expect, thresholds: dict[str, float]) -> list[Check]:
    return [check(facts, expect, thresholds) for check in CHECKS]
