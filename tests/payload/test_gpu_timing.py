"""What the GPU measurements time and where they run, checked on CPU with stand-ins for CUDA.

- the timed loops run the collective alone (no ``fill_`` inside the timing, as nccl-tests), and a
  wrong result is still caught by the untimed check;
- ``cuda_timed`` waits for every device it names, and p2p names both ends of each copy (a copy runs
  on the source GPU's stream: waiting on the current device only timed the enqueue);
- the probes and the p2p matrix run in a child process that exits (CUDA contexts and cached memory
  go with it);
- the profile's phase clock opens and closes one NVTX range per phase, in pairs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist

from benchctl.payload.child import run_in_child
from benchctl.payload.comm import collectives, group, p2p
from benchctl.payload.events import EventLog
from benchctl.payload.job import CollectivesConfig, Job
from benchctl.payload.node import preflight, probes
from benchctl.payload.workloads.profile import PHASES, PhaseClock
from tests.payload.child_targets import fail, hang, report_pid


@pytest.fixture
def gloo_group() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _job(gpu: str = "cpu", ops: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")) -> Job:
    return Job(campaign="t", cell="c", attempt=1, token="t", gpu=gpu, count=1, phases=["collectives"],
               collectives=CollectivesConfig(ops=list(ops), min_bytes=8, max_bytes=512, factor=8, warmup_iters=2,
                                             iters=3))


def test_the_timed_loops_run_the_collective_alone(gloo_group: None, monkeypatch: pytest.MonkeyPatch) -> None:
    timing = [False]
    fills: dict[bool, int] = {False: 0, True: 0}

    def perf_counter() -> float:  # the timed region lies between two readings
        timing[0] = not timing[0]
        return time.perf_counter()

    real_fill = torch.Tensor.fill_

    def fill_(self: torch.Tensor, value: Any) -> torch.Tensor:
        fills[timing[0]] += 1
        return real_fill(self, value)

    monkeypatch.setattr(collectives, "time", SimpleNamespace(perf_counter=perf_counter))
    monkeypatch.setattr(probes, "time", SimpleNamespace(perf_counter=perf_counter))
    monkeypatch.setattr(torch.Tensor, "fill_", fill_)
    monkeypatch.setattr(probes, "ALLREDUCE_BYTES", 4096)
    for measure in (collectives.collectives_rank, probes.allreduce_rank):
        fills.update({False: 0, True: 0})
        measure(_job(), 0, 1, None)
        assert fills[False] > 0, "the inputs are filled before the timing"
        assert fills[True] == 0, "fill_ inside the timed loop costs busbw that nccl-tests does not pay"


def test_a_wrong_result_is_still_caught(gloo_group: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = dist.all_reduce

    def off_by_one(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        work = real(tensor, *args, **kwargs)
        if tensor.numel() > 1:  # the data, not the time or the error count
            tensor.add_(1)
        return work

    monkeypatch.setattr(dist, "all_reduce", off_by_one)
    monkeypatch.setattr(probes, "ALLREDUCE_BYTES", 4096)
    (tmp_path / "artifacts" / "facts").mkdir(parents=True)
    with EventLog(tmp_path / "events.jsonl") as log:
        collectives.collectives_rank(_job(ops=("all_reduce", "broadcast")), 0, 1, log)
        probes.allreduce_rank(_job(), 0, 1, log)
    samples = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    wrong = {(s["op"], s["count"]): s["wrong"] for s in samples if s["kind"] == "sample"}
    assert wrong == {("all_reduce", 2): 2, ("all_reduce", 16): 16, ("all_reduce", 128): 128,
                     ("broadcast", 2): 0, ("broadcast", 16): 0, ("broadcast", 128): 0}
    assert json.loads((tmp_path / "artifacts" / "facts" / "allreduce.json").read_text())["wrong"] == 1024


def test_cuda_timed_waits_for_every_device_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    trace: list[Any] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: trace.append(("sync", device)))
    group.cuda_timed(lambda: trace.append("copy"), 3, [2, 1])
    last = max(i for i, entry in enumerate(trace) if entry == "copy")
    assert trace.count("copy") == 4
    assert sorted(d for _, d in trace[last + 1:]) == [1, 2], "both ends, after the last copy"
    first = trace.index("copy", 1)
    assert sorted(d for _, d in trace[1:first]) == [1, 2], "both ends, before the clock starts"


def test_p2p_times_each_copy_on_its_source_and_destination(monkeypatch: pytest.MonkeyPatch) -> None:
    real_empty, real_empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: True)
    monkeypatch.setattr(torch, "empty", lambda *a, device=None, pin_memory=False, **k: real_empty(*a, **k))
    monkeypatch.setattr(torch, "empty_like", lambda t, device=None, **k: real_empty_like(t, **k))
    monkeypatch.setattr(p2p, "COPY_BYTES", 1024)
    timed: list[tuple[int, ...]] = []

    def cuda_timed(fn: Callable[[], object], iters: int, devices: tuple[int, ...] = ()) -> float:
        fn()
        timed.append(tuple(devices))
        return 1e-3

    monkeypatch.setattr(p2p, "cuda_timed", cuda_timed)
    reported: list[Any] = []
    p2p.measure_pairs(reported.append)
    ((gpus, rows),) = reported
    assert gpus == 3 and len(rows) == 12
    pairs = [(s, d) for s in range(3) for d in range(3) if s != d]
    assert timed == [pair for pair in pairs for _ in range(4)], "bandwidth and latency, peer and host, both ends"


@pytest.mark.slow
def test_a_child_process_reports_back_and_is_gone() -> None:
    values, reason = run_in_child(report_pid, ("x",))
    assert reason is None and values[1] == "x"
    assert values[0] != os.getpid()
    with pytest.raises(ProcessLookupError):
        os.kill(values[0], 0)


@pytest.mark.slow
def test_a_hung_child_is_killed_at_the_deadline() -> None:
    started = time.monotonic()
    # The spawned child imports only the standard library (``child_targets``): the deadline leaves
    # it seconds to report before it hangs, even on a loaded 2-core machine.
    values, reason = run_in_child(hang, deadline=started + 4)
    assert (values, reason) == (["started"], "timed out")
    assert time.monotonic() - started < 14


@pytest.mark.slow
def test_an_error_in_the_child_comes_back() -> None:
    assert run_in_child(fail) == (["first"], "ValueError: boom")


@pytest.mark.slow
def test_the_preflight_probes_run_in_a_fresh_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def in_this_process(count: int, injected: dict[str, Any]) -> dict[str, Any]:
        return {"error": "measured in the runner's own process"}

    monkeypatch.setattr(probes, "cuda_init", in_this_process)  # a thread would see this; a child does not
    monkeypatch.setenv("BENCHCTL_FAULTS", json.dumps({"cuda_init": "error"}))
    found, timed_out = preflight.run_probes(_job(), tmp_path / "job.json", tmp_path, time.monotonic() + 60)
    assert timed_out == []
    assert found["cuda_init"]["error"].endswith("(injected by the local provider)")
    assert json.loads((tmp_path / "probes.json").read_text()) == found


@pytest.mark.slow
def test_the_p2p_matrix_is_measured_in_a_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)  # a child does not see this stand-in
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    (tmp_path / "artifacts").mkdir()
    with EventLog(tmp_path / "events.jsonl") as log:
        summary = p2p.run_p2p(replace(_job("H100_SXM"), count=8), tmp_path / "job.json", log)
    assert summary == {"skipped": "0 GPU visible; a pair needs two"}


class FakeEvent:
    def __init__(self, enable_timing: bool) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.t - self.t) * 1000.0


def test_the_phase_clock_brackets_each_phase_in_an_nvtx_range(monkeypatch: pytest.MonkeyPatch) -> None:
    ranges: list[str] = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: ranges.append(f"push {name}"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: ranges.append("pop"))
    clock = PhaseClock(on_gpu=True, enabled=True)
    for _ in range(2):  # two steps: a mark before each phase and one after the last
        for _ in range(len(PHASES) + 1):
            clock.mark()
        assert len(clock.durations()) == len(PHASES)
    one_step = [entry for name in PHASES for entry in (f"push {name.removesuffix('_s')}", "pop")]
    assert ranges == one_step * 2
    clock.mark()
    clock.durations()  # a step cut short still closes its range
    assert ranges[-2:] == ["push fwd_bwd", "pop"]
    for _ in range(len(PHASES) + 3):  # more marks than phases: no range left open, none closed twice
        clock.mark()
    clock.durations()
    assert ranges.count("pop") == sum(entry.startswith("push") for entry in ranges)


def test_no_nvtx_without_a_gpu_or_with_phase_timing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    ranges: list[str] = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: ranges.append(name))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: ranges.append("pop"))
    for clock in (PhaseClock(on_gpu=False, enabled=True), PhaseClock(on_gpu=True, enabled=False)):
        for _ in range(len(PHASES) + 1):
            clock.mark()
        clock.durations()
    assert ranges == []
