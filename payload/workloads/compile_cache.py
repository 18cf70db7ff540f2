"""torch's portable compile cache, saved after a compiled profile's warm-up and loaded by later attempts.

Compiling the model and the optimizer's updates takes 61–93 s of every attempt on an H200
(docs/measurements/2026-11-25-gpu-h200.md), again after every preemption. torch serializes what it
compiled in a process (``torch.compiler.save_cache_artifacts()`` → ``(bytes, CacheInfo)`` or None)
and writes such bytes into the local caches of another process (``load_cache_artifacts``), whose
``torch.compile`` then finds its graphs and kernels there (torch/compiler/__init__.py and
torch/compiler/_cache.py in torch 2.13: the inductor, AOTAutograd, autotune and PGO caches).

Contract:

- A cache is two files: ``<key>.bin`` (torch's bytes) and ``<key>.json`` (the manifest: ``key``,
  ``job_key``, the ``job`` and ``node`` fields they hash, ``bytes``, ``sha256``). The **key** hashes
  what the controller knows before the node runs (``job_fields``: GPU as the cell names it, nodes,
  ranks per node, model, device batch, sequence length, vocabulary, the precision asked; its hash is
  ``job_key``) and what only the node knows (``node_fields``: the GPU's name, torch, CUDA, Triton and
  Python versions, the precision and attention kernel chosen). A cache is never loaded under another
  key: not across torch versions, GPU models or shapes.
- Rank 0 saves after the compiled warm-up (``save``, into ``SAVED_DIR`` of the attempt directory,
  beside ``artifacts/`` so the final collection does not bring it home twice) unless it loaded one;
  the runner's events announce it (``artifact``, name ``NAME``); the controller brings it home at once
  (``benchctl.engine.compile_caches``), so a preempted attempt's cache serves the next.
- Each node's local rank 0 loads, before anything compiles, the first cache job.json names
  (``Job.compile_caches``) whose manifest key equals its own (``load``): at most ``MAX_BYTES``, its
  sha256 as the manifest says, else it is refused with the reason and the profile compiles as
  without one. The bytes are pickled code the producing node's torch wrote: a node that loads one
  runs what another node of the same campaign compiled.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
from pathlib import Path
from typing import Any

NAME = "compile-cache"
"""The ``artifact`` event's name for a saved cache."""
SAVED_DIR = "compile-cache"
"""Where rank 0 saves, relative to the attempt directory."""
SHIPPED_DIR = "shipped-compile-cache"
"""Where the controller ships caches, relative to the attempt directory."""
MAX_BYTES = 512 * 1024**2
"""The largest cache saved, brought home or loaded."""
MAX_MANIFEST_BYTES = 64 * 1024
KEY = re.compile(r"[0-9a-f]{24}")
"""What a key looks like (it names files: nothing else passes)."""


def job_fields(job: Any) -> dict[str, Any]:
    """What the controller knows of the compiled graphs before the node runs (``job``: a ``payload.job.Job``)."""
    p = job.profile
    return {"gpu": str(job.gpu).lower(), "nodes": job.nodes, "count": job.count, "model": p.model,
            "device_batch_size": p.device_batch_size, "sequence_len": p.sequence_len, "vocab_size": p.vocab_size,
            "precision_asked": p.precision}


def node_fields(device: Any, precision: str, attention: str) -> dict[str, Any]:
    """What only the node knows: its GPU, its torch/CUDA/Triton/Python, the precision and attention chosen."""
    from importlib import metadata

    import torch

    try:  # the installed distribution's version: the payload imports nothing beyond the stdlib and torch
        triton_version: str | None = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton_version = None
    return {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton_version,
            "python": platform.python_version(), "precision": precision, "attention": attention}


def key_of(fields: dict[str, Any]) -> str:
    """A hash of ``fields`` (JSON with sorted keys)."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:24]


def wanted(job: Any) -> bool:
    """The job's profile may ``torch.compile`` (``compile`` on, the profile still to run): a cache is worth shipping."""
    return job.profile is not None and job.profile.compile and "profile" in job.pending_phases()


def manifest(job: dict[str, Any], node: dict[str, Any], data: bytes) -> dict[str, Any]:
    return {"format": 1, "key": key_of({"job": job, "node": node}), "job_key": key_of(job), "job": job,
            "node": node, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def save(attempt_dir: Path, job: dict[str, Any], node: dict[str, Any]) -> tuple[str | None, str]:
    """Save what this process compiled: (its path relative to ``attempt_dir``, a note), or (None, why not)."""
    import torch

    try:
        saved = torch.compiler.save_cache_artifacts()
    except Exception as exc:  # torch's own serialization: never fail the profile for it
        return None, f"not saved: {type(exc).__name__}: {exc}"
    if saved is None:
        return None, "not saved: torch recorded nothing to save"
    data = saved[0]
    if len(data) > MAX_BYTES:
        return None, f"not saved: {len(data):,} bytes, over {MAX_BYTES:,}"
    about = manifest(job, node, data)
    where = attempt_dir / SAVED_DIR
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{about['key']}.bin").write_bytes(data)
    (where / f"{about['key']}.json").write_text(json.dumps(about, sort_keys=True))
    return f"{SAVED_DIR}/{about['key']}.bin", f"saved {len(data):,} bytes"


def load(attempt_dir: Path, shipped: list[str], job: dict[str, Any], node: dict[str, Any]) -> tuple[str, str | None]:
    """Load the first of ``shipped`` (paths relative to ``attempt_dir``) whose key is this node's:
    ("loaded", note), ("not loaded", why) or ("none shipped", None). Never raises."""
    if not shipped:
        return "none shipped", None
    mine = key_of({"job": job, "node": node})
    reasons = []
    for name in shipped:
        try:
            why = _load_one(attempt_dir / name, mine)
        except Exception as exc:  # a broken file, or torch failing to write its caches
            why = f"{type(exc).__name__}: {exc}"
        if why is None:
            return "loaded", f"{name}"
        reasons.append(f"{name}: {why}")
    return "not loaded", "; ".join(reasons)


def _load_one(path: Path, mine: str) -> str | None:
    """None once loaded, else why not."""
    about_path = path.with_suffix(".json")
    if about_path.stat().st_size > MAX_MANIFEST_BYTES:
        return f"manifest over {MAX_MANIFEST_BYTES:,} bytes"
    about = json.loads(about_path.read_text())
    if not isinstance(about, dict) or about.get("key") != mine:
        return f"key {about.get('key') if isinstance(about, dict) else None!r} is not this node's {mine}"
    with path.open("rb") as handle:
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        return f"over {MAX_BYTES:,} bytes"
    if hashlib.sha256(data).hexdigest() != about.get("sha256"):
        return "its sha256 is not the manifest's (corrupt or changed)"
    import torch

    if torch.compiler.load_cache_artifacts(data) is None:
        return "torch could not read it"
    return None
