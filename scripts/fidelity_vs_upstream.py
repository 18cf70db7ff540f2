"""Payload step ÷ upstream nanochat's step, on the same GPU, depth, batch, precision and attention.

    python scripts/fidelity_vs_upstream.py --upstream /path/to/nanochat [--depth 12 20]
        [--device-batch-size 16] [--precision bf16 fp8] [--steps 30] [--out fidelity.json]
    python scripts/fidelity_vs_upstream.py --upstream tests/fixtures/fake_nanochat --cpu   # dry run

For each depth and precision it runs, at world size 1:

1. the payload's own profile, as a node runs it (a job.json and ``python -m payload run``: compiled,
   the campaign's precision, the attention the node allows), and reads its median timed step and
   the ``attention`` and ``precision`` its samples recorded;
2. upstream's model and optimizer from the checkout given by ``--upstream`` (put on ``sys.path`` at
   run time, never copied here), built as upstream's ``scripts/base_train.py`` builds them:
   ``GPTConfig`` (model dim = 64·depth rounded up to 128, head dim 128, window pattern SSSL), ``GPT``
   on the meta device, ``to_empty`` + ``init_weights``, fp8 through upstream's own
   ``nanochat.fp8.convert_to_float8_training`` (tensorwise, upstream's module filter) when the
   payload ran fp8, ``torch.compile(dynamic=False)``, ``setup_optimizer()``; attention forced to
   the payload's backend (``nanochat.flash_attention.USE_FA3``); then warm-up and timed steps of
   ``grad_accum`` micro-steps on synthetic tokens with the payload's total batch, each step between
   two ``synchronize`` calls, the median taken as the payload takes it.

It prints a table (payload ms, upstream ms, ratio; goal ≤ 1.05) and writes ``--out`` (JSON with
the GPU, driver, torch and CUDA versions). ``--cpu`` is a dry run at a tiny size (depth 2,
sequence 64, vocabulary 512, eager, f32) that checks the wiring, not the speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GOAL = 1.05
TINY = {"sequence_len": 64, "vocab_size": 512, "device_batch_size": 2}


def payload_profile(depth: int, batch: int, seq: int, vocab: int | None, total: int, precision: str | None,
                    warmup: int, steps: int, cpu: bool, work: Path) -> dict[str, Any]:
    """Run the payload's profile as a node does; its summary and its last timed sample."""
    profile: dict[str, Any] = {"model": f"nanochat-d{depth}", "device_batch_size": batch, "sequence_len": seq,
                               "total_batch_size": total, "warmup_steps": warmup, "steps": steps}
    if vocab:
        profile["vocab_size"] = vocab
    if precision and not cpu:
        profile["precision"] = precision
    job = {"campaign": "fidelity", "cell": f"d{depth}", "attempt": 1, "token": "fidelity",
           "gpu": "cpu" if cpu else "gpu", "count": 1, "phases": ["profile"], "done_phases": [], "profile": profile}
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "payload", "run", "job.json"], cwd=work, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the payload's profile failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    events = [json.loads(line) for line in (work / "events.jsonl").read_text().splitlines() if line.strip()]
    timed = [e for e in events if e.get("kind") == "sample" and e.get("phase") == "profile" and not e.get("warmup")]
    if not timed:
        raise SystemExit(f"the payload's profile recorded no timed step (see {work})")
    return {"step_s": statistics.median(e["step_time_s"] for e in timed), "attention": timed[-1].get("attention"),
            "precision": timed[-1].get("precision"), "compiled": timed[-1].get("compiled"),
            "grad_accum": timed[-1].get("grad_accum", 1), "timed_steps": len(timed)}


