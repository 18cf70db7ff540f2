"""The process group as one rank uses it (torch.distributed, imported lazily): where ranks sit
(``Layout``), the backend and device of its collectives, barriers, synchronizes and GPU timing
(``cuda_timed``), and the node and rail subgroups.

Device discipline: NCCL maps only CUDA tensors (a CPU tensor fails with "No backend type
associated with device type cpu"), so every tensor handed to a collective is created on
``group_device()`` (this rank's GPU on NCCL, the CPU on gloo), and ``barrier()`` names the GPU.
The group is bound to its GPU (``device_id``) and its collectives time out with the phase's budget
(``group_options``).

Both sides import it: the phases' rank functions (``collectives``, the preflight probes, the
profile) and the modules that start ranks (``ranks``, ``payload.worker``); it imports no phase.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..job import Job

if TYPE_CHECKING:
    import torch

DEFAULT_TIMEOUT_S = 600.0
"""Collective timeout of a phase launched without a budget (torch's own NCCL default, made explicit)."""


@dataclass(frozen=True)
class Layout:
    """Where ranks sit in a cluster of ``nodes`` nodes with ``count`` ranks each (pure).

    Global rank ``g`` runs on node ``g // count`` as local rank (GPU) ``g % count``."""

    nodes: int
    count: int
    node_rank: int = 0

    @classmethod
    def of(cls, job: Job) -> Layout:
        if job.nodes < 1 or job.count < 1 or not 0 <= job.node_rank < job.nodes:
            raise ValueError(f"job.json: node_rank {job.node_rank} of {job.nodes} nodes × {job.count} ranks "
                             "is not a cluster")
        return cls(job.nodes, job.count, job.node_rank)

    @property
    def world_size(self) -> int:
        return self.nodes * self.count

    def global_rank(self, local_rank: int) -> int:
        """This node's ``local_rank`` as a global rank."""
        return self.node_rank * self.count + local_rank

    def node_groups(self) -> list[list[int]]:
        """The global ranks of each node, node 0 first."""
        return [list(range(n * self.count, (n + 1) * self.count)) for n in range(self.nodes)]

    def rail_groups(self) -> list[list[int]]:
        """One rank per node per rail: the global ranks of local rank ``r`` on every node, rail 0 first."""
        return [[n * self.count + r for n in range(self.nodes)] for r in range(self.count)]


def uses_gpu(job: Job) -> bool:
    return job.gpu.lower() != "cpu"


def backend_for(job: Job) -> str:
    return "nccl" if uses_gpu(job) else "gloo"


def comm_device(backend: str, local_rank: int) -> torch.device:
    """The device a collective's tensors must live on: ``cuda:<local_rank>`` for NCCL, the CPU for gloo."""
    import torch

    return torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")


def group_device() -> torch.device:
    """``comm_device`` of the initialised default group, for this rank."""
    import torch
    import torch.distributed as dist

    backend = str(dist.get_backend())
    return comm_device(backend, torch.cuda.current_device() if backend == "nccl" else 0)


def group_options(backend: str, local_rank: int, timeout_s: float) -> dict[str, Any]:
    """Keyword arguments of ``init_process_group`` besides backend, rank and rendezvous: the
    collective timeout and, on NCCL, the rank's GPU (eager communicator init, barriers on the
    right device)."""
    import torch

    options: dict[str, Any] = {"timeout": timedelta(seconds=max(1.0, timeout_s))}
    if backend == "nccl":
        options["device_id"] = torch.device("cuda", local_rank)
    return options


def synchronize(devices: Iterable[torch.device | int]) -> None:
    """Wait until the work queued on every CUDA device in ``devices`` is done (CPU: nothing to wait for)."""
    import torch

    for device in devices:
        if isinstance(device, int) or device.type == "cuda":
            torch.cuda.synchronize(device)


def barrier(group: Any = None) -> None:
    """``dist.barrier`` of ``group`` (the whole world by default) on the group's device (NCCL:
    this rank's GPU, named explicitly)."""
    import torch.distributed as dist

    device = group_device()
    if device.type == "cuda":
        dist.barrier(group=group, device_ids=[device.index])
    else:
        dist.barrier(group=group)


def gather_by_slot(values: Sequence[float], slot: int, leader: bool, slots: int) -> list[list[float]]:
    """Every group's ``values`` on every rank of the world: each group's ``leader`` puts its own
    in row ``slot`` of a zeroed table (``slots`` rows), summed over the world (one all_reduce on the
    group's device)."""
    import torch
    import torch.distributed as dist

    table = torch.zeros(slots, len(values), dtype=torch.float64, device=group_device())
    if leader:
        table[slot] = torch.tensor(list(values), dtype=torch.float64, device=table.device)
    dist.all_reduce(table)
    rows: list[list[float]] = table.tolist()
    return rows


_worker: dict[str, Any] = {}
"""This rank process's collective timeout (``set_collective_timeout``) and cached subgroups."""


def set_collective_timeout(timeout_s: float) -> None:
    """The collective timeout of the subgroups this process makes (``payload.worker`` sets the rank's)."""
    _worker["timeout_s"] = timeout_s


def subgroups(job: Job) -> tuple[Any, Any]:
    """(this rank's node group, this rank's rail group), made once per process with the rank's
    collective timeout. Every rank must call it at the same point (``new_group`` is collective)."""
    import torch.distributed as dist

    if "subgroups" not in _worker:
        layout = Layout.of(job)
        timeout = timedelta(seconds=max(1.0, float(_worker.get("timeout_s", DEFAULT_TIMEOUT_S))))
        node, _ = dist.new_subgroups_by_enumeration(layout.node_groups(), timeout=timeout)
        rail, _ = dist.new_subgroups_by_enumeration(layout.rail_groups(), timeout=timeout)
        _worker["subgroups"] = (node, rail)
    groups: tuple[Any, Any] = _worker["subgroups"]
    return groups


def release_subgroups() -> int:
    """Destroy this rank's node and rail groups (``subgroups``), so their communicators (NCCL's
    buffers on the GPU) hold no memory in the phases after; every rank calls it at the same point.
    Returns how many groups were destroyed (0 when none were made)."""
    import torch.distributed as dist

    groups = _worker.pop("subgroups", ())
    mine = [group for group in dict.fromkeys(groups) if isinstance(group, dist.ProcessGroup)]
    for group in mine:
        dist.destroy_process_group(group)
    return len(mine)


def cuda_timed(fn: Any, iters: int, devices: Sequence[int]) -> float:
    """Seconds per call of ``fn`` on the GPU: one warm-up call, then ``iters`` calls between
    synchronizes of every device in ``devices``. Name every device ``fn`` touches: a cross-device
    copy runs on the source device's stream, so synchronizing only the current device times the
    enqueue, not the copy."""
    fn()
    synchronize(devices)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    synchronize(devices)
    return (time.perf_counter() - start) / iters
