"""The payload's pure modules: presets, order statistics, the event log and its parser, batch arithmetic."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from benchctl.engine.event_sync import parse_lines
from benchctl.payload.events import KINDS, EventLog
from benchctl.payload.job import ProfileConfig
from benchctl.payload.stats import median, percentile
from benchctl.payload.workloads.presets import NANOCHAT_VOCAB, UnknownPreset, model_dims, target_steps
from benchctl.payload.workloads.profile import grad_accum_steps

# --- presets ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "dim", "heads"), [
    ("nanochat-d12", 768, 6),
    ("nanochat-d20", 1280, 10),
    ("nanochat-d26", 1664, 13),
])
def test_model_dims(name: str, dim: int, heads: int) -> None:
    dims = model_dims(name)
    assert (dims.dim, dims.n_head, dims.n_kv_head, dims.head_dim) == (dim, heads, heads, 128)
    assert dims.depth == int(name.removeprefix("nanochat-d"))
    assert dims.vocab_size == NANOCHAT_VOCAB == 32_768


def test_vocab_override() -> None:
    assert model_dims("nanochat-d1", 512).vocab_size == 512
    assert model_dims("nanochat-d1").dim == 128


def test_d26_scaling_params() -> None:
    dims = model_dims("nanochat-d26")
    params = dims.scaling_params()
    assert abs(params - 918_400_000) < 100_000
    assert params == dims.block_matrix_params() + 32_768 * 1664
    # by hand: 26 layers × 12·dim² + 13 value-embedding gates × 13 kv heads × 32 channels + lm_head
    assert params == 26 * 12 * 1664 * 1664 + 13 * 13 * 32 + 32_768 * 1664 == 918_426_912


def test_target_steps() -> None:
    assert target_steps("nanochat-d26", 8.5, 524288) == 14889
    assert target_steps("nanochat-d26", 8.5, 524288 * 2) == 7444  # floor, not round


@pytest.mark.parametrize("name", ["gpt2", "nanochat-d0", "nanochat-d", "nanochat-dx", "nanochat-d12 ", ""])
def test_unknown_preset(name: str) -> None:
    with pytest.raises(UnknownPreset, match="unknown model preset"):
        model_dims(name)
    with pytest.raises(ValueError):  # UnknownPreset is a ValueError
        target_steps(name, 8.5, 524288)


@pytest.mark.parametrize("depth", [1, 2, 5, 12, 26])
def test_value_embedding_layers_alternate_and_include_last(depth: int) -> None:
    dims = model_dims(f"nanochat-d{depth}")
    layers = [i for i in range(depth) if dims.has_value_embedding(i)]
    assert layers[-1] == depth - 1
    assert all(b - a == 2 for a, b in itertools.pairwise(layers))
    assert len(layers) == (depth + 1) // 2


def test_value_embedding_layers_d12() -> None:
    dims = model_dims("nanochat-d12")
    assert [i for i in range(12) if dims.has_value_embedding(i)] == [1, 3, 5, 7, 9, 11]


# --- stats -----------------------------------------------------------------------------------


def test_percentile_linear_interpolation() -> None:
    assert percentile([1, 2, 3, 4], 10) == pytest.approx(1.3)
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)
    assert percentile([1, 2, 3, 4], 0) == 1
    assert percentile([1, 2, 3, 4], 100) == 4
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)  # unsorted input
    assert percentile([10, 20, 30, 40, 50], 25) == pytest.approx(20.0)
    assert percentile([10, 20, 30, 40, 50], 30) == pytest.approx(22.0)
    assert percentile([7.5], 90) == 7.5


def test_percentile_matches_numpy_default() -> None:
    values = [0.31, 0.29, 0.5, 0.27, 0.33, 0.30, 0.41]
    for q in (0, 5, 10, 33.3, 50, 75, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_median() -> None:
    assert median([3, 1, 2]) == 2
    assert median([1, 2, 3, 10]) == pytest.approx(2.5)
    with pytest.raises(ValueError):
        median([])
    with pytest.raises(ValueError):
        percentile([], 10)


# --- events ----------------------------------------------------------------------------------


def test_event_log_writes_one_object_per_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        first = log.emit("phase_start", phase="preflight")
        log.emit("sample", phase="profile", step=0, loss=1.5)
        log.emit("done", exit_code=0)
    lines = path.read_text().splitlines()
    assert path.read_text().endswith("\n")
    events = [json.loads(line) for line in lines]
    assert [e["kind"] for e in events] == ["phase_start", "sample", "done"]
    assert all(isinstance(e["t"], float) and e["t"] > 1_600_000_000 for e in events)
    assert events[0] == first
    assert {k: v for k, v in events[1].items() if k != "t"} == {"kind": "sample", "phase": "profile", "step": 0,
                                                                "loss": 1.5}
    # appends, never truncates
    with EventLog(path) as log:
        log.emit("error", message="x")
    assert len(path.read_text().splitlines()) == 4


def test_event_log_rejects_unknown_kind(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log, pytest.raises(ValueError, match="unknown event kind 'bogus'"):
        log.emit("bogus")
    assert path.read_text() == ""
    assert KINDS == ("phase_start", "sample", "phase_end", "artifact", "error", "done", "preempt_notice")


def test_parse_lines_keeps_partial_line() -> None:
    data = b'{"t": 1, "kind": "phase_start"}\n{"t": 2, "kind": "sample", "step": 0}\n{"t": 3, "ki'
    events, consumed = parse_lines(data)
    assert events == [{"t": 1, "kind": "phase_start"}, {"t": 2, "kind": "sample", "step": 0}]
    assert consumed == data.index(b'{"t": 3')
    assert data[consumed:] == b'{"t": 3, "ki'
    assert parse_lines(b'{"t": 3, "ki') == ([], 0)
    assert parse_lines(b"") == ([], 0)


def test_parse_lines_turns_garbage_into_error_event() -> None:
    data = b'garbage line\n[1, 2]\n\n{"kind": "done", "exit_code": 0}\n'
    events, consumed = parse_lines(data)
    assert consumed == len(data)
    assert [e["kind"] for e in events] == ["error", "error", "done"]
    assert "unparseable event line" in events[0]["message"] and "garbage line" in events[0]["message"]
    assert "not an object" in events[1]["message"]
    assert events[2] == {"kind": "done", "exit_code": 0}


# --- batch arithmetic ------------------------------------------------------------------------


def _cfg(total: int, device_batch: int = 2, seq: int = 32) -> ProfileConfig:
    return ProfileConfig(model="nanochat-d1", device_batch_size=device_batch, sequence_len=seq,
                         total_batch_size=total, warmup_steps=1, steps=3)


def test_grad_accum_steps() -> None:
    assert grad_accum_steps(_cfg(128), 1) == 2
    assert grad_accum_steps(_cfg(128), 2) == 1
    assert grad_accum_steps(_cfg(524288, device_batch=32, seq=2048), 8) == 1
    assert grad_accum_steps(_cfg(524288, device_batch=16, seq=2048), 8) == 2
    assert grad_accum_steps(_cfg(524288, device_batch=32, seq=2048), 1) == 8


def test_grad_accum_steps_rejects_non_divisible() -> None:
    with pytest.raises(ValueError, match="total_batch_size 100 is not a multiple"):
        grad_accum_steps(_cfg(100), 1)
    with pytest.raises(ValueError, match="= 192"):
        grad_accum_steps(_cfg(128), 3)


def test_a_strangers_line_in_the_events_file_does_not_crash_the_profile_summary(tmp_path: Path) -> None:
    """events.jsonl is shared with the command phase: its garbage must not crash the profile's summary."""
    from benchctl.payload.workloads.profile import summarize

    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        log.emit("sample", phase="profile", step=0, step_time_s=9.0, warmup=True)
        for step, seconds in enumerate((1.0, 2.0, 3.0), start=1):
            log.emit("sample", phase="profile", step=step, step_time_s=seconds)
    with open(path, "a", encoding="utf-8") as raw:
        raw.write('{"t": "not-a-time", "kind": "sample"\nnot json at all\n[1, 2]\n\xff\x00\n')
    summary = summarize(path)
    assert summary["timed_steps"] == 3 and summary["step_time_median_s"] == 2.0
