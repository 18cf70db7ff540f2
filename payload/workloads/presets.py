"""Model presets and the step count a target implies (pure: no torch).

``nanochat-dN``: the nanochat family (see REFERENCE.md). Depth N fixes the width:
model dim = 64·N rounded up to a multiple of 128, head dim 128, n_head = n_kv_head = dim / 128,
vocab 32,768 unless overridden. ``ModelDims.parameters()`` lists the model's parameters (name,
shape, dtype) without building it: the optimizer's plan, the communication volume and the memory
estimate all start from it (``tests/payload/test_model_build.py`` checks it against the model).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

NANOCHAT_VOCAB = 32_768
HEAD_DIM = 128
VE_GATE_CHANNELS = 32
_PRESET = re.compile(r"^nanochat-d(\d+)$")
WINDOW_PATTERN = "SSSL"
"""Sliding-window attention pattern tiled over the layers (the d26 record, a67eba3): S = a short window of half
the context, L = the full context; the last layer is always L."""
BF16_ROOTS = ("wte", "value_embeds")
"""Parameters stored (and communicated) in bf16, as upstream; every other parameter is f32."""
UPSTREAM_DIFFERENCES = (
    "The profile runs nanochat's model and its ZeRO-2 Muon + AdamW step, every collective in its parameter's "
    "dtype, as upstream (a67eba3). Where it differs, on purpose: Muon's orthogonalisation uses the classic "
    "quintic Newton-Schulz coefficients, not upstream's per-step Polar Express ones (the same matmuls), and "
    "upstream's NorMuon variance reduction and weight decay are left out (elementwise work on each rank's "
    "shard, estimated under 0.3 % of a d26 step); fp8 matmuls (the default on GPUs with fp8, as the record) are "
    "the payload's own tensorwise fp8 through the same torch._scaled_mm kernels as the record's torchao, opaque "
    "to torch.compile as upstream's own fp8 is; where the node has no Flash-Attention, attention runs compiled "
    "flex_attention with a sliding-window block mask instead of upstream's SDPA fallback (each result names its "
    "precision and attention kernel); the batches are synthetic unless the campaign asks for host tokenizing. "
    "Measured on one H100 (d12, batch 16, bf16, SDPA, compiled): its step is 1.009x upstream's.")
"""Where the profile's workload differs from upstream nanochat's, as the report tells its reader."""


class UnknownPreset(ValueError):
    """The name is not a model preset this payload knows."""


@dataclass(frozen=True)
class ParamSpec:
    """One model parameter: its name in ``named_parameters()``, its shape and its dtype (bf16 | f32)."""

    name: str
    shape: tuple[int, ...]
    dtype: str


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

    def parameters(self) -> list[ParamSpec]:
        """Every parameter of ``payload.workloads.model.GPT``, in its ``named_parameters()`` order (its own first)."""
        kv = self.n_kv_head * self.head_dim
        shapes: list[tuple[str, tuple[int, ...]]] = [("resid_lambdas", (self.depth,)), ("x0_lambdas", (self.depth,)),
                                                     ("wte.weight", (self.vocab_size, self.dim))]
        shapes += [(f"value_embeds.{i}.weight", (self.vocab_size, kv))
                   for i in range(self.depth) if self.has_value_embedding(i)]
        for i in range(self.depth):
            block = f"blocks.{i}"
            shapes += [(f"{block}.attn.c_q.weight", (self.n_head * self.head_dim, self.dim)),
                       (f"{block}.attn.c_k.weight", (kv, self.dim)), (f"{block}.attn.c_v.weight", (kv, self.dim)),
                       (f"{block}.attn.c_proj.weight", (self.dim, self.dim))]
            if self.has_value_embedding(i):
                shapes.append((f"{block}.attn.ve_gate.weight", (self.n_kv_head, VE_GATE_CHANNELS)))
            shapes += [(f"{block}.mlp.c_fc.weight", (4 * self.dim, self.dim)),
                       (f"{block}.mlp.c_proj.weight", (self.dim, 4 * self.dim))]
        shapes.append(("lm_head.weight", (self.vocab_size, self.dim)))
        return [ParamSpec(name, shape, "bf16" if name.split(".")[0] in BF16_ROOTS else "f32")
                for name, shape in shapes]

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


def window_sizes(depth: int, seq_len: int, pattern: str = WINDOW_PATTERN) -> list[int]:
    """Per layer, how many earlier tokens a token attends to (``seq_len``: the full causal context)."""
    sizes = [seq_len // 2 if pattern[i % len(pattern)] == "S" else seq_len for i in range(depth)]
    sizes[-1] = seq_len
    return sizes


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
