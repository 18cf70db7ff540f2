"""Payload step ÷ upstream nanochat's step, on the same GPU, depth, batch, precision and attention.

    python scripts/fidelity_vs_upstream.py --upstream /path/to/nanochat [--depth 12 20]
        [--device-batch-size 16] [--precision bf16 fp8] [--steps 30] [--flex]
        [--warm-gib 70] [--budget-s 360] [--out fidelity.json]
    python scripts/fidelity_vs_upstream.py --upstream tests/fixtures/fake_nanochat --cpu   # dry run

For each depth and precision it times, at world size 1, each in a process of its own:

1. the payload's own profile, as a node runs it (a job.json and ``python -m payload run``: compiled,
   the precision asked, attention **pinned to upstream's kernel** — ``profile.attention``: FA3 where
   upstream's ``nanochat.flash_attention`` loads it, else SDPA with its dense band mask, as upstream
   falls back), reading the median timed step and the ``attention`` and ``precision`` its samples
   recorded;
2. upstream's model and optimizer from the checkout given by ``--upstream`` (put on ``sys.path`` at
   run time, never copied here), built as upstream's ``scripts/base_train.py`` builds them:
   ``GPTConfig`` (model dim = 64·depth rounded up to 128, head dim 128, window pattern SSSL), ``GPT``
   on the meta device, ``to_empty`` + ``init_weights``, fp8 through upstream's own
   ``nanochat.fp8.convert_to_float8_training`` (tensorwise, base_train's module filter) for the fp8
   rows, ``torch.compile(dynamic=False)``, ``setup_optimizer()``, ``PYTORCH_ALLOC_CONF=
   expandable_segments:True``; then warm-up steps, untimed steps until the clocks settle (the
   payload's own rule, ``payload.stats.settled``), and timed steps of ``grad_accum`` micro-steps on
   synthetic tokens with the payload's total batch, each step between two ``synchronize`` calls
   (as base_train times it), the median taken.

``--flex`` adds, last, a payload row per precision at the first depth with the attention the node
allows (compiled flex_attention where no Flash-Attention is installed), divided by the same upstream step.

Compilation takes a minute or more per process. With ``--warm-gib G`` every process first runs
once untimed (one step) to fill torch's on-disk compile caches, several at once while their memory
estimates (``payload.workloads.memory_estimate``) sum to at most G GiB, in the first half of
``--budget-s``; the timed runs then run one at a time with nothing else on the GPU (each row records
how many warm-ups ran beside it: 0). ``--budget-s`` stops starting runs once that many seconds
have passed; a run not warmed by then compiles in its timed run (untimed: its first step).

It prints a table (payload ms, upstream ms, ratio; goal ≤ 1.05) and writes ``--out`` after every
timed run (JSON with the GPU, driver, torch and CUDA versions). ``--cpu`` is a dry run at a tiny
size (depth 2, sequence 64, vocabulary 512, eager, f32) that checks the wiring, not the speed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GOAL = 1.05
TINY = {"sequence_len": 64, "vocab_size": 512, "device_batch_size": 2}
VOCAB = 32768
SETTLE_MIN_S, SETTLE_MAX_S = 5.0, 30.0
"""The payload's settle rule (``payload.workloads.profile``), applied to upstream's steps too."""
MIN_START_S = 40.0
"""A run starts only with this much of ``--budget-s`` left."""


@dataclass
class Shape:
    """What both sides train: depth, micro-batch, sequence, vocabulary, micro-steps per step."""

    depth: int
    batch: int
    seq: int
    vocab: int
    accum: int
    precision: str | None
    cpu: bool


@dataclass
class Run:
    """One process to time: ``kind`` payload (``attention`` pinned, or None: what the node allows) or upstream."""

    kind: str
    shape: Shape
    attention: str | None
    est_gib: float
    warm: str = "pending"
    timed: dict[str, Any] | None = None
    error: str | None = None
    beside: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def label(self) -> str:
        s = self.shape
        return f"{self.kind}-d{s.depth}-{s.precision or 'f32'}-{self.attention or 'auto'}"


def payload_profile(shape: Shape, attention: str | None, warmup: int, steps: int, work: Path,
                    timeout: float | None) -> dict[str, Any]:
    """Run the payload's profile as a node does; its median timed step and what its samples recorded."""
    profile: dict[str, Any] = {"model": f"nanochat-d{shape.depth}", "device_batch_size": shape.batch,
                               "sequence_len": shape.seq, "total_batch_size": shape.batch * shape.seq * shape.accum,
                               "warmup_steps": warmup, "steps": steps}
    if shape.cpu:
        profile["vocab_size"] = shape.vocab
    if shape.precision:
        profile["precision"] = shape.precision
    if attention:
        profile["attention"] = attention
    job = {"campaign": "fidelity", "cell": f"d{shape.depth}", "attempt": 1, "token": "fidelity",
           "gpu": "cpu" if shape.cpu else "gpu", "count": 1, "phases": ["profile"], "done_phases": [],
           "profile": profile}
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.json").write_text(json.dumps(job))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "payload", "run", "job.json"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"the payload's profile failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    events = [json.loads(line) for line in (work / "events.jsonl").read_text().splitlines() if line.strip()]
    samples = [e for e in events if e.get("kind") == "sample" and e.get("phase") == "profile"]
    timed = [e for e in samples if not e.get("warmup")]
    if not timed:
        raise RuntimeError(f"the payload's profile recorded no timed step (see {work})")
    last = timed[-1]
    return {"step_s": statistics.median(e["step_time_s"] for e in timed), "timed_steps": len(timed),
            **{k: last.get(k) for k in ("attention", "precision", "compiled", "grad_accum", "compile_s",
                                        "settle_steps", "max_mem_allocated_gib")}}


