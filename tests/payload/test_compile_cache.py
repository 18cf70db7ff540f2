"""The compile cache on the node (issue 28 item 8): a compiled profile saves torch's portable cache
after its warm-up and announces it; a later run that is shipped it loads it before compiling; a
cache under another key, a corrupt one or one over the size bound is refused with the reason and
the profile compiles as without one.

What torch compiles here is a tiny function on CPU (inductor with this machine's C compiler): the
profile's own model is compiled on GPU only, so the profile runs eager with ``torch.compile``
passed through, and what it saves and loads is torch's real cache of that function
(``torch.compiler.save_cache_artifacts`` / ``load_cache_artifacts``, torch/compiler/__init__.py)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.compiler._cache import CacheArtifactManager

from benchctl.payload.events import EventLog
from benchctl.payload.job import Job, ProfileConfig
from benchctl.payload.node import toolchain
from benchctl.payload.workloads import compile_cache as cc
from benchctl.payload.workloads import profile

CFG = ProfileConfig(model="nanochat-d2", vocab_size=64, device_batch_size=1, sequence_len=16, total_batch_size=16,
                    warmup_steps=1, steps=2)


@pytest.fixture(autouse=True)
def fresh_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A C compiler, an empty inductor cache directory, no compiled graph and no recorded artifact."""
    missing = toolchain.blockers(toolchain.toolchain(os.environ, compile_wanted=True))
    if missing:
        pytest.skip(f"torch.compile needs a C compiler here: {'; '.join(missing)}")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-1"))
    torch._dynamo.reset()
    CacheArtifactManager.clear()
    yield
    torch._dynamo.reset()
    CacheArtifactManager.clear()


@pytest.fixture
def gloo_group() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def tiny(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() * 2 + 1).cumsum(0)


def compile_tiny() -> dict[str, int]:
    """Compile and run ``tiny``; the inductor cache counters of that compilation."""
    from torch._dynamo.utils import counters

    counters.clear()
    torch.compile(tiny, dynamic=False)(torch.arange(8.0))
    return dict(counters["inductor"])


