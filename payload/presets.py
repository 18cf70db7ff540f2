"""Model presets and the step count a target implies (pure: no torch).

``nanochat-dN``: the nanochat family (see REFERENCE.md). Depth N fixes the width:
model dim = 64·N rounded up to a multiple of 128, head dim 128, n_head = n_kv_head = dim / 128,
vocab 32,768 unless overridden.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

NANOCHAT_VOCAB = 32_768
HEAD_DIM = 128
VE_GATE_CHANNELS = 32
_PRESET = re.compile(r"^nanochat-d(\d+)$")


class UnknownPreset(ValueError):
    """The name is not a model preset this payload knows."""


@dataclass(frozen=True)
class ModelDims:
    depth: int
    dim: int
    n_head: int
    n_kv_head: int
    head_dim: int
    vocab_size: int

    def has_value_embedding(self, layer: int) -> bool:
        """Value embeddings sit on alternating layers, the last one included."""
        return layer % 2 == (self.depth - 1) % 2

    def block_matrix_params(self) -> int:
        """Elements of every 2-D matrix in the transformer blocks (attention, MLP, ve_gate)."""
        kv_dim = self.n_kv_head * self.head_dim
        attn = self.dim * self.dim * 2 + self.dim * kv_dim * 2  # c_q, c_proj, c_k, c_v
        mlp = 2 * 4 * self.dim * self.dim  # c_fc, c_proj
        gates = sum(self.has_value_embedding(i) for i in range(self.depth)) * self.n_kv_head * VE_GATE_CHANNELS
        return self.depth * (attn + mlp) + gates

    def scaling_params(self) -> int:
        """Parameters that count for the data ratio: block matrices plus lm_head."""
        return self.block_matrix_params() + self.vocab_size * self.dim


def model_dims(name: str, vocab_size: int | None = None) -> ModelDims:
    """Dimensions of a preset by name, e.g. ``nanochat-d26``."""
    match = _PRESET.fullmatch(name)
    if not match or int(match.group(1)) < 1:
        raise UnknownPreset(f"unknown model preset {name!r}: use nanochat-dN with N >= 1 (e.g. nanochat-d26)")
    depth = int(match.group(1))
    dim = math.ceil(64 * depth / 128) * 128
    heads = dim // HEAD_DIM
    return ModelDims(depth, dim, heads, heads, HEAD_DIM, vocab_size or NANOCHAT_VOCAB)


def target_steps(model: str, ratio: float, total_batch_size: int, vocab_size: int | None = None) -> int:
    """Optimizer steps to train ``model`` to ``ratio`` tokens per scaling parameter."""
    return math.floor(ratio * model_dims(model, vocab_size).scaling_params() / total_batch_size)
