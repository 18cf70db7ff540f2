"""The profile phase: train the preset with the ZeRO-2 Muon+AdamW optimizer and time every step.

One optimizer step = ``total_batch_size`` tokens = device batch × sequence length × world size ×
``grad_accum`` micro-steps, as upstream: each micro-step's loss is scaled by 1/grad_accum and its
gradients add up; the optimizer's collectives run once per step (there is no DDP hook to skip on
earlier micro-steps). Rank 0 emits one ``sample`` event per step:
``{phase: "profile", step, warmup, step_time_s, fwd_bwd_s, opt_phase1_s, opt_phase2_s,
opt_phase3_s, tokens, tokens_per_s, loss, mfu, timed_index, grad_accum, precision, compiled,
attention, host_data, mem_est_gib, max_mem_allocated_gib}``: ``precision`` is the matmul precision
(``fp8`` where the GPU has fp8 tensor cores, as the record, unless the campaign says ``precision: bf16``;
else ``bf16`` autocast, with TF32 for any f32 matmul, as upstream; ``f32`` on CPU;
``payload.workloads.fp8.choose_precision``, ``precision_note`` says why it is not the one asked for),
``compiled`` whether the model and the optimizer's update functions ran ``torch.compile``d (on GPU unless
``compile: false``; never on CPU, nor on a node without the toolchain Triton needs: ``compile_note`` says why),
``attention`` the attention kernel (``payload.workloads.model``),
``host_data`` where the batches came from (``payload.workloads.host_data``: ``tokenize`` makes each
micro-step's batch on the host right after the previous backward is launched, inside the step),
``mem_est_gib`` the per-GPU estimate (``payload.workloads.memory_estimate``) and
``max_mem_allocated_gib`` ``torch.cuda.max_memory_allocated`` so far (None on CPU); the phase
summary carries them too, so a result says how it was measured.
``timed_index`` numbers the timed (non-warmup) steps across the cell's attempts: a node that
replaces a preempted one warms up, then measures only the steps not yet recorded
(``job.profile_steps_done`` on), so no index repeats. The step is bracketed by a barrier (and a CUDA
synchronize on GPU), so it is the slowest rank's step. Inside it, phase boundaries are CUDA events
on GPU and ``perf_counter`` on CPU, with no extra synchronisation. ``phase_timing: false`` records
only the step time (to measure what the phase timing costs). MFU (GPU only) is against the GPU's
bf16 dense peak (``payload.node.gpu_models``).

Spot notice: when the runner watches for one (``payload.spot_notice``), the ranks agree after each
step, outside its timing, whether the notice has come (one scalar all_reduce) and all stop there:
every step recorded is whole, and the next attempt measures the rest.

Warm-up: compilation happens on the first call, so a compiled run always warms up for at least one
step (``warmup_steps: 0`` becomes 1) and no timed step pays for it. On GPU, unrecorded steps follow
the warm-up until the clocks settle (``SETTLE_MIN_S``; every timed sample says ``settle_steps`` and
``settle_s``); the summary records the drift of the timed steps (``payload.stats.drift``). After the
warm-up, as upstream, the garbage collector is run, the surviving objects frozen and collection disabled, so no GC pause
lands in a timed step (re-enabled when the phase ends).

Compile cache (compiled runs; ``payload.workloads.compile_cache``): before the first step each node's local
rank 0 loads the shipped cache whose key is the node's own (the others wait at a barrier); after the
warm-up rank 0 saves what it compiled, unless it loaded a cache, and announces it (``artifact``,
name ``compile-cache``). Samples and summary record ``compile_cache`` (``loaded``, ``not loaded`` with
``compile_cache_note`` saying why, ``none shipped``), ``compile_cache_saved`` and ``compile_s``, the
first step's seconds, compilation included.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import time
from pathlib import Path
from typing import Any

from ..events import EventLog, read_samples
from ..job import Job, ProfileConfig
from ..node import toolchain
from ..spot_notice import notice_file
from ..stats import drift, median, percentile, settled
from . import compile_cache

PHASES = ("fwd_bwd_s", "opt_phase1_s", "opt_phase2_s", "opt_phase3_s")
SETTLE_MIN_S = 5.0
SETTLE_MAX_S = 30.0
"""On GPU, after the warm-up, unrecorded steps run until the clocks settle (``payload.stats.settled``:
at least ``SETTLE_MIN_S`` seconds of steps, then until the median of the last 5 is within 1 % of the 5
before, at most ``SETTLE_MAX_S``). Compiled steps drift up over their first seconds (H200, d26 at
batch 8: 305 ms at first, ≈ 320 ms from the fourth step; docs/measurements/2026-11-25-gpu-h200.md)."""
FALLBACK = "eager fallback"
"""How a ``compile_note`` starts when the campaign asked for ``torch.compile`` and the node could not:
its step times are eager, not comparable with compiled ones."""


def compile_choice(cfg: ProfileConfig, on_gpu: bool) -> tuple[bool, str | None]:
    """Whether to ``torch.compile``, and why not when not. A node that cannot build Triton's
    launchers (``payload.node.toolchain``: no C compiler, no Python.h) runs eager instead of failing at
    the first step, and the note says so (it starts with ``FALLBACK``)."""
    if not cfg.compile:
        return False, "compile: false in the campaign"
    if not on_gpu:
        return False, "not compiled on CPU (torch.compile is used on GPU only)"
    missing = toolchain.blockers(toolchain.toolchain(os.environ, compile_wanted=True))
    if missing:
        return False, f"{FALLBACK}: torch.compile cannot build Triton kernels on this node: {'; '.join(missing)}"
    return True, None


def grad_accum_steps(cfg: ProfileConfig, world_size: int) -> int:
    """Micro-steps per optimizer step; raises ValueError when the batch does not divide evenly."""
    per_micro = cfg.device_batch_size * cfg.sequence_len * world_size
    if cfg.total_batch_size % per_micro:
        raise ValueError(
            f"total_batch_size {cfg.total_batch_size} is not a multiple of device_batch_size × sequence_len × "
            f"world size = {cfg.device_batch_size} × {cfg.sequence_len} × {world_size} = {per_micro}"
        )
    return cfg.total_batch_size // per_micro


class PhaseClock:
    """Marks phase boundaries: CUDA events on GPU (read after the step's synchronize), else
    perf_counter. On GPU each mark also closes the previous NVTX range and opens the next phase's
    (``names``, in order), so an ``nsys`` capture shows the phases the step's samples name. The
    marks sit on the current (compute) stream: a phase's time is when the compute stream reached
    its boundaries, not when collectives running on NCCL's streams finished."""

    def __init__(self, on_gpu: bool, enabled: bool, names: tuple[str, ...] = PHASES) -> None:
        self.on_gpu, self.enabled, self.names = on_gpu, enabled, names
        self._marks: list[Any] = []

    def mark(self) -> None:
        if not self.enabled:
            return
        if self.on_gpu:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append(event)
            if 1 < len(self._marks) <= len(self.names) + 1:  # the previous mark opened a range
                torch.cuda.nvtx.range_pop()
            if len(self._marks) <= len(self.names):
                torch.cuda.nvtx.range_push(self.names[len(self._marks) - 1].removesuffix("_s"))
        else:
            self._marks.append(time.perf_counter())

    def durations(self) -> list[float]:
        """Seconds between consecutive marks; resets the clock (closing a phase's NVTX range still open)."""
        marks, self._marks = self._marks, []
        if self.on_gpu:
            if 0 < len(marks) <= len(self.names):
                import torch

                torch.cuda.nvtx.range_pop()
            return [a.elapsed_time(b) / 1000.0 for a, b in itertools.pairwise(marks)]
        return [b - a for a, b in itertools.pairwise(marks)]


def profile_rank(job: Job, rank: int, world_size: int, events: EventLog | None) -> None:
    import torch
    import torch.distributed as dist

    from ..node.gpu_models import bf16_peak
    from .fp8 import choose_precision
    from .host_data import batch_source
    from .memory_estimate import estimate
    from .model import build_model
    from .optim import ZeroMuonAdamW
    from .presets import model_dims

    cfg = job.profile
    if cfg is None:
        raise ValueError("job.json has no profile section")
    remaining = max(0, cfg.steps - job.profile_steps_done)
    if remaining == 0:
        return  # earlier attempts recorded every timed step
    accum = grad_accum_steps(cfg, world_size)
    on_gpu = job.gpu.lower() != "cpu"
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")  # local GPU
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("high")
    compiled, compile_note = compile_choice(cfg, on_gpu)
    precision, precision_note = choose_precision(cfg.precision, device)
    warmup_steps = max(cfg.warmup_steps, 1) if compiled else cfg.warmup_steps
    model = build_model(model_dims(cfg.model, cfg.vocab_size), cfg.sequence_len, device, seed=cfg.seed,
                        compiled=compiled, fp8=precision == "fp8", attention=cfg.attention)
    forward = torch.compile(model, dynamic=False) if compiled else model
    optimizer = ZeroMuonAdamW(model, rank, world_size, compile=compiled)
    batches = batch_source(cfg, rank, model.dims.vocab_size, device)
    inputs, targets = batches.next()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if on_gpu else contextlib.nullcontext()
    peak = bf16_peak(torch.cuda.get_device_name(device)) if on_gpu else None
    flops_per_step = model.flops_per_token(cfg.sequence_len) * cfg.total_batch_size
    clock = PhaseClock(on_gpu, cfg.phase_timing)
    recorded = {"grad_accum": accum, "precision": precision, "compiled": compiled,
                "attention": model.attention, "host_data": cfg.host_data,
                **({"compile_note": compile_note} if compile_note else {}),
                **({"precision_note": precision_note} if precision_note else {}),
                "mem_est_gib": round(estimate(cfg.model, cfg.sequence_len, cfg.device_batch_size, world_size,
                                              cfg.vocab_size, compiled=compiled).total_gib, 2)}

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize(device)
        dist.barrier()

    def noticed() -> bool:
        """Every rank's answer to "has the spot notice come?", the same on all (an all_reduce)."""
        flag = torch.tensor([1.0 if watched is not None and watched.exists() else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)

    watched = notice_file()
    gc_was_enabled = gc.isenabled()

    def one_step() -> tuple[float, dict[str, float], float]:
        """(seconds, the phases' seconds, loss) of one optimizer step."""
        nonlocal inputs, targets
        sync()
        start = time.perf_counter()
        clock.mark()
        total_loss = torch.zeros((), device=device)
        for _ in range(accum):
            with autocast:
                loss = forward(inputs, targets) / accum
            loss.backward()
            total_loss += loss.detach()
            inputs, targets = batches.next()  # as upstream: made while the device runs the backward
        clock.mark()
        optimizer.launch_reductions()
        clock.mark()
        optimizer.update_and_gather()
        clock.mark()
        optimizer.finish()
        clock.mark()
        sync()
        return time.perf_counter() - start, dict(zip(PHASES, clock.durations(), strict=False)), float(total_loss)

    def emit(step: int, timed_index: int | None, elapsed: float, phases: dict[str, float], loss: float,
             **extra: Any) -> None:
        if events is not None:
            events.emit("sample", phase="profile", step=step, warmup=timed_index is None, timed_index=timed_index,
                        step_time_s=elapsed, **phases, loss=loss, tokens=cfg.total_batch_size,
                        tokens_per_s=cfg.total_batch_size / elapsed,
                        mfu=flops_per_step / elapsed / (peak * world_size) if peak else None, **recorded, **extra,
                        max_mem_allocated_gib=round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
                        if on_gpu else None)

    def agreed(mine: bool) -> bool:
        """True on every rank when it is true on any (an all_reduce), so all run the same steps."""
        flag = torch.tensor([1.0 if mine else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)

    attempt_dir = Path(getattr(events, "path", "events.jsonl")).parent  # else the runner's cwd, where ranks start
    cache_fields = (compile_cache.job_fields(job), compile_cache.node_fields(device, precision, model.attention))
    if compiled:  # each node's local rank 0 loads a shipped cache before anything compiles; the others wait
        if rank % job.count == 0:
            loaded, why = compile_cache.load(attempt_dir, job.compile_caches, *cache_fields)
            recorded.update(compile_cache=loaded, **({"compile_cache_note": why} if why else {}))
        sync()
    try:
        for step in range(warmup_steps):
            measured = one_step()
            if step == 0 and compiled:
                recorded["compile_s"] = round(measured[0], 3)  # the first step: compilation (or cache) included
            emit(step, None, *measured)
            if watched is not None and noticed():
                return
        if compiled and rank == 0 and recorded.get("compile_cache") != "loaded":
            save_compile_cache(attempt_dir, cache_fields, recorded, events)
        freeze_gc()
        settle: list[float] = []  # unrecorded steps until the clocks settle (GPU only; SETTLE_MIN_S)
        while on_gpu and agreed(not settled(settle, SETTLE_MIN_S, SETTLE_MAX_S)):
            settle.append(one_step()[0])
            if watched is not None and noticed():
                return
        first = warmup_steps + len(settle)
        for offset in range(remaining):
            emit(first + offset, job.profile_steps_done + offset, *one_step(), settle_steps=len(settle),
                 settle_s=round(sum(settle), 3))
            if watched is not None and noticed():
                break
    finally:
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()


def save_compile_cache(attempt_dir: Path, fields: tuple[dict[str, Any], dict[str, Any]], recorded: dict[str, Any],
                       events: EventLog | None) -> None:
    """Save what rank 0 compiled (``payload.workloads.compile_cache``), announce it, and record the outcome."""
    path, note = compile_cache.save(attempt_dir, *fields)
    recorded["compile_cache_saved"] = note
    if path is not None and events is not None:
        events.emit("artifact", phase="profile", name=compile_cache.NAME, path=path,
                    bytes=(attempt_dir / path).stat().st_size)


def freeze_gc() -> None:
    """As upstream after its first step: collect the set-up's garbage, freeze what survives, stop collecting."""
    gc.collect()
    gc.freeze()
    gc.disable()


def summarize(events_path: Path) -> dict[str, Any]:
    """Summary of the timed steps recorded in an events file (for the phase_end event)."""
    samples = [event for event in read_samples(events_path, "profile") if not event.get("warmup")]
    if not samples:
        return {"timed_steps": 0}
    times = [s["step_time_s"] for s in sorted(samples, key=lambda s: s.get("timed_index") or 0)]
    summary: dict[str, Any] = {"timed_steps": len(times), "step_time_median_s": median(times),
                               "step_time_p10_s": percentile(times, 10), "step_time_p90_s": percentile(times, 90),
                               **(drift(times) or {})}
    for name in PHASES:
        values = [s[name] for s in samples if s.get(name) is not None]
        if values:
            summary[f"{name.removesuffix('_s')}_median_s"] = median(values)
    mfus = [s["mfu"] for s in samples if s.get("mfu") is not None]
    if mfus:
        summary["mfu_median"] = median(mfus)
    for name in ("grad_accum", "precision", "compiled", "compile_note", "compile_s", "compile_cache",
                 "compile_cache_note", "compile_cache_saved", "attention", "host_data", "mem_est_gib",
                 "settle_steps", "settle_s"):
        if name in samples[-1]:
            summary[name] = samples[-1][name]
    peaks = [s["max_mem_allocated_gib"] for s in samples if s.get("max_mem_allocated_gib") is not None]
    summary["max_mem_allocated_gib"] = max(peaks) if peaks else None
    return summary
