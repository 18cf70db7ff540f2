"""The per-GPU memory estimate: above the card's memory in use measured on one H200 (eager and
compiled), monotonic, and the d26 refusal."""

from __future__ import annotations

import pytest

from benchctl.payload.node.gpu_memory import card_memory_gib
from benchctl.payload.workloads.memory_estimate import estimate

H100 = 81_559 / 1024  # nvidia-smi's memory.total of an 80 GB H100, in GiB


# nvidia-smi's memory.used at the profile's peak on one H200, world size 1, sequence 2,048
# (docs/measurements/2026-11-25-gpu-h200.md): (model, device batch, compiled, GiB)
MEASURED_H200 = [("nanochat-d12", 16, False, 36.40), ("nanochat-d20", 16, False, 70.69),
                 ("nanochat-d12", 16, True, 19.46), ("nanochat-d20", 16, True, 43.80),
                 ("nanochat-d26", 8, True, 54.71), ("nanochat-d26", 16, True, 80.29)]


@pytest.mark.parametrize(("model", "batch", "compiled", "measured"), MEASURED_H200)
def test_the_estimate_covers_the_measured_card_memory_without_wasting_a_batch_size(
        model: str, batch: int, compiled: bool, measured: float) -> None:
    got = estimate(model, 2048, batch, 1, compiled=compiled).total_gib
    assert measured <= got <= 1.12 * measured


def test_compiled_needs_less_and_eager_is_dominated_by_the_f32_logits() -> None:
    eager = estimate("nanochat-d12", 2048, 16, 1, compiled=False)
    # the f32 logits for the loss dominate: 16 × 2,048 tokens × 32,768 vocab × 4 bytes = 4 GiB per copy
    assert eager.activations_gib > 0.8 * eager.total_gib and eager.compiled_slack_gib == 0
    compiled = estimate("nanochat-d12", 2048, 16, 1, compiled=True)
    assert compiled.total_gib < 0.6 * eager.total_gib and compiled.compiled_slack_gib > 0


@pytest.mark.parametrize(("model", "expected"), [("nanochat-d12", (20.5, 36.9, 69.8)),
                                                 ("nanochat-d20", (40.3, 71.8, 134.6)),
                                                 ("nanochat-d26", (63.1, 110.7, 205.9))])
def test_the_8_gpu_table_at_device_batch_8_16_32(model: str, expected: tuple[float, float, float]) -> None:
    got = [estimate(model, 2048, batch, 8, compiled=False).total_gib for batch in (8, 16, 32)]
    assert got == pytest.approx(expected, rel=0.03)


@pytest.mark.parametrize("compiled", [False, True])
def test_more_batch_or_depth_needs_more_and_more_ranks_need_less(compiled: bool) -> None:
    by_batch = [estimate("nanochat-d20", 2048, b, 8, compiled=compiled).total_gib for b in (1, 2, 4, 8, 16)]
    assert by_batch == sorted(by_batch) and len(set(by_batch)) == len(by_batch)
    by_depth = [estimate(f"nanochat-d{d}", 2048, 8, 8, compiled=compiled).total_gib for d in (4, 12, 20, 26, 32)]
    assert by_depth == sorted(by_depth) and len(set(by_depth)) == len(by_depth)
    by_world = [estimate("nanochat-d26", 2048, 8, w, compiled=compiled) for w in (1, 2, 4, 8)]
    states = [e.optimizer_state_gib for e in by_world]
    assert states == sorted(states, reverse=True) and len(set(states)) == len(states)
    assert [e.total_gib for e in by_world] == sorted((e.total_gib for e in by_world), reverse=True)


def test_d26_on_8_h100s_fits_at_16_compiled_as_upstream_runs_it_and_at_8_eager() -> None:
    assert card_memory_gib("H100_SXM") == pytest.approx(H100)
    assert estimate("nanochat-d26", 2048, 32, 8, compiled=False).total_gib > 2 * H100
    assert estimate("nanochat-d26", 2048, 16, 8, compiled=False).total_gib > H100
    assert estimate("nanochat-d26", 2048, 8, 8, compiled=False).total_gib < H100
    assert estimate("nanochat-d26", 2048, 32, 8, compiled=True).total_gib > H100
    assert estimate("nanochat-d26", 2048, 16, 8, compiled=True).total_gib < H100


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        estimate("nanochat-d12", 2048, 0, 8, compiled=True)


@pytest.mark.parametrize(("gpu", "instance_type", "gib"), [
    ("H100_SXM", None, H100), ("NVIDIA H100 80GB HBM3", None, H100), ("h100-pcie", None, H100),
    ("H100_NVL", None, 95_830 / 1024), ("H200_SXM", None, 143_771 / 1024), ("A100_SXM", None, 80.0),
    ("A100", None, 40.0), ("A100_SXM", "p4d.24xlarge", 40.0), ("L40S", None, 46_068 / 1024),
    ("cpu", None, None), ("TPU_V5", None, None), (None, None, None)])
def test_card_memory_by_name(gpu: str | None, instance_type: str | None, gib: float | None) -> None:
    assert card_memory_gib(gpu, instance_type) == (pytest.approx(gib) if gib else None)
