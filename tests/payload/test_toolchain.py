"""Can the node torch.compile? The toolchain Triton needs (a C compiler as Triton finds it, Python.h),
judged in preflight as a warning, and the profile falling back to eager with the reason recorded.

Triton's lookup (triton-lang/triton python/triton/runtime/build.py): ``CC`` when set, used as the
command as is, else ``gcc``, else ``clang`` on the PATH; Python.h from sysconfig's include path.
A node whose PATH has no compiler is what PyTorch's -runtime images are (pytorch/pytorch issue 116696).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchctl.payload.job import Job, ProfileConfig
from benchctl.payload.node import toolchain
from benchctl.payload.node.checks import Expect, Facts, judge, verdict
from benchctl.payload.node.thresholds import resolve
from benchctl.payload.workloads import profile
from tests.payload.test_runner import _job, run_payload

TINY = ProfileConfig(model="nanochat-d2", vocab_size=64, device_batch_size=1, sequence_len=16, total_batch_size=16,
                     warmup_steps=2, steps=2)


def _bin(tmp_path: Path, *names: str) -> Path:
    """A PATH directory holding executable stand-ins named ``names``."""
    folder = tmp_path / "bin"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        tool = folder / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    return folder


@pytest.fixture
def headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An include directory with Python.h, as the interpreter's."""
    include = tmp_path / "include"
    include.mkdir()
    (include / "Python.h").write_text("/* stand-in */\n")
    monkeypatch.setattr(toolchain, "python_include", lambda: str(include))
    return include


def test_a_path_without_a_compiler_is_reported(tmp_path: Path, headers: Path) -> None:
    facts = toolchain.toolchain({"PATH": str(_bin(tmp_path, "python3", "ls"))}, compile_wanted=True)
    assert facts["cc"] is None and facts["python_h"] is True
    assert toolchain.blockers(facts) == ["no C compiler (looked for gcc or clang on the PATH (CC unset))"]


def test_the_compiler_is_found_as_triton_finds_it(tmp_path: Path, headers: Path) -> None:
    path = _bin(tmp_path, "gcc", "clang", "cc")
    assert toolchain.c_compiler({"PATH": str(path)}) == (str(path / "gcc"), "gcc")  # gcc before clang
    assert toolchain.c_compiler({"PATH": str(_bin(tmp_path / "c", "clang"))})[1] == "clang"
    assert toolchain.c_compiler({"PATH": str(_bin(tmp_path / "d", "cc"))})[0] is None, "Triton never tries cc"
    # CC is used as given, as one command word: a path works, a command with arguments does not
    assert toolchain.c_compiler({"PATH": "/nowhere", "CC": str(path / "clang")})[0] == str(path / "clang")
    assert toolchain.c_compiler({"PATH": str(path), "CC": "ccache gcc"}) == (None, "CC=ccache gcc")
    assert toolchain.blockers(toolchain.toolchain({"PATH": str(path)}, True)) == []


def test_missing_python_headers_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "python_include", lambda: str(tmp_path))
    facts = toolchain.toolchain({"PATH": str(_bin(tmp_path, "gcc"))}, compile_wanted=True)
    assert toolchain.blockers(facts) == [f"no Python.h in {tmp_path} (the Python development headers)"]


def test_preflight_warns_on_an_image_that_cannot_compile_and_never_fails_the_node(tmp_path: Path,
                                                                                  headers: Path) -> None:
    toolchain.write(tmp_path, {"PATH": str(_bin(tmp_path, "python3"))}, compile_wanted=True)
    checks = {c["name"]: c for c in judge(Facts(tmp_path), Expect("H100_SXM", 8), resolve())}
    check = checks["compile_toolchain"]
    assert check["status"] == "warn" and "no C compiler" in check["hint"] and "eager" in check["hint"]
    assert check["observed"]["cc"] is None
    assert verdict(list(checks.values())) != "fail", "an image problem is not a bad host"

    toolchain.write(tmp_path, {"PATH": str(_bin(tmp_path, "gcc"))}, compile_wanted=True)
    assert {c["name"]: c for c in judge(Facts(tmp_path), Expect("H100_SXM", 8), resolve())}[
        "compile_toolchain"]["status"] == "pass"
    toolchain.write(tmp_path, {"PATH": str(_bin(tmp_path, "python3"))}, compile_wanted=False)
    assert {c["name"]: c for c in judge(Facts(tmp_path), Expect("H100_SXM", 8), resolve())}[
        "compile_toolchain"]["status"] == "skip", "compile: false, a CPU cell: nothing to prove"


def test_the_profile_runs_eager_with_the_reason_on_a_node_that_cannot_compile(
        tmp_path: Path, headers: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(_bin(tmp_path, "python3")))
    compiled, note = profile.compile_choice(TINY, on_gpu=True)
    assert compiled is False and note is not None
    assert note.startswith(profile.FALLBACK) and "no C compiler" in note

    monkeypatch.setenv("PATH", str(_bin(tmp_path, "gcc")))
    assert profile.compile_choice(TINY, on_gpu=True) == (True, None)


def test_compile_is_wanted_only_where_the_profile_compiles() -> None:
    def job(**kw: object) -> Job:
        base: dict[str, object] = {"campaign": "c", "cell": "x", "attempt": 1, "token": "t", "gpu": "H100_SXM",
                                   "count": 8, "phases": ["preflight", "profile"], "profile": TINY}
        return Job(**{**base, **kw})  # type: ignore[arg-type]

    assert toolchain.compile_wanted(job())
    assert not toolchain.compile_wanted(job(gpu="cpu"))
    assert not toolchain.compile_wanted(job(profile=ProfileConfig(**{**TINY.__dict__, "compile": False})))
    assert not toolchain.compile_wanted(job(phases=["preflight", "collectives"]))
    assert not toolchain.compile_wanted(job(done_phases=["profile"]))


@pytest.mark.slow
def test_the_payloads_preflight_judges_the_toolchain_the_ranks_would_get(tmp_path: Path) -> None:
    """The real payload on a GPU job (this torch has no CUDA: the node is bad for that), with the job's
    env putting no compiler on the PATH the ranks get: the toolchain check warns, and is not a reason."""
    job = _job(gpu="H100_SXM", count=1, env={"PATH": str(_bin(tmp_path, "sh")), "CC": ""})
    code, events, output = run_payload(tmp_path / "a", job)
    assert code == 3, output
    (check,) = [e for e in events if e["kind"] == "sample" and e.get("name") == "compile_toolchain"]
    assert check["status"] == "warn" and check["observed"]["cc_from"] == "CC="
    (error,) = [e for e in events if e["kind"] == "error"]
    assert "compile_toolchain" not in error["message"]
    facts = json.loads((tmp_path / "a" / "artifacts" / "facts" / "toolchain.json").read_text())
    assert facts["compile"] is True and facts["cc"] is None