def build_upstream(upstream: Path, shape: Shape, fa3: bool, compiled: bool = True) -> tuple[Any, Any, Any]:
    """Upstream's model, optimizer and forward (``compiled``: ``torch.compile``d, never on CPU), set up
    as base_train sets them up, with the payload's attention windows (``presets.window_sizes``: the d26
    record's, a67eba3, half the context on short layers; upstream uses a quarter since a825e63)."""
    sys.path.insert(0, str(upstream))
    sys.path.insert(1, str(REPO))
    import torch
    from nanochat import flash_attention
    from nanochat.gpt import GPT, GPTConfig

    from payload.workloads.presets import window_sizes

    device = torch.device("cpu" if shape.cpu else "cuda")
    flash_attention.USE_FA3 = fa3
    dim = -(-64 * shape.depth // 128) * 128
    config = GPTConfig(sequence_len=shape.seq, vocab_size=shape.vocab, n_layer=shape.depth, n_head=dim // 128,
                       n_kv_head=dim // 128, n_embd=dim, window_pattern="SSSL")
    with torch.device("meta"):
        model = GPT(config)
    if hasattr(model, "window_sizes"):  # the fake checkout of the CPU test has none
        model.window_sizes = [(window, 0) for window in window_sizes(shape.depth, shape.seq)]
    model.to_empty(device=device)
    model.init_weights()
    if shape.precision == "fp8":
        from nanochat.fp8 import Float8LinearConfig, convert_to_float8_training

        def wanted(mod: Any, fqn: str) -> bool:  # base_train's fp8_module_filter
            return (isinstance(mod, torch.nn.Linear) and mod.in_features % 16 == 0 and mod.out_features % 16 == 0
                    and min(mod.in_features, mod.out_features) >= 128)

        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("tensorwise"),
                                   module_filter_fn=wanted)
    optimizer = model.setup_optimizer()
    return model, optimizer, (torch.compile(model, dynamic=False) if compiled and not shape.cpu else model)


def upstream_step(upstream: Path, shape: Shape, fa3: bool, warmup: int, steps: int) -> dict[str, Any]:
    """Median step of upstream's own model + optimizer (``build_upstream``), in this process."""
    import torch

    model, optimizer, forward = build_upstream(upstream, shape, fa3)
    from payload.stats import settled

    device = torch.device("cpu" if shape.cpu else "cuda")
    x = torch.randint(0, shape.vocab, (shape.batch, shape.seq), device=device)
    y = torch.randint(0, shape.vocab, (shape.batch, shape.seq), device=device)
    sync = (lambda: None) if shape.cpu else torch.cuda.synchronize

    def one_step() -> float:
        sync()
        start = time.perf_counter()
        for _ in range(shape.accum):
            loss = forward(x, y) / shape.accum
            loss.backward()
        optimizer.step()
        model.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - start

    first = [one_step() for _ in range(max(warmup, 1))]
    settle: list[float] = []
    while not shape.cpu and not settled(settle, SETTLE_MIN_S, SETTLE_MAX_S):
        settle.append(one_step())
    times = [one_step() for _ in range(steps)]
    return {"step_s": statistics.median(times), "timed_steps": len(times),
            "attention": "flash_attn3" if fa3 else "sdpa", "first_step_s": first[0], "settle_steps": len(settle),
            "max_mem_allocated_gib": None if shape.cpu else torch.cuda.max_memory_allocated() / 2**30}


def upstream_in_process(args: argparse.Namespace, shape: Shape, fa3: bool, warmup: int, steps: int,
                        timeout: float | None) -> dict[str, Any]:
    """``upstream_step`` in a process of its own (this script with ``--one-upstream``)."""
    cmd = [sys.executable, __file__, "--upstream", str(args.upstream), "--one-upstream", json.dumps(
        {"shape": shape.__dict__, "fa3": fa3, "warmup": warmup, "steps": steps})]
    env = {**os.environ, "PYTORCH_ALLOC_CONF": "expandable_segments:True"}  # as base_train sets it
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"upstream's step failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def upstream_has_fa3(upstream: Path, cpu: bool) -> bool:
    """Whether upstream's ``nanochat.flash_attention`` would run FA3 here (it needs the ``kernels`` package)."""
    if cpu or importlib.util.find_spec("kernels") is None:
        return False
    probe = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                            "from nanochat import flash_attention as f; print(int(f.USE_FA3))", str(upstream)],
                           capture_output=True, text=True, timeout=300)
    return probe.stdout.strip().endswith("1")


