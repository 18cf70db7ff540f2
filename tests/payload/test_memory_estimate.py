"""The per-GPU memory estimate: calibrated on an H100 high-water mark, monotonic, and the d26 refusal."""

from __future__ import annotations

import pytest

from benchctl.payload.gpu_memory import card_memory_gib
from benchctl.payload.memory_estimate import estimate

H100 = 81_559 / 1024  # nvidia-smi's memory.total of an 80 GB H100, in GiB


def test_d12_at_device_batch_16_matches_the_measured_h100_high_water_mark() -> None:
    measured = 37.41  # torch.cuda.max_memory_allocated + context, nanochat-d12, batch 16 × 2,048, one H100
    got = estimate("nanochat-d12", 2048, 16, 1)
    assert got.total_gib == pytest.approx(measured, rel=0.02)
    # the f32 logits for the loss dominate: 16 × 2,048 tokens × 32,768 vocab × 4 bytes = 4 GiB per copy
    assert got.activations_gib > 0.8 * got.total_gib


@pytest.mark.parametrize(("model", "expected"), [("nanochat-d12", (20.5, 36.9, 69.8)),
                                                 ("nanochat-d20", (40.3, 71.8, 134.6)),
                                                 ("nanochat-d26", (63.1, 110.7, 205.9))])
def test_the_8_gpu_table_at_device_batch_8_16_32(model: str, expected: tuple[float, float, float]) -> None:
    got = [estimate(model, 2048, batch, 8).total_gib for batch in (8, 16, 32)]
    assert got == pytest.approx(expected, rel=0.03)


def test_more_batch_or_depth_needs_more_and_more_ranks_need_less() -> None:
    by_batch = [estimate("nanochat-d20", 2048, b, 8).total_gib for b in (1, 2, 4, 8, 16)]
    assert by_batch == sorted(by_batch) and len(set(by_batch)) == len(by_batch)
    by_depth = [estimate(f"nanochat-d{d}", 2048, 8, 8).total_gib for d in (4, 12, 20, 26, 32)]
    assert by_depth == sorted(by_depth) and len(set(by_depth)) == len(by_depth)
    by_world = [estimate("nanochat-d26", 2048, 8, w).optimizer_state_gib for w in (1, 2, 4, 8)]
    assert by_world == sorted(by_world, reverse=True) and len(set(by_world)) == len(by_world)


def test_d26_at_the_old_default_of_32_cannot_fit_an_h100_and_8_does() -> None:
    assert card_memory_gib("H100_SXM") == pytest.approx(H100)
    assert estimate("nanochat-d26", 2048, 32, 8).total_gib > 2 * H100
    assert estimate("nanochat-d26", 2048, 16, 8).total_gib > H100
    assert estimate("nanochat-d26", 2048, 8, 8).total_gib < H100


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        estimate("nanochat-d12", 2048, 0, 8)


@pytest.mark.parametrize(("gpu", "instance_type", "gib"), [
    ("H100_SXM", None, H100), ("NVIDIA H100 80GB HBM3", None, H100), ("h100-pcie", None, H100),
    ("H100_NVL", None, 95_830 / 1024), ("H200_SXM", None, 143_771 / 1024), ("A100_SXM", None, 80.0),
    ("A100", None, 40.0), ("A100_SXM", "p4d.24xlarge", 40.0), ("L40S", None, 46_068 / 1024),
    ("cpu", None, None), ("TPU_V5", None, None), (None, None, None)])
def test_card_memory_by_name(gpu: str | None, instance_type: str | None, gib: float | None) -> None:
    assert card_memory_gib(gpu, instance_type) == (pytest.approx(gib) if gib else None)
