"""Compile caches between attempts (issue 28 item 8): a node's announced cache comes home while the
node runs, so the next attempt of a preempted cell, and the campaign's other cells of the same key,
are shipped it (job.json names it); a cell of another key is not; what a node sends that is not the
cache of the job it was shipped (another job's fields, another size or hash, an odd path) is refused
and never shipped. The memory provider's nodes write what the payload writes
(``benchctl.payload.workloads.compile_cache``: ``compile-cache/<key>.bin`` and its manifest, an ``artifact``
event named ``compile-cache`` after the warm-up)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchctl.engine import compile_caches
from benchctl.engine.scheduler import run_campaign
from benchctl.payload.job import Job
from benchctl.payload.workloads import compile_cache as cc
from tests import memory_campaign
from tests.fakes.memory_provider import Events, MemoryProvider, Script, payload_events
from tests.memory_campaign import KEY, memory_run, offer

NODE = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.13.0", "cuda": "12.8", "triton": "3.5.0", "python": "3.11.9",
        "precision": "fp8", "attention": "flash_attn3"}
DATA = b"torch's cache bytes " * 100
SPOT_KEY = "local:cpux2:spot"
ONE_GPU_KEY = "local:cpux1:on-demand"


def saving(script: Script, mangle: Callable[[dict[str, Any]], None] = lambda about: None,
           data: bytes = DATA, path: str | None = None) -> Script:
    """``script``'s node saves a compile cache of the job it is shipped after its warm-up
    (``mangle`` edits the manifest it writes; ``path`` replaces the path it announces)."""
    def events(job: dict[str, Any]) -> Events:
        about = cc.manifest(cc.job_fields(Job.from_dict(job)), NODE, data)
        mangle(about)
        key = cc.key_of({"job": cc.job_fields(Job.from_dict(job)), "node": NODE})
        script.files.update({f"compile-cache/{key}.bin": data, f"compile-cache/{key}.json": json.dumps(about).encode()})
        batches = payload_events(job)
        warm = next(i for i, batch in enumerate(batches) if any(e.get("warmup") for e in batch))
        batches[warm].append({"t": 0.0, "kind": "artifact", "phase": "profile", "name": cc.NAME,
                              "path": path or f"compile-cache/{key}.bin", "bytes": len(data)})
        return batches

    script.events = events
    return script


def key_of_job(job: dict[str, Any]) -> str:
    return cc.key_of({"job": cc.job_fields(Job.from_dict(job)), "node": NODE})


def test_the_next_attempt_of_a_preempted_cell_is_shipped_the_cache_its_node_saved(tmp_path: Path) -> None:
    # polls 1..4: preflight start/end, profile start, warm-up (the cache announced); gone at poll 8
    provider = MemoryProvider([offer()], [saving(Script(preempt_at_poll=8)), Script()])
    run = memory_run(tmp_path, provider, steps=6)
    assert run_campaign(run.ctx, concurrency=1).complete
    first, second = run.attempts()
    assert (first.outcome, second.outcome) == ("preempted", "done")
    gone, fresh = provider.launched()
    assert gone.job is not None and gone.job["compile_caches"] == [], "nothing to ship yet"
    key = key_of_job(gone.job)
    stored = tmp_path / "artifacts" / compile_caches.STORE_DIR / f"{key}.bin"
    assert stored.read_bytes() == DATA
    assert (tmp_path / "artifacts" / KEY / "1" / "compile-cache" / f"{key}.bin").read_bytes() == DATA
    assert fresh.job is not None and fresh.job["compile_caches"] == [f"{cc.SHIPPED_DIR}/{key}.bin"]
    assert fresh.shipped_files[f"{cc.SHIPPED_DIR}/{key}.bin"] == DATA
    manifest = json.loads(fresh.shipped_files[f"{cc.SHIPPED_DIR}/{key}.json"])
    assert manifest["key"] == key and manifest["node"] == NODE and manifest["bytes"] == len(DATA)
    assert any("compile cache came home" in line for line in run.logged)


def test_cells_of_the_same_key_share_the_cache_and_a_cell_of_another_key_is_not_shipped_it(tmp_path: Path) -> None:
    matrix = ("  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 2.0}\n"
              "  - {provider: local, gpu: cpu, count: 2, market: spot, price_usd_per_hour: 1.0}\n"
              "  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 1.0}\n")
    offers = [offer(), offer("host-b", market="spot"), offer("host-c", count=1)]
    provider = MemoryProvider(offers, [saving(Script()), Script()])
    run = memory_run(tmp_path, provider, matrix=matrix)
    assert run_campaign(run.ctx, concurrency=1).complete
    by_cell = {node.job["cell"]: node for node in provider.launched() if node.job is not None}
    assert set(by_cell) == {KEY, SPOT_KEY, ONE_GPU_KEY}
    saver = by_cell[KEY]
    assert saver.job is not None and saver.job["compile_caches"] == []
    same, other = by_cell[SPOT_KEY], by_cell[ONE_GPU_KEY]
    assert same.job is not None and same.job["compile_caches"] == [f"{cc.SHIPPED_DIR}/{key_of_job(saver.job)}.bin"]
    assert other.job is not None and other.job["compile_caches"] == [], "another world size: another key"
    assert not any(name.startswith(cc.SHIPPED_DIR) for name in other.shipped), "nothing of another key shipped"


def test_a_profile_that_does_not_compile_is_shipped_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_campaign, "TINY_CAMPAIGN",
                        memory_campaign.TINY_CAMPAIGN.replace("warmup_steps: 1,", "warmup_steps: 1, compile: false,"))
    provider = MemoryProvider([offer()], [saving(Script(preempt_at_poll=8)), Script()])
    run = memory_run(tmp_path, provider, steps=6)
    assert run_campaign(run.ctx, concurrency=1).complete
    gone, fresh = provider.launched()
    assert gone.job is not None and gone.job["profile"]["compile"] is False
    assert fresh.job is not None and fresh.job["compile_caches"] == []


def refused(tmp_path: Path, script: Script) -> tuple[list[str], list[str]]:
    """Run a preempted cell whose first node sends ``script``'s cache: (what the next node was
    shipped, the log's lines about the cache)."""
    provider = MemoryProvider([offer()], [script, Script()])
    run = memory_run(tmp_path, provider, steps=6)
    assert run_campaign(run.ctx, concurrency=1).complete
    fresh = provider.launched()[-1]
    assert fresh.job is not None
    assert not (tmp_path / "artifacts" / compile_caches.STORE_DIR).exists() or \
        not list((tmp_path / "artifacts" / compile_caches.STORE_DIR).iterdir())
    return fresh.job["compile_caches"], [line for line in run.logged if "compile cache" in line]


