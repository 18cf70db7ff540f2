"""Device discipline of the distributed phases, caught on CPU.

NCCL maps only CUDA tensors: a tensor left on the CPU fails with "No backend type associated with
device type cpu" (the collectives phase died so at its first size). Here a world-size-1 gloo group
runs in this process with its collectives made as strict as NCCL's: every tensor must be on the
group's device (``payload.comm.group.group_device``), and a tensor built without naming its
device lands on ``meta`` (under NCCL it would land on the CPU), so it is refused the same way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from benchctl.payload.comm.collectives import collectives_rank
from benchctl.payload.comm.group import group_device, group_options
from benchctl.payload.comm.ranks import launch
from benchctl.payload.job import CollectivesConfig, Job
from benchctl.payload.node import probes
from benchctl.payload.worker import run_worker

COLLECTIVES = tuple(name for name in ("all_reduce", "all_gather_into_tensor", "all_gather_single",
                                      "reduce_scatter_tensor", "reduce_scatter_single", "broadcast",
                                      "all_to_all_single", "barrier")
                    if hasattr(dist, name))


@pytest.fixture
def strict_group(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names of the collectives called, each checked for the group's device."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    called: list[str] = []

    def strict(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            device = group_device()
            for value in (*args, *kwargs.values()):
                if isinstance(value, torch.Tensor) and value.device != device:
                    raise RuntimeError(f"No backend type associated with device type {value.device.type} "
                                       f"(the group's device is {device})")
            called.append(name)
            return real(*args, **kwargs)
        return call

    for name in COLLECTIVES:
        monkeypatch.setattr(dist, name, strict(name, getattr(dist, name)))
    try:
        with torch.device("meta"):
            yield called
    finally:
        dist.destroy_process_group()


OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall"]


def _job(gpu: str = "cpu") -> Job:
    return Job(campaign="t", cell="c", attempt=1, token="t", gpu=gpu, count=1, phases=["collectives"],
               collectives=CollectivesConfig(ops=OPS, min_bytes=8, max_bytes=64, factor=8, warmup_iters=1, iters=2))


def test_the_strict_group_refuses_a_tensor_off_its_device(strict_group: list[str]) -> None:
    with pytest.raises(RuntimeError, match="device type meta"):
        dist.all_reduce(torch.tensor([1.0]))  # built without a device, as the elapsed time once was
    dist.all_reduce(torch.tensor([1.0], device=group_device()))
    assert strict_group == ["all_reduce"]


def test_the_collectives_sweep_hands_collectives_only_tensors_on_the_group_device(strict_group: list[str]) -> None:
    collectives_rank(_job(), 0, 1, None)
    called = set(strict_group)
    assert {"all_reduce", "broadcast", "all_to_all_single", "barrier"} <= called
    assert called & {"all_gather_into_tensor", "all_gather_single"}
    assert called & {"reduce_scatter_tensor", "reduce_scatter_single"}


def test_the_preflight_all_reduce_hands_collectives_only_tensors_on_the_group_device(
        strict_group: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "ALLREDUCE_BYTES", 4096)
    probes.allreduce_rank(_job(), 0, 1, None)
    assert strict_group.count("all_reduce") == 3 + 10 + 2  # check and warm-up, timed, the time and the errors


def test_group_options_bind_the_gpu_on_nccl_and_carry_the_timeout() -> None:
    assert group_options("nccl", 3, 42) == {"timeout": timedelta(seconds=42), "device_id": torch.device("cuda", 3)}
    assert group_options("gloo", 3, 42) == {"timeout": timedelta(seconds=42)}


def test_a_gpu_rank_joins_nccl_bound_to_its_gpu_with_the_phase_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Joined(Exception):
        pass

    seen: dict[str, Any] = {}

    def init_process_group(backend: str, **kwargs: Any) -> None:
        seen.update(kwargs, backend=backend)
        raise Joined

    (tmp_path / "artifacts" / "logs").mkdir(parents=True)
    job_path = tmp_path / "job.json"
    job_path.write_text(_job("H100_SXM").to_json())
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: seen.setdefault("set_device", device))
    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    with pytest.raises(Joined):
        run_worker(str(job_path), "collectives", 5, 8, str(tmp_path / "rdv"), timeout_s=42)
    assert seen["backend"] == "nccl" and seen["set_device"] == 5
    assert seen["device_id"] == torch.device("cuda", 5)
    assert seen["timeout"] == timedelta(seconds=42)


def test_launch_hands_each_rank_the_phase_budget(tmp_path: Path) -> None:
    job_path = tmp_path / "job.json"
    job_path.write_text(_job().to_json())
    argv = tmp_path / "argv-rank{}.json"
    record = "import json, sys; open(sys.argv[1], 'w').write(json.dumps(sys.argv[2:]))"
    launch(job_path, "collectives", 2, wrapper=lambda rank: [sys.executable, "-c", record, str(argv).format(rank)],
           timeout_s=37.5)
    for rank in range(2):
        command = json.loads(Path(str(argv).format(rank)).read_text())
        assert command[command.index("--timeout-s") + 1] == "37.5"
        assert command[command.index("--rank") + 1] == str(rank)


@pytest.mark.parametrize(("gpu", "expected"), [("H100_SXM", "1"), ("cpu", "8")])
def test_each_gpu_rank_runs_one_omp_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu: str,
                                           expected: str) -> None:
    """As torchrun and upstream nanochat: one OpenMP thread per GPU rank; a CPU node's cores shared out."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    job_path = tmp_path / "job.json"
    job_path.write_text(_job(gpu).to_json())
    seen = tmp_path / "omp-rank{}.txt"
    record = "import os, sys; open(sys.argv[1], 'w').write(os.environ['OMP_NUM_THREADS'])"
    launch(job_path, "collectives", 2, wrapper=lambda rank: [sys.executable, "-c", record, str(seen).format(rank)])
    assert [Path(str(seen).format(rank)).read_text() for rank in range(2)] == [expected, expected]
