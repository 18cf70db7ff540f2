"""fp8 matmuls as the d26 record runs them: tensorwise dynamic scaling through torch's own
``torch._scaled_mm`` and float8 dtypes (our implementation of the recipe upstream nanochat's
``nanochat/fp8.py`` describes; the record itself, a67eba3, ran torchao's equivalent).

A converted Linear (``Fp8Linear``) does its three matmuls in fp8: each operand gets one scale,
``fp8_max / amax(|x|)``, is multiplied by it, saturated and cast (inputs and weights to e4m3,
the output gradient to e5m2: more range, less precision); ``_scaled_mm`` multiplies and
undoes both scales (it takes their inverses), accumulating in f32 and writing the compute dtype
(bf16 under autocast). cuBLAS wants the first operand row-major and the second column-major
(torch checks it: ``_meta_registrations._check_scaled_mm_sizes``), dims divisible by 16 and f32
scalar scales. The forward accumulates fast (``use_fast_accum``), the two gradient matmuls do not,
as upstream and torchao's defaults. The master weights stay f32: only the matmul is fp8.

Which Linears: as the record's filter (scripts/base_train.py at a67eba3), every ``nn.Linear``
whose in and out features are both divisible by 16: lm_head and every block matrix, not the
value-embedding gates (32 → n_kv_head). Upstream's later filter also skips layers under 128
wide, which changes nothing below d32.

``FP8_CAPABILITY``: fp8 tensor cores start at compute capability 8.9 (Ada, Hopper and later).
torch's CPU build has ``_scaled_mm`` for float8 too (torch 2.13), so the same code runs on CPU,
where it tests the arithmetic, not the speed.
"""

from __future__ import annotations

import torch
from torch import nn

FP8_CAPABILITY = (8, 9)
INPUT_DTYPE = torch.float8_e4m3fn
"""Inputs and weights: 4 exponent bits, 3 mantissa bits, ±448."""
GRAD_DTYPE = torch.float8_e5m2
"""Output gradients: 5 exponent bits, 2 mantissa bits, ±57,344."""
_EPS = 1e-12
"""Floor on amax, so an all-zero tensor (a zero-initialised projection) gets a finite scale."""