def versions(cpu: bool) -> dict[str, Any]:
    import torch

    found: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if not cpu:
        found["gpu"] = torch.cuda.get_device_name(0)
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)
        found["driver"] = smi.stdout.strip() or None
    return found


def plan_runs(args: argparse.Namespace, fa3: bool) -> list[Run]:
    """Every run, in the order they are worth: the pinned pairs depth by depth, then the ``--flex`` rows
    (warm-ups start greedily in this order wherever their memory fits)."""
    from payload.workloads.memory_estimate import estimate

    seq, vocab, batch = ((TINY["sequence_len"], TINY["vocab_size"], TINY["device_batch_size"]) if args.cpu
                         else (args.sequence_len, VOCAB, args.device_batch_size))
    pinned = "flash_attn3" if fa3 else "sdpa"
    runs, flex = [], []
    for depth in [2] if args.cpu else args.depth:
        for precision in [None] if args.cpu else args.precision:
            shape = Shape(depth, batch, seq, vocab, args.grad_accum, precision, args.cpu)
            gib = estimate(f"nanochat-d{depth}", seq, batch, 1, vocab, compiled=not args.cpu).total_gib
            runs += [Run("payload", shape, pinned, gib), Run("upstream", shape, None, gib)]
            if args.flex and not args.cpu and depth == args.depth[0]:
                flex.append(Run("payload", shape, None, gib))
    return runs + flex


def execute(args: argparse.Namespace, run: Run, warm: bool, work: Path, fa3: bool, deadline: float) -> dict[str, Any]:
    warmup, steps = (1, 1) if warm else (args.warmup, args.steps)
    timeout = max(deadline - time.monotonic(), 1.0) if args.budget_s else None
    if run.kind == "payload":
        return payload_profile(run.shape, run.attention, warmup, steps, work / (run.label + ("-warm" if warm else "")),
                               timeout)
    return upstream_in_process(args, run.shape, fa3, warmup, steps, timeout)


def schedule(args: argparse.Namespace, runs: list[Run], fa3: bool, work: Path, write: Any) -> None:
    """Warm-ups side by side within ``--warm-gib`` (only in the first half of ``--budget-s``), then timed runs
    one at a time in priority order until the budget; a timed run never shares the GPU with a warm-up (each
    warm-up runs steps on it: a first run that overlapped them timed the payload 2× slow)."""
    started = time.monotonic()
    deadline = started + (args.budget_s or 10**9)
    lock = threading.Lock()
    warming: list[Run] = []
    timing: list[Run] = []
    for run in runs:
        if run.est_gib > args.warm_gib:  # no room to warm it beside anything: its timed run compiles
            run.warm = "skipped"

    def warm(run: Run) -> None:
        try:
            execute(args, run, True, work, fa3, deadline)
            run.warm = "done"
        except Exception as e:  # whatever failed, the timed run still runs (cold)
            run.warm = "failed"
            run.error = f"warm-up: {str(e)[-300:]}"
        with lock:
            warming.remove(run)

    def timed(run: Run) -> None:
        try:
            run.timed = execute(args, run, False, work, fa3, deadline)
        except Exception as e:  # a failed run is a row with its error, never a hung schedule
            run.error = f"{type(e).__name__}: {str(e)[-600:]}"
        with lock:
            timing.remove(run)
        run.done.set()
        write()

    threads = []
    warm_until = started + (args.budget_s / 2 if args.budget_s else 10**9)
    while True:
        now = time.monotonic()
        with lock:
            left = deadline - now
            if args.warm_gib and not timing and now < warm_until:
                used = sum(r.est_gib for r in warming)
                for run in runs:
                    if run.warm == "pending" and used + run.est_gib <= args.warm_gib:
                        run.warm = "running"
                        warming.append(run)
                        used += run.est_gib
                        threads.append(threading.Thread(target=warm, args=(run,), daemon=True))
                        threads[-1].start()
            if not timing and not warming and left > MIN_START_S:
                ready = [r for r in runs if not r.done.is_set()]
                if ready:
                    run = ready[0]
                    run.beside = len(warming)
                    timing.append(run)
                    threads.append(threading.Thread(target=timed, args=(run,), daemon=True))
                    threads[-1].start()
            busy = bool(warming or timing)
            waiting = any(not r.done.is_set() for r in runs)
        if not busy and (not waiting or deadline - time.monotonic() <= MIN_START_S):
            break
        time.sleep(0.2)
    for t in threads:
        t.join(timeout=1)


