"""Per-GPU memory of the profile phase, estimated from the preset before anything is rented (pure: no torch).

``estimate(model, sequence_len, device_batch_size, world_size)`` returns the peak GiB one rank
needs, as the sum of:

- ``weights``: every parameter in its own dtype (``ModelDims.parameters()``: wte and the value
  embeddings bf16, the rest f32), replicated on every rank (ZeRO-2 shards no weights).
- ``grads``: one gradient per parameter in the parameter's dtype, alive across the micro-steps of
  gradient accumulation (so the next micro-step's activations sit on top of them).
- ``autocast_copies``: the bf16 copies of the f32 matmul weights (block matrices, lm_head) that
  autocast casts once per forward and keeps for the backward.
- ``optimizer_state``: what ``payload.optim`` keeps, sharded as it shards it: two AdamW moments in
  the parameter's dtype for this rank's 1/W rows of wte, the value embeddings and lm_head (whole
  for the small scalars), and Muon's f32 momentum for the ceil(K/W) matrices of each group it owns.
- ``activations``: what autograd saves for the backward under bf16 autocast, per token:
  ``ACT_BYTES_PER_LAYER_DIM`` × layers × model dim (q, k, v after rotary and QK-norm, the attention
  output, the residual stream and norms, the MLP's 4·d relu and relu² outputs, value embeddings,
  plus the backward's working copies) and ``LOGIT_BYTES_PER_VOCAB`` × vocab: the logits in f32
  for the loss (the soft-capped logits, log-softmax and their gradients), which dominate at
  nanochat's vocabulary: B × T × V × 4 bytes is 4 GiB per copy for d12 at batch 16.
- ``optimizer_transients`` replaces ``activations`` when larger (the step runs after the backward
  freed them): the zero-padded Muon stacks of every group at once, and the shards being updated.
- ``OVERHEAD_GIB``: CUDA context, cuBLAS/NCCL workspaces and allocator fragmentation.

Calibration: the two per-token coefficients and the overhead reproduce an H100 high-water mark
(nanochat-d12, device batch 16, sequence 2,048, one GPU: 37.41 GiB; this model says 37.41) and the growth
with batch and depth of an earlier calibrated table (d12/d20/d26 at batch 8/16/32 on 8 GPUs:
20.5/36.9/69.8, 40.3/71.8/134.6, 63.1/110.7/205.9 GiB; this model gives each within 2.5 %). It is
eager PyTorch's footprint; ``torch.compile`` fuses the logits' chain and needs less, so the
estimate errs on the side of refusing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .param_groups import BYTES, param_groups
from .presets import model_dims

GIB = 1024**3
ACT_BYTES_PER_LAYER_DIM = 60
"""Bytes saved per token per layer per model-dim channel (≈ 30 bf16 tensors of width d)."""
LOGIT_BYTES_PER_VOCAB = 16
"""Bytes per token per vocabulary entry: four f32 copies of the logits at the loss's peak."""
OVERHEAD_GIB = 1.69


@dataclass(frozen=True)
class MemoryEstimate:
    """GiB per GPU, by term (see the module doc); ``total_gib`` is what must fit the card."""

    weights_gib: float
    grads_gib: float
    autocast_copies_gib: float
    optimizer_state_gib: float
    activations_gib: float
    optimizer_transients_gib: float
    overhead_gib: float

    @property
    def total_gib(self) -> float:
        static = self.weights_gib + self.grads_gib + self.autocast_copies_gib + self.optimizer_state_gib
        return static + max(self.activations_gib, self.optimizer_transients_gib) + self.overhead_gib

    def as_dict(self) -> dict[str, float]:
        return {**{k: round(v, 3) for k, v in asdict(self).items()}, "total_gib": round(self.total_gib, 2)}


def estimate(model: str, sequence_len: int, device_batch_size: int, world_size: int,
             vocab_size: int | None = None) -> MemoryEstimate:
    """Peak memory of one rank of the profile (raises ``UnknownPreset`` for an unknown model)."""
    if min(sequence_len, device_batch_size, world_size) < 1:
        raise ValueError("sequence_len, device_batch_size and world_size must be >= 1")
    dims = model_dims(model, vocab_size)
    weights = grads = autocast = state = transients = 0.0
    for group in param_groups(dims.parameters()):
        size = BYTES[group.dtype]
        group_bytes = len(group.names) * group.elements_per_param * size
        weights += group_bytes
        grads += group_bytes
        if group.kind == "muon":
            autocast += len(group.names) * group.elements_per_param * BYTES["bf16"]
            owned = math.ceil(len(group.names) / world_size) * group.elements_per_param * size
            state += owned  # momentum
            transients += group.padded_count(world_size) * group.elements_per_param * size + 2 * owned
        elif group.adamw_sharded(world_size):
            if group.name == "lm_head":
                autocast += group_bytes * BYTES["bf16"] / size
            state += 2 * group_bytes / world_size  # exp_avg, exp_avg_sq of the owned rows
            transients += group_bytes / world_size  # the reduce-scattered gradient shard
        else:
            state += 2 * group_bytes
    tokens = device_batch_size * sequence_len
    activations = tokens * (ACT_BYTES_PER_LAYER_DIM * dims.depth * dims.dim + LOGIT_BYTES_PER_VOCAB * dims.vocab_size)
    return MemoryEstimate(weights / GIB, grads / GIB, autocast / GIB, state / GIB, activations / GIB,
                          transients / GIB, OVERHEAD_GIB)