def test_a_cache_claiming_another_jobs_fields_is_refused_and_never_shipped(tmp_path: Path) -> None:
    def other_world(about: dict[str, Any]) -> None:
        about["job"]["count"] = 8
    shipped, logged = refused(tmp_path, saving(Script(preempt_at_poll=8), other_world))
    assert shipped == [] and "not those of the job shipped to the node" in logged[0]


def test_a_cache_whose_bytes_are_not_its_manifests_is_refused(tmp_path: Path) -> None:
    def other_hash(about: dict[str, Any]) -> None:
        about["sha256"] = "0" * 64
    shipped, logged = refused(tmp_path, saving(Script(preempt_at_poll=8), other_hash))
    assert shipped == [] and "not the size and sha256 its manifest says" in logged[0]


def test_a_cache_over_the_bound_is_refused_before_it_is_fetched(tmp_path: Path) -> None:
    def huge(about: dict[str, Any]) -> None:
        about["bytes"] = cc.MAX_BYTES + 1
    shipped, logged = refused(tmp_path, saving(Script(preempt_at_poll=8), huge))
    assert shipped == [] and f"not between 1 and {cc.MAX_BYTES:,} bytes" in logged[0]


def test_a_cache_announced_at_another_path_is_refused(tmp_path: Path) -> None:
    shipped, logged = refused(tmp_path, saving(Script(preempt_at_poll=8), path="../../../etc/passwd"))
    assert shipped == [] and "is not compile-cache/<key>.bin" in logged[0]