def wants_fp8(module: nn.Module) -> bool:
    """The record's filter: an ``nn.Linear`` with both dims divisible by 16 (cuBLAS fp8's rule)."""
    return isinstance(module, nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0


def supported(capability: tuple[int, int] | None) -> bool:
    """Whether a CUDA device of this compute capability has fp8 tensor cores (None: not a CUDA device)."""
    return capability is not None and capability >= FP8_CAPABILITY


@torch.no_grad()
def quantize(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` scaled into ``dtype``'s range by one scale for the whole tensor, saturated and cast;
    with the inverse scale (f32, one element), which is what ``_scaled_mm`` multiplies back by.
    The scale is computed in f64 as torchao does, so compiled and eager runs agree."""
    top = torch.finfo(dtype).max
    amax = x.float().abs().max()
    scale = (top / amax.double().clamp(min=_EPS)).float()
    quantized = (x.float() * scale).clamp(-top, top).to(dtype)
    return quantized, scale.reciprocal()


def column_major(x: torch.Tensor) -> torch.Tensor:
    """The same 2-D tensor stored column by column (strides (1, rows)): a copy unless it already is."""
    return x.t().contiguous().t()


def _scaled_mm(a: torch.Tensor, a_inv: torch.Tensor, b: torch.Tensor, b_inv: torch.Tensor,
               out_dtype: torch.dtype, fast: bool) -> torch.Tensor:
    return torch._scaled_mm(a, b, scale_a=a_inv, scale_b=b_inv, out_dtype=out_dtype, use_fast_accum=fast)


class Fp8Matmul(torch.autograd.Function):
    """``x @ w.T`` for a 2-D input ``x`` (tokens, in) and a weight ``w`` (out, in), every matmul fp8."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor,
                weight: torch.Tensor) -> torch.Tensor:
        x8, x_inv = quantize(x, INPUT_DTYPE)
        w8, w_inv = quantize(weight, INPUT_DTYPE)
        ctx.save_for_backward(x8, x_inv, w8, w_inv)
        # w8 is (out, in) row-major, so its transpose is the column-major (in, out) cuBLAS wants.
        return _scaled_mm(x8, x_inv, w8.t(), w_inv, x.dtype, fast=True)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx,
                 grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x8, x_inv, w8, w_inv = ctx.saved_tensors  # type: ignore[attr-defined]
        g8, g_inv = quantize(grad, GRAD_DTYPE)
        # grad_x (tokens, in) = grad (tokens, out) @ w (out, in): w stored row-major, copied column-major.
        grad_x = _scaled_mm(g8, g_inv, column_major(w8), w_inv, grad.dtype, fast=False)
        # grad_w (out, in) = grad.T (out, tokens) @ x (tokens, in): the first operand made row-major,
        # the second column-major (both copies, as the layouts demand).
        grad_w = _scaled_mm(g8.t().contiguous(), g_inv, column_major(x8), x_inv, grad.dtype, fast=False)
        return grad_x, grad_w


_opaque = False


def _opaque_to_compile() -> None:
    """As upstream: ``torch.compile`` sees the fp8 matmul as one node (it does not trace into the
    quantisation). Done on first use, so a payload that never runs fp8 never imports torch._dynamo."""
    global _opaque
    if not _opaque:
        import torch._dynamo

        torch._dynamo.allow_in_graph(Fp8Matmul)
        _opaque = True


class Fp8Linear(nn.Linear):
    """An ``nn.Linear`` (no bias) whose matmuls run in fp8; its weight is the same f32 parameter."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = x.device.type
        if torch.is_autocast_enabled(device):  # the dtype autocast would have run the matmul in
            x = x.to(torch.get_autocast_dtype(device))
        out = Fp8Matmul.apply(x.reshape(-1, x.size(-1)), self.weight)
        return out.view(*x.shape[:-1], out.size(-1))


def convert(model: nn.Module) -> list[str]:
    """Turn every Linear of ``model`` that ``wants_fp8`` into an ``Fp8Linear`` in place (same
    parameters, same names: the optimizer's plan does not change); the converted modules' names."""
    _opaque_to_compile()
    converted: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and wants_fp8(module) and module.bias is None:
            module.__class__ = Fp8Linear
            converted.append(name)
    return converted


def choose_precision(asked: str | None, device: torch.device) -> tuple[str, str | None]:
    """The precision the profile's matmuls run in, and why it is not the one asked for (else None).
    ``asked``: ``fp8`` | ``bf16`` | None (as the record: fp8 where the GPU has fp8 tensor cores).
    On GPU: ``fp8`` or ``bf16`` (autocast); an fp8 request on a GPU without fp8 runs bf16 and says
    so. On CPU: ``f32``, unless fp8 is asked and this torch multiplies float8 on CPU (a test of
    the arithmetic, not a measurement)."""
    if device.type != "cuda":
        if asked != "fp8":
            return "f32", None
        return ("fp8", None) if _cpu_scaled_mm() else ("f32", "fp8 asked; this torch has no float8 matmul on CPU")
    capability = torch.cuda.get_device_capability(device)
    if asked == "bf16" or (asked is None and not supported(capability)):
        return "bf16", None
    if supported(capability):
        return "fp8", None
    major, minor = capability
    return "bf16", f"fp8 asked; compute capability {major}.{minor} has no fp8 tensor cores (8.9 or later): ran bf16"


def _cpu_scaled_mm() -> bool:
    one = torch.ones(16, 16).to(INPUT_DTYPE)
    try:
        _scaled_mm(one, torch.ones(()), one.t(), torch.ones(()), torch.float32, fast=False)
    except (RuntimeError, NotImplementedError):
        return False
    return True
