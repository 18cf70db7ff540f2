"""The collectives phase: nccl-tests' bandwidth definitions, size sweeps, and a real sweep on gloo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchctl.payload.comm.collective_math import bandwidths, bus_factor, format_bytes, parse_bytes, sweep
from tests.conftest import REPO


@pytest.mark.parametrize(("op", "ranks", "factor"), [
    ("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0), ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75),
    ("alltoall", 2, 0.5), ("broadcast", 8, 1.0), ("all_reduce", 1, 0.0)])
def test_bus_factors(op: str, ranks: int, factor: float) -> None:
    assert bus_factor(op, ranks) == pytest.approx(factor)


def test_bandwidths_are_decimal_gb_per_second() -> None:
    algbw, busbw = bandwidths("all_reduce", 8 * 1024**3, 0.04, 8)
    assert algbw == pytest.approx(8 * 1024**3 / 0.04 / 1e9)
    assert busbw == pytest.approx(algbw * 1.75)


def test_parse_bytes_and_sweep() -> None:
    assert [parse_bytes(v) for v in (8, "8", "64K", "1M", "8G", "2GiB")] == [8, 8, 65536, 1048576, 8 * 1024**3,
                                                                               2 * 1024**3]
    with pytest.raises(ValueError, match="not a size"):
        parse_bytes("lots")
    assert [format_bytes(v) for v in (8, 65536, 1536 * 1024, 8 * 1024**3)] == ["8", "64K", "1.5M", "8G"]
    assert all(parse_bytes(format_bytes(v)) == v for v in (8, 65536, 8 * 1024**3)), "the inverse of parse_bytes"
    assert sweep(8, 1024, 2, 8) == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert sweep(8, 100, 4, 16) == [16, 32]  # rounded to the granule, no repeats
    assert sweep(1, 1, 2, 8) == [8]


@pytest.mark.slow
@pytest.mark.parametrize("world", [1, 2])
def test_sweep_on_gloo_is_correct_and_follows_the_formulas(tmp_path: Path, world: int) -> None:
    job = {"campaign": "t", "cell": "c", "attempt": 1, "token": "tok", "gpu": "cpu", "count": world,
           "phases": ["collectives"], "done_phases": [], "env": {"NCCL_ALGO": "Ring", "BENCHCTL_KNOB": "7"},
           "collectives": {"ops": ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall"],
                           "min_bytes": 8, "max_bytes": 65536, "factor": 16, "warmup_iters": 1, "iters": 3}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, "-m", "payload", "run", "job.json"], cwd=tmp_path, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    samples = [e for e in events if e["kind"] == "sample" and e["phase"] == "collectives"]
    granule = 4 * world
    sizes = [s for s in (max(granule, b // granule * granule) for b in (8, 128, 2048, 32768))]
    placements = {"all_reduce": [True], "all_gather": [False, True], "reduce_scatter": [False, True],
                  "broadcast": [True], "alltoall": [False]}
    expected = [(op, size, p) for op, ps in placements.items() for size in sizes for p in ps]
    assert [(s["op"], s["bytes"], s["in_place"]) for s in samples] == expected
    for s in samples:
        assert s["wrong"] == 0
        assert s["algbw_gbps"] == pytest.approx(s["bytes"] / (s["time_us"] / 1e6) / 1e9)
        assert s["busbw_gbps"] == pytest.approx(s["algbw_gbps"] * bus_factor(s["op"], world))
        # time_us is the average over the ranks (nccl-tests' default, -a 1); the slowest rank's is beside it
        assert 0 < s["time_us"] <= s["time_slowest_us"] * (1 + 1e-9)
        assert s["busbw_slowest_gbps"] == pytest.approx(
            s["bytes"] / (s["time_slowest_us"] / 1e6) / 1e9 * bus_factor(s["op"], world))
    table = (tmp_path / "artifacts" / "collectives.txt").read_text()
    assert table.count("# Out of bounds values : 0 OK") == 5
    assert table.count("time: average over the ranks") == 5
    assert any(e["kind"] == "artifact" and e["name"] == "collectives.txt" for e in events)
    (end,) = [e for e in events if e["kind"] == "phase_end"]
    assert end["summary"]["wrong"] == 0
    for rank in range(world):  # the cell's env knobs reach every rank
        seen = json.loads((tmp_path / "artifacts" / "logs" / f"collectives-rank{rank}.env.json").read_text())
        assert seen == {"NCCL_ALGO": "Ring", "BENCHCTL_KNOB": "7"}