def new_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """As a fresh node: an empty inductor cache directory and nothing compiled in memory."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / f"inductor-{n}"))
    torch._dynamo.reset()
    CacheArtifactManager.clear()


def job(**changes: Any) -> Job:
    return Job(campaign="t", cell="c", attempt=1, token="t", gpu="cpu", count=1, phases=["profile"], profile=CFG,
               **changes)


def run_profile(attempt_dir: Path, the_job: Job, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], list]:
    """The profile as compiled (its own model run eager on CPU), after ``tiny`` was compiled in the
    same process unless a cache was shipped: (its summary, its artifact events)."""
    monkeypatch.setattr(profile, "compile_choice", lambda cfg, on_gpu: (True, None))
    monkeypatch.setattr(torch, "compile", lambda fn, **_: fn)  # the model and optimizer: eager on CPU
    attempt_dir.mkdir(exist_ok=True)
    with EventLog(attempt_dir / "events.jsonl") as events:
        profile.profile_rank(the_job, 0, 1, events)
    lines = [json.loads(line) for line in (attempt_dir / "events.jsonl").read_text().splitlines()]
    return profile.summarize(attempt_dir / "events.jsonl"), [e for e in lines if e["kind"] == "artifact"]


def fields(**node: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return cc.job_fields(job()), {**cc.node_fields(torch.device("cpu"), "f32", "sdpa"), **node}


def test_a_compiled_profile_saves_its_cache_and_the_next_attempt_loads_it_and_compiles_from_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gloo_group: None) -> None:
    assert compile_tiny().get("fxgraph_cache_miss", 0) >= 1, "compiled for real, nothing cached yet"
    first = tmp_path / "attempt-1"
    summary, artifacts = run_profile(first, job(), monkeypatch)
    assert summary["compile_cache"] == "none shipped" and summary["compile_cache_saved"].startswith("saved ")
    assert summary["compile_s"] > 0
    (announced,) = artifacts
    assert announced["name"] == cc.NAME and announced["path"].startswith(f"{cc.SAVED_DIR}/")
    saved = first / announced["path"]
    about = json.loads(saved.with_suffix(".json").read_text())
    assert saved.name == f"{about['key']}.bin" and about["bytes"] == saved.stat().st_size == announced["bytes"]
    assert about["job_key"] == cc.key_of(cc.job_fields(job()))
    assert about["node"]["torch"] == torch.__version__

    new_process(tmp_path, monkeypatch, 2)  # the next attempt, on another node
    second = tmp_path / "attempt-2"
    (second / cc.SHIPPED_DIR).mkdir(parents=True)
    for suffix in (".bin", ".json"):
        shutil.copy(saved.with_suffix(suffix), second / cc.SHIPPED_DIR / saved.with_suffix(suffix).name)
    summary, artifacts = run_profile(second, job(compile_caches=[f"{cc.SHIPPED_DIR}/{saved.name}"]), monkeypatch)
    assert summary["compile_cache"] == "loaded"
    assert "compile_cache_saved" not in summary and artifacts == [], "a loaded cache is not saved again"
    monkeypatch.undo()  # torch.compile itself again, the cache directory the load wrote into kept
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-2"))
    torch._dynamo.reset()
    counted = compile_tiny()
    assert counted.get("fxgraph_cache_hit", 0) >= 1 and not counted.get("fxgraph_cache_miss"), counted


def test_a_cache_under_another_key_is_not_loaded_and_the_profile_compiles_and_saves_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gloo_group: None) -> None:
    compile_tiny()
    other_job, other_node = fields(torch="2.99.0")  # another torch version's cache
    shipped = tmp_path / "attempt" / cc.SHIPPED_DIR
    shipped.mkdir(parents=True)
    write_cache(shipped, other_job, other_node, b"bytes")
    name = f"{cc.SHIPPED_DIR}/{cc.key_of({'job': other_job, 'node': other_node})}.bin"
    summary, artifacts = run_profile(tmp_path / "attempt", job(compile_caches=[name]), monkeypatch)
    assert summary["compile_cache"] == "not loaded"
    assert "is not this node's" in summary["compile_cache_note"]
    assert summary["compile_cache_saved"].startswith("saved ") and len(artifacts) == 1


def write_cache(where: Path, job_part: dict[str, Any], node_part: dict[str, Any], data: bytes) -> Path:
    about = cc.manifest(job_part, node_part, data)
    (where / f"{about['key']}.bin").write_bytes(data)
    (where / f"{about['key']}.json").write_text(json.dumps(about))
    return where / f"{about['key']}.bin"


def saved_cache(tmp_path: Path) -> Path:
    compile_tiny()
    path, note = cc.save(tmp_path, *fields())
    assert path is not None, note
    return tmp_path / path


def test_save_and_load_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = saved_cache(tmp_path)
    new_process(tmp_path, monkeypatch, 2)
    assert cc.load(tmp_path, [str(saved.relative_to(tmp_path))], *fields()) == \
        ("loaded", str(saved.relative_to(tmp_path)))


def test_nothing_compiled_is_nothing_saved(tmp_path: Path) -> None:
    assert cc.save(tmp_path, *fields()) == (None, "not saved: torch recorded nothing to save")
    assert not (tmp_path / cc.SAVED_DIR).exists()


def test_a_corrupt_cache_is_refused_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = saved_cache(tmp_path)
    data = bytearray(saved.read_bytes())
    data[len(data) // 2] ^= 0xFF
    saved.write_bytes(bytes(data))
    new_process(tmp_path, monkeypatch, 2)
    status, why = cc.load(tmp_path, [str(saved.relative_to(tmp_path))], *fields())
    assert status == "not loaded" and "sha256 is not the manifest's" in (why or "")


def test_bytes_torch_cannot_read_are_refused_with_the_reason(tmp_path: Path) -> None:
    write_cache(tmp_path, *fields(), b"not torch's cache format")
    key = cc.key_of(dict(zip(("job", "node"), fields(), strict=True)))
    assert cc.load(tmp_path, [f"{key}.bin"], *fields()) == ("not loaded", f"{key}.bin: torch could not read it")


def test_a_cache_over_the_bound_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = saved_cache(tmp_path)
    monkeypatch.setattr(cc, "MAX_BYTES", saved.stat().st_size - 1)
    status, why = cc.load(tmp_path, [str(saved.relative_to(tmp_path))], *fields())
    assert status == "not loaded" and f"over {saved.stat().st_size - 1:,} bytes" in (why or "")


def test_a_missing_or_malformed_manifest_is_refused_and_the_next_shipped_cache_is_tried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = saved_cache(tmp_path)
    (tmp_path / "bad.bin").write_bytes(b"x")
    (tmp_path / "bad.json").write_text("[1, 2")
    new_process(tmp_path, monkeypatch, 2)
    loaded = cc.load(tmp_path, ["absent.bin", "bad.bin", str(saved.relative_to(tmp_path))], *fields())
    assert loaded == ("loaded", str(saved.relative_to(tmp_path)))
    status, why = cc.load(tmp_path, ["absent.bin", "bad.bin"], *fields())
    assert status == "not loaded" and "absent.bin: FileNotFoundError" in (why or "")
    assert "bad.bin: JSONDecodeError" in (why or "")


def test_the_key_changes_with_every_field_it_hashes() -> None:
    job_part, node_part = fields()
    keys = {cc.key_of({"job": job_part, "node": node_part})}
    for name in node_part:
        keys.add(cc.key_of({"job": job_part, "node": {**node_part, name: "other"}}))
    for name in job_part:
        keys.add(cc.key_of({"job": {**job_part, name: "other"}, "node": node_part}))
    assert len(keys) == 1 + len(node_part) + len(job_part)
    assert all(cc.KEY.fullmatch(key) for key in keys)