def rows_of(runs: list[Run]) -> list[dict[str, Any]]:
    """Payload rows with the upstream run of their shape; ratio where both were timed."""
    rows = []
    upstream = {id(r.shape): r for r in runs if r.kind == "upstream"}
    for run in runs:
        if run.kind != "payload":
            continue
        s, ours = run.shape, run.timed or {}
        theirs = (upstream.get(id(s)) or Run("upstream", s, None, 0)).timed or {}
        ratio = ours["step_s"] / theirs["step_s"] if ours and theirs else None
        rows.append({"depth": s.depth, "device_batch_size": s.batch, "sequence_len": s.seq, "grad_accum": s.accum,
                     "precision": ours.get("precision", s.precision), "attention": ours.get("attention", run.attention),
                     "upstream_attention": theirs.get("attention"), "pinned": run.attention is not None,
                     "compiled": ours.get("compiled"),
                     "payload_step_ms": ours["step_s"] * 1000 if ours else None,
                     "upstream_step_ms": theirs["step_s"] * 1000 if theirs else None, "ratio": ratio,
                     "timed_steps": ours.get("timed_steps"), "payload": ours, "upstream": theirs,
                     "warm_beside_payload": run.beside,
                     "warm_beside_upstream": (upstream.get(id(s)) or run).beside,
                     "errors": [e for e in (run.error, (upstream.get(id(s)) or run).error) if e]})
    return rows


def one_upstream(args: argparse.Namespace) -> int:
    spec = json.loads(args.one_upstream)
    result = upstream_step(args.upstream, Shape(**spec["shape"]), spec["fa3"], spec["warmup"], spec["steps"])
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--upstream", type=Path, required=True, help="an upstream nanochat checkout (its root)")
    parser.add_argument("--depth", type=int, nargs="+", default=[12, 20])
    parser.add_argument("--device-batch-size", type=int, default=16)
    parser.add_argument("--sequence-len", type=int, default=2048)
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-steps per step (total batch follows)")
    parser.add_argument("--precision", nargs="+", default=["bf16", "fp8"], choices=["bf16", "fp8"])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--flex", action="store_true",
                        help="also time the payload with the attention the node allows (first depth)")
    parser.add_argument("--warm-gib", type=float, default=0.0,
                        help="fill the compile caches first, runs side by side within this many GiB (0: no)")
    parser.add_argument("--budget-s", type=float, default=0.0, help="start no run after this many seconds (0: none)")
    parser.add_argument("--cpu", action="store_true", help="dry run on CPU at a tiny size (checks the wiring)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--one-upstream", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not (args.upstream / "nanochat" / "gpt.py").is_file():
        print(f"error: {args.upstream} is no nanochat checkout (no nanochat/gpt.py): pass its root", file=sys.stderr)
        return 2
    if args.one_upstream:
        return one_upstream(args)
    sys.path.insert(0, str(REPO))
    fa3 = upstream_has_fa3(args.upstream, args.cpu)
    runs = plan_runs(args, fa3)
    found = versions(args.cpu)

    def write() -> None:
        if args.out:
            args.out.write_text(json.dumps({"dry_run": args.cpu, **found, "upstream_fa3": fa3,
                                            "warm_gib": args.warm_gib, "rows": rows_of(runs)}, indent=1))

    with tempfile.TemporaryDirectory(prefix="fidelity-") as tmp:
        schedule(args, runs, fa3, Path(tmp), write)
    write()
    print(f"{'depth':>5} {'batch':>5} {'precision':>9} {'attention':>11} {'payload ms':>10} {'upstream ms':>11} "
          f"{'ratio':>6}")
    for r in rows_of(runs):
        ratio = f"{r['ratio']:>6.3f}" if r["ratio"] else f"{'–':>6}"
        note = "" if not r["ratio"] or r["ratio"] <= GOAL or args.cpu or not r["pinned"] else f"  (goal ≤ {GOAL})"
        note += "" if r["pinned"] else f"  (vs upstream's {r['upstream_attention']})"
        print(f"{r['depth']:>5} {r['device_batch_size']:>5} {r['precision']!s:>9} {r['attention']!s:>11} "
              f"{r['payload_step_ms'] or 0:>10.1f} {r['upstream_step_ms'] or 0:>11.1f} {ratio}{note}")
        for e in r["errors"]:
            print(f"      error: {e[-300:]}")
    return 0 if all(r["ratio"] for r in rows_of(runs)) else 1


if __name__ == "__main__":
    sys.exit(main())
