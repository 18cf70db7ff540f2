"""Capture a node's facts snapshot into a directory (stdlib only; torch lazily for torch.json).

Each command's stdout goes to its file when the command exists and succeeds; otherwise the file
is absent and its check will say so. ``FABRIC_COMMANDS`` (the RDMA/EFA tools and loaded kernel
modules, read by ``payload.node.fabric_checks``) are part of every snapshot.
``env.txt`` (mode 0600) has the values of secret names and the user-info of URLs redacted (``env_policy.redacted``).
``BENCHCTL_FAULTS`` (JSON, set by the local provider's fault injection) replaces what the
captured files say: ``{"shm_mb": 64}``, ``{"numa": "split"}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from ..env_policy import redacted

QUERY = ("index,name,uuid,pci.bus_id,driver_version,memory.total,power.limit,"
         "ecc.errors.uncorrected.volatile.total,clocks.max.sm")
COMMANDS: dict[str, list[str]] = {
    "nvidia-smi.txt": ["nvidia-smi"],
    "nvidia-smi-query.csv": ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv"],
    "nvidia-smi-topo-m.txt": ["nvidia-smi", "topo", "-m"],
    "nvidia-smi-nvlink-s.txt": ["nvidia-smi", "nvlink", "-s"],
    "dev-shm.txt": ["df", "-k", "/dev/shm"],
    "nproc.txt": ["nproc"],
    "lscpu.txt": ["lscpu"],
    "numactl-H.txt": ["numactl", "-H"],
    "nvidia-smi-remapped-rows.csv": ["nvidia-smi", "--query-remapped-rows=gpu_bus_id,remapped_rows.correctable,"
                                     "remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure",
                                     "--format=csv"],
    "cgroup-cpu.max": ["cat", "/sys/fs/cgroup/cpu.max"],
}
FABRIC_COMMANDS: dict[str, list[str]] = {
    # read by payload.node.fabric_readers; a node without these tools (no RDMA stack, no EFA) just lacks the file
    "ibstat.txt": ["ibstat"],
    "ibv_devinfo.txt": ["ibv_devinfo", "-v"],
    "ibdev2netdev.txt": ["ibdev2netdev"],
    # the EFA installer puts fi_info in /opt/amazon/efa/bin, often not on the PATH
    "fi_info-efa.txt": ["sh", "-c", 'PATH="$PATH:/opt/amazon/efa/bin" exec fi_info -p efa -t FI_EP_RDM'],
    "proc-modules.txt": ["cat", "/proc/modules"],
}
COMMANDS.update(FABRIC_COMMANDS)


def faults() -> dict[str, Any]:
    try:
        value = json.loads(os.environ.get("BENCHCTL_FAULTS", "{}"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def redacted_env(env: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(redacted(env).items()))


def write_private(path: Path, text: str) -> None:
    """``path`` holds ``text`` and is readable by its owner only (0600), even if it existed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def capture(directory: Path, deadline: float, torch_json: bool = True) -> list[str]:
    """Write the snapshot; return the names of the files written. ``torch_json=False`` leaves
    ``torch.json`` to the caller (preflight takes it from the attempt's ranks, which import torch
    anyway, so the runner itself never does)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    # GNU nproc honours OMP_NUM_THREADS / OMP_THREAD_LIMIT: count the machine's CPUs, not a setting
    plain_env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_THREAD_LIMIT")}
    for name, cmd in COMMANDS.items():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=min(20.0, remaining), env=plain_env)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0:
            (directory / name).write_text(proc.stdout)
            written.append(name)
    write_private(directory / "env.txt", redacted_env(dict(os.environ)))
    written.append("env.txt")
    if torch_json:
        write_torch_json(directory, torch_facts())
        written.append("torch.json")
    _inject(directory, faults())
    return written


def write_torch_json(directory: Path, facts: dict[str, Any]) -> None:
    (directory / "torch.json").write_text(json.dumps(facts, indent=2))


def torch_facts_rank(job: Any, rank: int, world_size: int, events: Any) -> dict[str, Any]:
    """The ``preflight_torch`` rank phase: ``torch_facts`` as a rank process sees them."""
    return torch_facts()


def torch_facts() -> dict[str, Any]:
    import torch

    available = torch.cuda.is_available()
    nccl = None
    if available:
        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    count = torch.cuda.device_count() if available else 0
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl, "cuda_available": available,
            "device_count": count, "devices": [torch.cuda.get_device_name(i) for i in range(count)]}


def _inject(directory: Path, injected: dict[str, Any]) -> None:
    if injected.get("shm_mb") is not None:
        kb = int(injected["shm_mb"]) * 1024
        (directory / "dev-shm.txt").write_text(
            "Filesystem     1K-blocks  Used Available Use% Mounted on\n"
            f"shm            {kb:9d}     0 {kb:9d}   0% /dev/shm\n")
    if injected.get("numa") == "split":
        cpus = os.cpu_count() or 2
        half = max(1, cpus // 2)
        (directory / "numactl-H.txt").write_text(
            "available: 2 nodes (0-1)\n"
            f"node 0 cpus: {' '.join(map(str, range(half)))}\nnode 0 size: 12000 MB\n"
            f"node 1 cpus: {' '.join(map(str, range(half, cpus)))}\nnode 1 size: 12000 MB\n"
            "node distances:\nnode   0   1\n  0:  10  21\n  1:  21  10\n")