def upstream_step(upstream: Path, depth: int, batch: int, seq: int, vocab: int, accum: int, measured: dict[str, Any],
                  warmup: int, steps: int, cpu: bool) -> float:
    """Median step of upstream's own model + optimizer, set up as the payload's run was."""
    sys.path.insert(0, str(upstream))
    import torch
    from nanochat import flash_attention
    from nanochat.gpt import GPT, GPTConfig

    device = torch.device("cpu" if cpu else "cuda")
    flash_attention.USE_FA3 = measured["attention"] == "flash_attn3"  # upstream: FA3 or SDPA
    dim = -(-64 * depth // 128) * 128
    config = GPTConfig(sequence_len=seq, vocab_size=vocab, n_layer=depth, n_head=dim // 128, n_kv_head=dim // 128,
                       n_embd=dim, window_pattern="SSSL")
    with torch.device("meta"):
        model = GPT(config)
    model.to_empty(device=device)
    model.init_weights()
    if measured["precision"] == "fp8":
        from nanochat.fp8 import Float8LinearConfig, convert_to_float8_training

        def wanted(mod: Any, fqn: str) -> bool:  # upstream's filter in scripts/base_train.py
            return (isinstance(mod, torch.nn.Linear) and mod.in_features % 16 == 0 and mod.out_features % 16 == 0
                    and min(mod.in_features, mod.out_features) >= 128)

        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"),
                                   module_filter_fn=wanted)
    optimizer = model.setup_optimizer()
    forward = torch.compile(model, dynamic=False) if measured["compiled"] else model
    x = torch.randint(0, vocab, (batch, seq), device=device)
    y = torch.randint(0, vocab, (batch, seq), device=device)
    sync = (lambda: None) if cpu else torch.cuda.synchronize
    times = []
    for step in range(warmup + steps):
        sync()
        start = time.perf_counter()
        for _ in range(accum):
            loss = forward(x, y) / accum
            loss.backward()
        optimizer.step()
        model.zero_grad(set_to_none=True)
        sync()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def versions(cpu: bool) -> dict[str, Any]:
    import torch

    found: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if not cpu:
        found["gpu"] = torch.cuda.get_device_name(0)
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)
        found["driver"] = smi.stdout.strip() or None
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", type=Path, required=True, help="an upstream nanochat checkout (its root)")
    parser.add_argument("--depth", type=int, nargs="+", default=[12, 20])
    parser.add_argument("--device-batch-size", type=int, default=16)
    parser.add_argument("--sequence-len", type=int, default=2048)
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-steps per step (total batch follows)")
    parser.add_argument("--precision", nargs="+", default=["bf16", "fp8"], choices=["bf16", "fp8"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--cpu", action="store_true", help="dry run on CPU at a tiny size (checks the wiring)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not (args.upstream / "nanochat" / "gpt.py").is_file():
        print(f"error: {args.upstream} is no nanochat checkout (no nanochat/gpt.py): pass its root", file=sys.stderr)
        return 2
    seq, vocab, batch = ((TINY["sequence_len"], TINY["vocab_size"], TINY["device_batch_size"]) if args.cpu
                         else (args.sequence_len, 32768, args.device_batch_size))
    depths = [2] if args.cpu else args.depth
    precisions = [None] if args.cpu else args.precision
    rows = []
    with tempfile.TemporaryDirectory(prefix="fidelity-") as tmp:
        for depth in depths:
            for precision in precisions:
                total = batch * seq * args.grad_accum
                ours = payload_profile(depth, batch, seq, vocab if args.cpu else None, total, precision, args.warmup,
                                       args.steps, args.cpu, Path(tmp) / f"d{depth}-{precision}")
                theirs = upstream_step(args.upstream, depth, batch, seq, vocab, ours["grad_accum"], ours, args.warmup,
                                       args.steps, args.cpu)
                rows.append({"depth": depth, "device_batch_size": batch, "sequence_len": seq,
                             "grad_accum": ours["grad_accum"], "precision": ours["precision"],
                             "attention": ours["attention"], "compiled": ours["compiled"],
                             "payload_step_ms": ours["step_s"] * 1000, "upstream_step_ms": theirs * 1000,
                             "ratio": ours["step_s"] / theirs, "timed_steps": ours["timed_steps"]})
    print(f"{'depth':>5} {'batch':>5} {'precision':>9} {'attention':>11} {'payload ms':>10} {'upstream ms':>11} "
          f"{'ratio':>6}")
    for r in rows:
        print(f"{r['depth']:>5} {r['device_batch_size']:>5} {r['precision']!s:>9} {r['attention']!s:>11} "
              f"{r['payload_step_ms']:>10.1f} {r['upstream_step_ms']:>11.1f} {r['ratio']:>6.3f}"
              + ("" if r["ratio"] <= GOAL or args.cpu else f"  (goal ≤ {GOAL})"))
    if args.out:
        args.out.write_text(json.dumps({"dry_run": args.cpu, **versions(args.cpu), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
