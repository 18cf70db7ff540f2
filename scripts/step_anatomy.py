"""Where a training step's time goes: the payload's model + optimizer beside upstream nanochat's, one GPU.

    python scripts/step_anatomy.py --upstream /path/to/nanochat [--depth 12] [--batch 16] [--steps 10]
        [--modes eager compiled] [--budget-s 240] [--out anatomy.json]
    python scripts/step_anatomy.py --upstream tests/fixtures/fake_nanochat --cpu      # dry run

For each mode (eager, then compiled) and side (the payload, then upstream), in this one process and
one after the other (nothing else on the GPU): build the model and optimizer as each builds them
(the payload: ``build_model`` with attention pinned to upstream's SDPA fallback, bf16 autocast, its
``ZeroMuonAdamW`` on a one-rank process group; upstream: ``fidelity_vs_upstream.build_upstream``,
with the payload's attention windows), run warm-up steps, time ``--steps`` steps with CUDA events
split into forward+backward and optimizer, then record two steps under ``torch.profiler`` and
keep the top kernels by GPU time. Prints one table per run; writes ``--out``. Made to find why
``fidelity_vs_upstream.py`` reported a ratio far from 1 (issue 28 item 6).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))


def timed_steps(fwd_bwd: Any, opt: Any, steps: int, warmup: int, cuda: bool) -> dict[str, Any]:
    import torch

    for _ in range(warmup):
        fwd_bwd()
        opt()
    if cuda:
        torch.cuda.synchronize()
    rows = []
    for _ in range(steps):
        if cuda:
            a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            a.record()
            fwd_bwd()
            b.record()
            opt()
            c.record()
            c.synchronize()
            rows.append((a.elapsed_time(b), b.elapsed_time(c)))
        else:
            t0 = time.perf_counter()
            fwd_bwd()
            t1 = time.perf_counter()
            opt()
            rows.append(((t1 - t0) * 1000, (time.perf_counter() - t1) * 1000))
    out: dict[str, Any] = {"fwd_bwd_ms": statistics.median(r[0] for r in rows),
                           "opt_ms": statistics.median(r[1] for r in rows),
                           "step_ms": statistics.median(r[0] + r[1] for r in rows)}
    if cuda:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                fwd_bwd()
                opt()
            torch.cuda.synchronize()
        events = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)
        total = sum(e.device_time_total for e in events) or 1
        out["kernels"] = [{"name": e.key[:90], "ms_per_step": e.device_time_total / 2000, "calls_per_step": e.count / 2,
                           "share": e.device_time_total / total} for e in events[:15]]
        out["max_mem_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def payload_side(depth: int, batch: int, seq: int, vocab: int | None, compiled: bool,
                 cpu: bool) -> tuple[Any, Any, Any]:
    import torch

    from payload.workloads.model import build_model
    from payload.workloads.optim import ZeroMuonAdamW
    from payload.workloads.presets import model_dims

    device = torch.device("cpu" if cpu else "cuda")
    model = build_model(model_dims(f"nanochat-d{depth}", vocab), seq, device, compiled=compiled, attention="sdpa")
    forward = torch.compile(model, dynamic=False) if compiled else model
    optimizer = ZeroMuonAdamW(model, 0, 1, compile=compiled)
    v = model.dims.vocab_size
    x, y = torch.randint(0, v, (batch, seq), device=device), torch.randint(0, v, (batch, seq), device=device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if not cpu else torch.autocast("cpu", enabled=False)

    def fwd_bwd() -> None:
        with autocast:
            loss = forward(x, y)
        loss.backward()

    def opt() -> None:
        optimizer.launch_reductions()
        optimizer.update_and_gather()
        optimizer.finish()

    return model, fwd_bwd, opt


def upstream_side(upstream: Path, depth: int, batch: int, seq: int, vocab: int, compiled: bool,
                  cpu: bool) -> tuple[Any, Any, Any]:
    import torch
    from fidelity_vs_upstream import Shape, build_upstream

    model, optimizer, forward = build_upstream(upstream, Shape(depth, batch, seq, vocab, 1, None, cpu), False,
                                               compiled)
    device = torch.device("cpu" if cpu else "cuda")
    x, y = torch.randint(0, vocab, (batch, seq), device=device), torch.randint(0, vocab, (batch, seq), device=device)

    def fwd_bwd() -> None:
        forward(x, y).backward()

    def opt() -> None:
        optimizer.step()
        model.zero_grad(set_to_none=True)

    return model, fwd_bwd, opt


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--upstream", type=Path, required=True)
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    parser.add_argument("--budget-s", type=float, default=0.0, help="start no run after this many seconds (0: none)")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo" if args.cpu else "nccl", rank=0, world_size=1)
    seq, vocab = (64, 512) if args.cpu else (2048, 32768)
    batch = 2 if args.cpu else args.batch
    started = time.monotonic()
    results = []
    for mode in args.modes:
        for side in ("payload", "upstream"):
            if args.budget_s and time.monotonic() - started > args.budget_s:
                results.append({"mode": mode, "side": side, "skipped": "budget"})
                continue
            compiled = mode == "compiled" and not args.cpu
            t0 = time.monotonic()
            try:
                built = (payload_side(args.depth, batch, seq, vocab if args.cpu else None, compiled, args.cpu)
                         if side == "payload" else
                         upstream_side(args.upstream, args.depth, batch, seq, vocab, compiled, args.cpu))
                fwd_bwd, opt = built[1], built[2]
                if not args.cpu:
                    torch.cuda.reset_peak_memory_stats()
                row = {"mode": mode, "side": side, **timed_steps(fwd_bwd, opt, args.steps, 3, not args.cpu),
                       "wall_s": time.monotonic() - t0}
                built = fwd_bwd = opt = None
            except Exception as e:  # a side that fails is a row with its error; the other still runs
                row = {"mode": mode, "side": side, "error": f"{type(e).__name__}: {str(e)[-800:]}"}
            results.append(row)
            print(f"== {mode} {side}: " + (f"step {row['step_ms']:.1f} ms = fwd+bwd {row['fwd_bwd_ms']:.1f} + "
                                          f"opt {row['opt_ms']:.1f}" if "step_ms" in row else str(row)), flush=True)
            for k in row.get("kernels", []):
                print(f"   {k['ms_per_step']:8.2f} ms {k['calls_per_step']:6.0f}× {k['share']:6.1%}  {k['name']}")
            if not args.cpu:
                torch.cuda.empty_cache()
            if args.out:
                args.out.write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
