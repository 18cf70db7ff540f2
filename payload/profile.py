"""The profile phase: train the preset for warm-up + timed steps and time every optimizer step.

Per step (one optimizer step = ``total_batch_size`` tokens, gradient accumulation derived from
device batch, sequence length and world size), rank 0 emits a ``sample`` event:
``{phase: "profile", step, warmup, step_time_s, loss, tokens}``. Timing brackets the whole step
with a barrier (and a CUDA synchronize on GPU), so it is the slowest rank's step.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from payload.events import EventLog
from payload.job import Job, ProfileConfig
from payload.stats import median, percentile


def grad_accum_steps(cfg: ProfileConfig, world_size: int) -> int:
    """Micro-steps per optimizer step; raises ValueError when the batch does not divide evenly."""
    per_micro = cfg.device_batch_size * cfg.sequence_len * world_size
    if cfg.total_batch_size % per_micro:
        raise ValueError(
            f"total_batch_size {cfg.total_batch_size} is not a multiple of device_batch_size × sequence_len × "
            f"world size = {cfg.device_batch_size} × {cfg.sequence_len} × {world_size} = {per_micro}"
        )
    return cfg.total_batch_size // per_micro


def profile_rank(job: Job, rank: int, world_size: int, events: EventLog | None) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from payload.model import GPT
    from payload.presets import model_dims

    cfg = job.profile
    if cfg is None:
        raise ValueError("job.json has no profile section")
    accum = grad_accum_steps(cfg, world_size)
    on_gpu = job.gpu.lower() != "cpu"
    device = torch.device("cuda", rank) if on_gpu else torch.device("cpu")
    torch.manual_seed(cfg.seed)
    dims = model_dims(cfg.model, cfg.vocab_size)
    model = GPT(dims, cfg.sequence_len).to(device)
    ddp = DistributedDataParallel(model, device_ids=[rank] if on_gpu else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    generator = torch.Generator().manual_seed(cfg.seed + rank)
    shape = (cfg.device_batch_size, cfg.sequence_len + 1)
    batch = torch.randint(0, dims.vocab_size, shape, generator=generator).to(device)
    inputs, targets = batch[:, :-1], batch[:, 1:]
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if on_gpu else contextlib.nullcontext()

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize(device)
        dist.barrier()

    for step in range(cfg.warmup_steps + cfg.steps):
        sync()
        start = time.perf_counter()
        total_loss = torch.zeros((), device=device)
        for micro in range(accum):
            no_sync = ddp.no_sync() if micro < accum - 1 else contextlib.nullcontext()
            with no_sync, autocast:
                loss = ddp(inputs, targets) / accum
            loss.backward()
            total_loss += loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        elapsed = time.perf_counter() - start
        if events is not None:
            events.emit("sample", phase="profile", step=step, warmup=step < cfg.warmup_steps,
                        step_time_s=elapsed, loss=float(total_loss), tokens=cfg.total_batch_size)


def summarize(events_path: Path) -> dict[str, Any]:
    """Summary of the timed steps recorded in an events file (for the phase_end event)."""
    import json

    times = []
    for line in events_path.read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == "sample" and event.get("phase") == "profile" and not event.get("warmup"):
            times.append(event["step_time_s"])
    if not times:
        return {"timed_steps": 0}
    return {"timed_steps": len(times), "step_time_median_s": median(times),
            "step_time_p10_s": percentile(times, 10), "step_time_p90_s": percentile(times, 90)}
