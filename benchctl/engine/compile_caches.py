"""Compile caches: brought home from the node that saved one, shipped to later attempts (issue 28 item 8).

A compiled profile's rank 0 saves torch's portable compile cache after its warm-up and announces
it (``benchctl.payload.workloads.compile_cache``). Contract on this side:

- ``bring_home``, called by the attempt driver as soon as the announcement is read (a preempted
  node's cache still serves the next attempt): the node is untrusted. Its manifest is read bounded
  (``MAX_MANIFEST_BYTES``); its path must be ``compile-cache/<key>.bin``; its ``job`` fields must
  be exactly the fields of the job this controller shipped, and its key the hash of those and its
  ``node`` fields (scalars only); the file must be at most ``MAX_BYTES``, of the size and sha256
  the manifest says. Then it is kept in the attempt's local directory (its artifact row hashes it)
  and in the campaign's store, ``<artifacts>/compile-cache/<key>.bin`` with the manifest this
  controller wrote from the checked fields. Anything else raises ``CacheRefused`` with the reason.
- ``for_job``: the stored caches whose ``job_key`` equals the job's (the same GPU as the cells name
  it, nodes, ranks per node, model shapes, precision asked), newest first, at most ``MAX_SHIPPED``.
  The node loads only the one whose full key (its GPU's name, torch, CUDA, Triton, Python, the
  precision and attention it chose) is its own: a cache never crosses torch versions or GPU models.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchctl.engine.artifact_records import sha256_of
from benchctl.payload.job import Job
from benchctl.payload.workloads.compile_cache import (
    KEY,
    MAX_BYTES,
    MAX_MANIFEST_BYTES,
    NAME,
    SAVED_DIR,
    SHIPPED_DIR,
    job_fields,
    key_of,
    wanted,
)
from benchctl.provisioners.base import Transport
from benchctl.provisioners.transfer_deadline import Deadline

STORE_DIR = "compile-cache"
"""The campaign's caches, under its artifacts directory (cell directories are named by cell keys,
which hold a colon: never this name)."""
MAX_SHIPPED = 2
"""Caches shipped with one attempt at most (one per torch/GPU/attention combination seen, newest first)."""
FETCH_S = 300.0
"""How long bringing one cache home may take."""
_SHA256 = re.compile(r"[0-9a-f]{64}")


class CacheRefused(ValueError):
    """A node's compile cache that is not kept, and why."""


def announced(event: dict[str, Any]) -> bool:
    """``event`` announces a saved compile cache."""
    return event.get("kind") == "artifact" and event.get("name") == NAME


def store_dir(artifacts_dir: Path) -> Path:
    return artifacts_dir / STORE_DIR


def bring_home(transport: Transport, remote_dir: str, event: dict[str, Any], job: Job, local: Path,
               store: Path, deadline: Deadline) -> Path:
    """Check and fetch the cache ``event`` announces into ``local`` (the attempt's directory, made
    by the caller) and ``store``; its stored path. Raises ``CacheRefused``, or what the transport raises."""
    path = event.get("path")
    match = re.fullmatch(rf"{SAVED_DIR}/({KEY.pattern})\.bin", path) if isinstance(path, str) else None
    if match is None:
        raise CacheRefused(f"its path {str(path)[:80]!r} is not {SAVED_DIR}/<key>.bin")
    key = match.group(1)
    raw = transport.read_from(f"{remote_dir}/{SAVED_DIR}/{key}.json", 0, timeout=deadline,
                              limit=MAX_MANIFEST_BYTES + 1)
    about = checked_manifest(raw, key, job)
    here = local / SAVED_DIR
    here.mkdir(mode=0o700, exist_ok=True)
    transport.get(f"{remote_dir}/{SAVED_DIR}/{key}.bin", str(here), timeout=deadline)
    got = here / f"{key}.bin"
    if got.is_symlink() or not got.is_file():
        raise CacheRefused(f"{key}.bin did not come home as a file")
    if got.stat().st_size != about["bytes"] or sha256_of(got) != about["sha256"]:
        got.unlink()
        raise CacheRefused(f"{key}.bin is not the size and sha256 its manifest says")
    text = json.dumps(about, sort_keys=True)
    (here / f"{key}.json").write_text(text)
    store.mkdir(mode=0o700, parents=True, exist_ok=True)
    kept = store / f"{key}.bin"
    _place(lambda temporary: shutil.copyfile(got, temporary), kept)
    _place(lambda temporary: temporary.write_text(text), kept.with_suffix(".json"))  # last: listed once whole
    return kept


def checked_manifest(raw: bytes, key: str, job: Job) -> dict[str, Any]:
    """The node's manifest of cache ``key``, rebuilt from its checked fields; ``CacheRefused`` otherwise."""
    if len(raw) > MAX_MANIFEST_BYTES:
        raise CacheRefused(f"its manifest is over {MAX_MANIFEST_BYTES:,} bytes")
    try:
        about = json.loads(raw)
    except (ValueError, RecursionError):
        raise CacheRefused("its manifest is not JSON") from None
    if not isinstance(about, dict):
        raise CacheRefused("its manifest is not a JSON object")
    mine = job_fields(job)
    if about.get("job") != mine:
        raise CacheRefused("its manifest's job fields are not those of the job shipped to the node")
    node = about.get("node")
    if not isinstance(node, dict) or not all(isinstance(v, str | None) and len(str(v)) <= 200 for v in node.values()):
        raise CacheRefused("its manifest's node fields are not short strings")
    if about.get("key") != key or key_of({"job": mine, "node": node}) != key:
        raise CacheRefused("its key is not the hash of its manifest's fields")
    size, sha = about.get("bytes"), about.get("sha256")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_BYTES:
        raise CacheRefused(f"its size {str(size)[:30]} is not between 1 and {MAX_BYTES:,} bytes")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise CacheRefused("its manifest's sha256 is not a sha256")
    return {"format": 1, "key": key, "job_key": key_of(mine), "job": mine, "node": node, "bytes": size, "sha256": sha}


def for_job(store: Path, job: Job) -> list[Path]:
    """The stored caches (``.bin`` paths) to ship with ``job``: its ``job_key``'s, newest first,
    ``MAX_SHIPPED`` at most."""
    if not store.is_dir():
        return []
    wanted = key_of(job_fields(job))
    found = []
    for about_path in store.glob("*.json"):
        try:
            if about_path.stat().st_size > MAX_MANIFEST_BYTES:
                continue
            about = json.loads(about_path.read_text())
            binary = about_path.with_suffix(".bin")
            if isinstance(about, dict) and about.get("job_key") == wanted and binary.is_file():
                found.append((binary.stat().st_mtime, binary))
        except (OSError, ValueError):
            continue
    return [path for _, path in sorted(found, reverse=True)[:MAX_SHIPPED]]


def ship(store: Path, job: Job, stage: Path) -> Job:
    """``job`` naming the caches ``for_job`` finds (none unless its profile may compile), copied
    with their manifests into ``stage``'s ``SHIPPED_DIR``."""
    caches = for_job(store, job) if wanted(job) else []
    if not caches:
        return job
    (stage / SHIPPED_DIR).mkdir()
    for cache in caches:
        for path in (cache, cache.with_suffix(".json")):
            shutil.copyfile(path, stage / SHIPPED_DIR / path.name)
    return replace(job, compile_caches=[f"{SHIPPED_DIR}/{cache.name}" for cache in caches])


def _place(write: Callable[[Path], object], path: Path) -> None:
    """Make ``path`` whole (``write`` fills a temporary file, renamed over it)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(temporary)
    os.replace(temporary, path)
