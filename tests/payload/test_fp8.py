"""fp8 matmuls (payload.workloads.fp8), checked on CPU: the arithmetic against an emulation of tensorwise
scaling (cast to float8 and back, multiply in f32), the layouts against torch's own rules for
cuBLAS (run on ``meta`` tensors, ``torch._meta_registrations._check_scaled_mm_sizes`` enforces what
the CUDA kernel demands: first operand row-major, second column-major, dims divisible by 16, f32
scalar scales), which Linears convert (the record's filter, upstream scripts/base_train.py at
a67eba3), and which precision a device gets."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from benchctl.payload.workloads import fp8
from benchctl.payload.workloads.model import build_model
from benchctl.payload.workloads.presets import model_dims


def _emulated(a: torch.Tensor, a_dtype: torch.dtype, b: torch.Tensor, b_dtype: torch.dtype) -> torch.Tensor:
    """``a @ b`` with each operand quantised tensorwise to its float8 dtype and back, multiplied in f32."""
    def through(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        top = torch.finfo(dtype).max
        scale = top / x.float().abs().max().clamp(min=1e-12)
        return (x.float() * scale).clamp(-top, top).to(dtype).float() / scale

    return through(a, a_dtype) @ through(b, b_dtype)


def _data(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_quantize_uses_the_whole_range_and_returns_the_inverse_scale() -> None:
    x = _data(32, 48, seed=0) * 3
    q, inv = fp8.quantize(x, torch.float8_e4m3fn)
    assert q.dtype == torch.float8_e4m3fn and inv.dtype == torch.float32 and inv.numel() == 1
    assert q.float().abs().max() == 448.0  # amax maps onto e4m3's largest value
    torch.testing.assert_close(q.float() * inv, x, rtol=0.0625, atol=float(inv) * 2)  # 3 mantissa bits
    zeros, zero_inv = fp8.quantize(torch.zeros(16, 16), torch.float8_e5m2)  # a zero-initialised projection
    assert torch.isfinite(zero_inv) and not zeros.float().any()


def test_the_forward_matmul_equals_the_emulated_quantisation() -> None:
    x, w = _data(64, 32, seed=1), _data(48, 32, seed=2)
    out = fp8.Fp8Matmul.apply(x, w)
    torch.testing.assert_close(out, _emulated(x, fp8.INPUT_DTYPE, w.t(), fp8.INPUT_DTYPE), rtol=1e-5, atol=1e-5)
    assert (out - x @ w.t()).abs().max() < 0.1 * (x @ w.t()).abs().max()  # and near the exact product


def test_the_gradients_are_the_emulated_fp8_matmuls_with_e5m2_gradients() -> None:
    x, w = _data(64, 32, seed=3).requires_grad_(), _data(48, 32, seed=4).requires_grad_()
    grad = _data(64, 48, seed=5)
    fp8.Fp8Matmul.apply(x, w).backward(grad)
    assert x.grad is not None and w.grad is not None
    want_x = _emulated(grad, fp8.GRAD_DTYPE, w.detach(), fp8.INPUT_DTYPE)
    want_w = _emulated(grad.t(), fp8.GRAD_DTYPE, x.detach(), fp8.INPUT_DTYPE)
    torch.testing.assert_close(x.grad, want_x, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad, want_w, rtol=1e-5, atol=1e-5)


def test_forward_accumulates_fast_and_the_gradient_matmuls_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[torch.dtype, torch.dtype, bool]] = []
    real = torch._scaled_mm

    def spy(a: torch.Tensor, b: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        calls.append((a.dtype, b.dtype, kwargs["use_fast_accum"]))
        return real(a, b, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", spy)
    x, w = _data(32, 16, seed=6).requires_grad_(), _data(16, 16, seed=7).requires_grad_()
    fp8.Fp8Matmul.apply(x, w).sum().backward()
    e4, e5 = fp8.INPUT_DTYPE, fp8.GRAD_DTYPE
    assert calls == [(e4, e4, True), (e5, e4, False), (e5, e4, False)]


def test_every_matmul_meets_cublas_layout_rules_as_torch_checks_them() -> None:
    """On ``meta`` tensors torch applies the CUDA kernel's checks (row-major first operand,
    column-major second, dims divisible by 16, f32 scalar scales): forward and backward pass them."""
    x = torch.empty(4096, 1664, device="meta", dtype=torch.bfloat16, requires_grad=True)
    w = torch.empty(6656, 1664, device="meta", requires_grad=True)  # f32 master weight, as in the model
    out = fp8.Fp8Matmul.apply(x, w)
    assert out.shape == (4096, 6656) and out.dtype == torch.bfloat16
    out.backward(torch.empty_like(out))
    assert x.grad is not None and w.grad is not None
    assert x.grad.shape == x.shape and w.grad.shape == w.shape and w.grad.dtype == torch.float32


def test_the_check_itself_refuses_a_row_major_second_operand() -> None:
    """The meta check is live (so the test above can fail): the weight not transposed is refused."""
    a = torch.empty(32, 32, device="meta", dtype=torch.float8_e4m3fn)
    one = torch.ones((), device="meta")
    with pytest.raises(RuntimeError, match="col_major"):
        torch._scaled_mm(a, a.contiguous(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    assert fp8.column_major(torch.zeros(3, 5)).stride() == (1, 3)


def test_the_record_converts_every_linear_with_dims_divisible_by_16() -> None:
    model = build_model(model_dims("nanochat-d26"), 2048, "meta", fp8=True)
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    converted = {name for name, m in linears.items() if isinstance(m, fp8.Fp8Linear)}
    assert "lm_head" in converted and "blocks.0.mlp.c_fc" in converted and "blocks.25.attn.c_v" in converted
    assert set(linears) - converted == {f"blocks.{i}.attn.ve_gate" for i in range(1, 26, 2)}  # 32 → 13 heads
    assert len(converted) == 26 * 6 + 1
    names = [name for name, _ in model.named_parameters()]
    assert names == [name for name, _ in build_model(model_dims("nanochat-d26"), 2048, "meta").named_parameters()]


def test_under_autocast_the_matmul_takes_the_autocast_dtype_and_the_weight_stays_f32() -> None:
    """As the record ran it (torchao's fp8 under bf16 autocast): the input is cast to bf16, the output
    is bf16, and the f32 master weight gets an f32 gradient."""
    layer = nn.Linear(32, 48, bias=False)
    parent = nn.Sequential(layer)
    assert fp8.convert(parent) == ["0"] and isinstance(parent[0], fp8.Fp8Linear)
    x = _data(2, 8, 32, seed=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = parent(x)
    assert out.dtype == torch.bfloat16 and out.shape == (2, 8, 48)
    out.float().sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.dtype == torch.float32


def test_the_fp8_model_trains_on_cpu_close_to_the_f32_one() -> None:
    dims = model_dims("nanochat-d2", 64)
    idx = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(0))
    losses = []
    for use_fp8 in (False, True):
        model = build_model(dims, 32, "cpu", fp8=use_fp8)
        loss = model(idx, idx)
        loss.backward()
        assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0
        losses.append(loss.item())
    assert abs(losses[0] - losses[1]) < 0.01


@pytest.mark.parametrize(("asked", "capability", "expected"), [
    (None, (9, 0), ("fp8", None)), (None, (8, 9), ("fp8", None)), (None, (10, 0), ("fp8", None)),
    (None, (8, 0), ("bf16", None)), ("bf16", (9, 0), ("bf16", None)), ("fp8", (9, 0), ("fp8", None)),
])
def test_precision_on_gpu_is_the_records_where_the_gpu_has_fp8(
        monkeypatch: pytest.MonkeyPatch, asked: str | None, capability: tuple[int, int],
        expected: tuple[str, str | None]) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert fp8.choose_precision(asked, torch.device("cuda", 0)) == expected


def test_fp8_asked_on_a_gpu_without_it_runs_bf16_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    precision, note = fp8.choose_precision("fp8", torch.device("cuda", 0))
    assert precision == "bf16" and note is not None and "8.0" in note and "fp8" in note


def test_precision_on_cpu_is_f32_unless_fp8_is_asked() -> None:
    cpu = torch.device("cpu")
    assert fp8.choose_precision(None, cpu) == ("f32", None) and fp8.choose_precision("bf16", cpu) == ("f32", None)
    assert fp8.choose_precision("fp8", cpu) == ("fp8", None)  # torch 2.13's CPU build has float8 _scaled_mm
