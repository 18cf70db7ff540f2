"""Causal sliding-window attention on the fastest kernel the node has.

Every layer attends causally; a short-window layer lets token i see tokens i-window … i (as
Flash-Attention's ``window_size=(window, 0)``; upstream's pattern is ``payload.workloads.presets.window_sizes``).
The kernel (``choose``), first that works on the device:

1. ``flash_attn3``: Flash-Attention 3 on a Hopper GPU (compute capability 9.x, the only one its
   kernels are built for): the ``flash_attn_interface`` package where installed, else upstream's
   way, the ``kernels`` package's hub build ``varunneal/flash-attention-3`` (``get_kernel``
   downloads it when the node can reach the hub; any failure falls through).
2. ``flash_attn``: Flash-Attention 2 (the ``flash_attn`` package; Ampere or later).
3. ``flex``: torch's ``flex_attention`` with a sliding-window block mask, where the model is
   ``torch.compile``d (flex's fused kernel only exists compiled; eager it materialises every score).
   Blocks entirely outside the band are skipped, so a short-window layer costs about its window,
   not the full context; the full-context layers run SDPA's causal (flash) kernel.
4. ``sdpa``: torch's SDPA, with a dense boolean band mask on short-window layers (CPU, or an
   eager GPU run without Flash-Attention).

Upstream (nanochat/flash_attention.py) has only FA3 and the SDPA fallback.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

FA3_HUB = "varunneal/flash-attention-3"
"""The hub build of Flash-Attention 3 upstream loads through ``kernels.get_kernel``."""


@dataclass
class Kernel:
    """The attention kernel a model runs: its ``name`` (recorded on every sample) and, for
    Flash-Attention, the module whose ``flash_attn_func`` it calls."""

    name: str = "sdpa"
    flash: Any = None
    masks: dict[tuple[int, int, str], Any] = field(default_factory=dict)
    """flex: block masks by (window, sequence length, device), made once (``block_mask``)."""


def _import(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _hub_fa3() -> Any:
    """FA3 from the ``kernels`` hub, as upstream loads it; None where ``kernels`` is not installed
    or the download or load fails (an offline node, a build that does not match this torch)."""
    kernels = _import("kernels")
    if kernels is None:
        return None
    try:
        return kernels.get_kernel(FA3_HUB).flash_attn_interface
    except Exception:  # whatever the hub or the build raises: this kernel is not available here
        return None


def _flex_available() -> bool:
    return _import("torch.nn.attention.flex_attention") is not None


KERNELS = ("flash_attn3", "flash_attn", "flex", "sdpa")
"""Every kernel's name, fastest first."""


def choose(device: torch.device, compiled: bool, pinned: str | None = None) -> Kernel:
    """The first kernel of the module docstring's order that this node has for ``device``; with
    ``pinned`` (one of KERNELS), that kernel or ValueError naming what this node has instead (a
    like-with-like comparison, e.g. against upstream's SDPA fallback, must not run another)."""
    if pinned is not None:
        if pinned not in KERNELS:
            raise ValueError(f"attention {pinned!r} is none of {', '.join(KERNELS)}")
        if pinned == "sdpa":
            return Kernel()
        found = choose(device, compiled)
        if found.name != pinned:
            needs = ("its package and a CUDA GPU" if pinned.startswith("flash")
                     else "a compiled run on a CUDA GPU")
            raise ValueError(f"attention {pinned!r} was asked for but this node runs {found.name!r} "
                             f"({pinned} needs {needs})")
        return found
    if device.type != "cuda":
        return Kernel()
    major = torch.cuda.get_device_capability(device)[0]
    if major == 9:
        fa3 = _import("flash_attn_interface") or _hub_fa3()
        if fa3 is not None:
            return Kernel("flash_attn3", fa3)
    if major >= 8:
        fa2 = _import("flash_attn")
        if fa2 is not None:
            return Kernel("flash_attn", fa2)
    if compiled and _flex_available():
        return Kernel("flex")
    return Kernel()


def band_mask(window: int) -> Any:
    """flex's ``mask_mod`` for causal attention to the ``window`` tokens before (and the token itself)."""

    def mask(batch: Any, head: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        behind = q_idx - kv_idx
        return (behind >= 0) & (behind <= window)

    return mask


def block_mask(kernel: Kernel, window: int, t: int, device: torch.device) -> Any:
    """The flex block mask for ``window`` over ``t`` tokens, made on ``device`` (where q lives) once."""
    key = (window, t, str(device))
    if key not in kernel.masks:
        from torch.nn.attention.flex_attention import create_block_mask

        kernel.masks[key] = create_block_mask(band_mask(window), None, None, t, t, device=device)
    return kernel.masks[key]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
           kernel: Kernel | None = None) -> torch.Tensor:
    """Causal attention over (B, T, H, D) tensors where token i sees tokens i-window … i (all when window >= T-1)."""
    kernel = kernel or Kernel()
    t = q.size(1)
    full = window >= t - 1
    if kernel.flash is not None:
        q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()  # its kernels take bf16/fp16 only
        out = kernel.flash.flash_attn_func(q, k, v, causal=True, window_size=(-1 if full else window, 0))
        return out[0] if isinstance(out, tuple) else out
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if torch.is_autocast_enabled(q.device.type):  # one dtype for all three, as the fused kernels want
        dtype = torch.get_autocast_dtype(q.device.type)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    gqa = q.size(1) != k.size(1)
    if full:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    elif kernel.name == "flex":
        from torch.nn.attention.flex_attention import flex_attention

        y = flex_attention(q, k, v, block_mask=block_mask(kernel, window, t, q.device), enable_gqa=gqa)
    else:
        pos = torch.arange(t, device=q.device)
        behind = pos[:, None] - pos[None, :]  # query row minus key column
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=(behind >= 0) & (behind <= window), enable_gqa=gqa)
    return y.transpose(1, 2)
