"""Fidelity to upstream nanochat, checked on CPU: compile in the warm-up, bf16 Newton–Schulz on owned
matrices only, the sliding-window pattern, GC frozen before timing, and what each sample records."""

from __future__ import annotations

import gc
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

from benchctl.payload.job import Job, ProfileConfig
from benchctl.payload.workloads import model as model_module
from benchctl.payload.workloads import optim, profile
from benchctl.payload.workloads.attention import Kernel
from benchctl.payload.workloads.model import attend, build_model
from benchctl.payload.workloads.presets import model_dims, window_sizes

TINY = ProfileConfig(model="nanochat-d2", vocab_size=64, device_batch_size=1, sequence_len=16, total_batch_size=16,
                     warmup_steps=2, steps=2)


@pytest.fixture
def gloo_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """One gloo rank, run in a folder of its own: the profile writes what it saves (the compile cache)
    beside its events, the current folder when it has no events file."""
    monkeypatch.chdir(tmp_path)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class RecordingEvents:
    """Stands in for EventLog: appends each sample to a shared log of what happened, in order."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.samples: list[dict[str, Any]] = []

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        if kind != "sample":  # e.g. the compile cache's artifact event
            return fields
        self.log.append(("timed" if not fields.get("warmup") else "warmup", fields["step"]))
        self.samples.append(fields)
        return fields


def _job(**profile_overrides: Any) -> Job:
    cfg = ProfileConfig(**{**TINY.__dict__, **profile_overrides})
    return Job(campaign="t", cell="c", attempt=1, token="t", gpu="cpu", count=1, phases=["profile"], profile=cfg)


# -- 1. torch.compile ------------------------------------------------------------------------------

@pytest.mark.slow
def test_compile_requested_on_cpu_is_recorded_false_with_the_reason(gloo_group: None,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def no_compile(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("torch.compile must not run on CPU")

    monkeypatch.setattr(torch, "compile", no_compile)
    events = RecordingEvents([])
    profile.profile_rank(_job(compile=True), 0, 1, events)  # type: ignore[arg-type]
    assert events.samples and all(s["compiled"] is False for s in events.samples)
    assert all("CPU" in s["compile_note"] for s in events.samples)
    assert all(s["precision"] == "f32" and s["attention"] == "sdpa" for s in events.samples)


def test_compile_off_in_the_campaign_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile.toolchain, "blockers", lambda facts: [])  # a node that can compile (test_toolchain)
    assert profile.compile_choice(TINY, on_gpu=True) == (True, None)
    off = ProfileConfig(**{**TINY.__dict__, "compile": False})
    assert profile.compile_choice(off, on_gpu=True) == (False, "compile: false in the campaign")


@pytest.mark.slow
@pytest.mark.parametrize("warmup_steps", [0, 2])
def test_compilation_happens_in_the_warm_up_never_in_a_timed_step(
        gloo_group: None, monkeypatch: pytest.MonkeyPatch, warmup_steps: int) -> None:
    log: list[Any] = []
    compiled: list[Any] = []

    def fake_compile(fn: Callable[..., Any], **kwargs: Any) -> Callable[..., Any]:
        compiled.append(fn)
        first = [True]

        def wrapper(*args: Any, **kw: Any) -> Any:
            if first[0]:  # where a real torch.compile would compile
                log.append(("compile", getattr(fn, "__name__", type(fn).__name__)))
                first[0] = False
            return fn(*args, **kw)

        return wrapper

    monkeypatch.setattr(profile, "compile_choice", lambda cfg, on_gpu: (True, None))
    monkeypatch.setattr(torch, "compile", fake_compile)
    events = RecordingEvents(log)
    profile.profile_rank(_job(warmup_steps=warmup_steps), 0, 1, events)  # type: ignore[arg-type]

    assert len(compiled) == 3 and compiled[1:] == [optim.adamw_step, optim.muon_step]  # model, then the updates
    assert isinstance(compiled[0], torch.nn.Module)
    first_timed = log.index(("timed", max(warmup_steps, 1)))
    compiles = [i for i, entry in enumerate(log) if entry[0] == "compile"]
    assert len(compiles) == 3 and max(compiles) < first_timed
    assert log[0][0] == "compile" and ("warmup", 0) in log[:first_timed]  # at least one untimed step
    timed = [s for s in events.samples if not s["warmup"]]
    assert len(timed) == TINY.steps and [s["timed_index"] for s in timed] == [0, 1]
    assert all(s["compiled"] is True and "compile_note" not in s for s in events.samples)


# -- 2. Newton–Schulz ------------------------------------------------------------------------------

class MatmulDtypes(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in (torch.Tensor.__matmul__, torch.matmul, torch.Tensor.matmul, torch.bmm):
            self.dtypes += [a.dtype for a in args if isinstance(a, torch.Tensor)]
        return func(*args, **(kwargs or {}))


def test_newton_schulz_multiplies_in_bf16() -> None:
    g = torch.randn(3, 8, 24)
    with MatmulDtypes() as spy:
        out = optim.newton_schulz(g)
    assert spy.dtypes and set(spy.dtypes) == {torch.bfloat16}
    assert out.dtype == torch.bfloat16 and out.shape == g.shape
    singular = torch.linalg.svdvals(out.float())  # still an approximate orthogonalisation
    assert singular.min() > 0.5 and singular.max() < 1.5


class _Done:
    def wait(self) -> None:
        pass


@pytest.mark.parametrize("rank", [0, 1])
def test_each_rank_orthogonalises_only_the_matrices_it_owns(monkeypatch: pytest.MonkeyPatch, rank: int) -> None:
    """World of 2 with the collectives stood in for: rank r must run Newton–Schulz on its chunk only."""
    world = 2

    def reduce_scatter(output: torch.Tensor, full: torch.Tensor) -> _Done:
        output.copy_(full.chunk(world)[rank])
        return _Done()

    def all_gather(output: torch.Tensor, local: torch.Tensor) -> _Done:
        output.view(world, *local.shape)[rank].copy_(local)
        return _Done()

    orthogonalised: list[tuple[int, ...]] = []
    real = optim.newton_schulz

    def spy(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
        orthogonalised.append(tuple(g.shape))
        return real(g, steps)

    monkeypatch.setattr(optim, "_reduce_scatter", reduce_scatter)
    monkeypatch.setattr(optim, "_all_gather", all_gather)
    monkeypatch.setattr(optim.dist, "all_reduce", lambda *args, **kwargs: _Done())
    monkeypatch.setattr(optim, "newton_schulz", spy)
    model = build_model(model_dims("nanochat-d2", 64), 16, "cpu")
    model(torch.randint(0, 64, (1, 16)), torch.randint(0, 64, (1, 16))).backward()
    optimizer = optim.ZeroMuonAdamW(model, rank, world)
    optimizer.step()
    # d2 Muon groups: 8 × (128, 128), 2 × (512, 128), 2 × (128, 512), 1 × ve_gate (1, 32): chunks of 4, 1, 1, 1
    expected = {0: [(4, 128, 128), (1, 128, 512), (1, 512, 128), (1, 1, 32)],
                1: [(4, 128, 128), (1, 128, 512), (1, 512, 128)]}  # rank 1 owns no ve_gate: only padding
    assert sorted(orthogonalised) == sorted(expected[rank])


# -- 3. sliding-window attention -------------------------------------------------------------------

def test_the_window_pattern_is_upstreams() -> None:
    short, full = 1024, 2048
    assert window_sizes(8, 2048) == [short, short, short, full] * 2  # SSSL tiled
    assert window_sizes(6, 2048) == [short, short, short, full, short, full]  # the last layer is always L
    assert window_sizes(1, 2048) == [full]
    d26 = build_model(model_dims("nanochat-d26"), 2048, "meta")
    assert d26.window_sizes.count(short) == 19 and d26.window_sizes[-1] == full


def _reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """Softmax attention written out, (B, T, H, D), with token i seeing tokens i-window … i."""
    t = q.size(1)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(q.size(-1))
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    scores = scores.masked_fill(~((j <= i) & (i - j <= window)), float("-inf"))
    return torch.einsum("bhij,bjhd->bihd", scores.softmax(-1), v)


@pytest.mark.parametrize("window", [0, 3, 9, 64])
def test_windowed_attention_equals_masked_attention(window: int) -> None:
    q, k, v = (torch.randn(2, 10, 2, 8, generator=torch.Generator().manual_seed(s)) for s in range(3))
    torch.testing.assert_close(attend(q, k, v, window), _reference_attention(q, k, v, window))


def test_the_model_runs_each_layer_at_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, str]] = []
    real = model_module.attend

    def spy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, kernel: Kernel) -> torch.Tensor:
        seen.append((window, kernel.name))
        return real(q, k, v, window, kernel)

    monkeypatch.setattr(model_module, "attend", spy)
    model = build_model(model_dims("nanochat-d4", 64), 16, "cpu")
    model(torch.randint(0, 64, (1, 16)), torch.randint(0, 64, (1, 16)))
    assert seen == [(8, "sdpa"), (8, "sdpa"), (8, "sdpa"), (16, "sdpa")]


# -- 4. GC frozen after the warm-up ----------------------------------------------------------------

def test_gc_is_collected_frozen_and_disabled_after_warm_up_before_timing(
        gloo_group: None, monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[Any] = []
    for name in ("collect", "freeze", "disable"):
        real = getattr(gc, name)
        monkeypatch.setattr(gc, name, lambda *a, _n=name, _r=real, **k: (log.append(("gc", _n)), _r(*a, **k))[1])
    events = RecordingEvents(log)
    assert gc.isenabled()
    profile.profile_rank(_job(), 0, 1, events)  # type: ignore[arg-type]
    assert log == [("warmup", 0), ("warmup", 1), ("gc", "collect"), ("gc", "freeze"), ("gc", "disable"),
                   ("timed", 2), ("timed", 3)]
    assert gc.isenabled() and gc.get_freeze_count() == 0  # restored for whatever runs next in the process
