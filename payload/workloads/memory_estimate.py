"""Per-GPU memory of the profile phase, estimated from the preset before anything is rented (pure: no torch).

``estimate(model, sequence_len, device_batch_size, world_size, compiled=...)`` returns the peak GiB
one rank needs, as the sum of:

- ``weights``: every parameter in its own dtype (``ModelDims.parameters()``: wte and the value
  embeddings bf16, the rest f32), replicated on every rank (ZeRO-2 shards no weights).
- ``grads``: one gradient per parameter in the parameter's dtype, alive across the micro-steps of
  gradient accumulation (so the next micro-step's activations sit on top of them).
- ``autocast_copies``: the bf16 copies of the f32 matmul weights (block matrices, lm_head) that
  autocast casts once per forward and keeps for the backward.
- ``optimizer_state``: what ``payload.workloads.optim`` keeps, sharded as it shards it: two AdamW moments in
  the parameter's dtype for this rank's 1/W rows of wte, the value embeddings and lm_head (whole
  for the small scalars), and Muon's f32 momentum for the ceil(K/W) matrices of each group it owns.
- ``activations``: what autograd saves for the backward under bf16 autocast, per token:
  ``ACT_BYTES_PER_LAYER_DIM`` × layers × model dim (q, k, v after rotary and QK-norm, the attention
  output, the residual stream and norms, the MLP's 4·d relu and relu² outputs, value embeddings,
  plus the backward's working copies) and ``LOGIT_BYTES_PER_VOCAB`` × vocab: the logits in f32
  for the loss (the soft-capped logits, log-softmax and their gradients), which dominate at
  nanochat's vocabulary: B × T × V × 4 bytes is 4 GiB per copy for d12 at batch 16.
- ``optimizer_transients`` replace ``activations`` when larger (the step runs after the backward
  freed them): the zero-padded Muon stacks of every group at once, and the shards being updated.
- ``compiled_slack`` (compiled only, below): what the caching allocator holds beyond
  ``max_memory_allocated`` under ``torch.compile``, taken as the optimizer's transients at world
  size 1 whatever the world size (the full Muon stacks are allocated on every rank).
- ``OVERHEAD_GIB``: CUDA context, cuBLAS/NCCL workspaces and allocator fragmentation.

The target is the card's view, ``nvidia-smi``'s memory in use at the phase's peak (what must fit),
measured on one H200 at world size 1 (docs/measurements/2026-11-25-gpu-h200.md; the estimate at
world size 1 in brackets, every one above the measurement):

- eager (``compiled=False``): d12 at batch 16 36.4 GiB [37.4], d20 at batch 16 70.7 GiB [73.8].
  The coefficients ``ACT_BYTES_PER_LAYER_DIM`` and ``LOGIT_BYTES_PER_VOCAB`` (f32 logits: B × T × V × 4
  bytes is 4 GiB per copy for d12 at batch 16) came from an earlier calibrated table and hold.
- ``torch.compile``d (the default on GPU): d12 b16 19.5 [20.0], d20 b16 43.8 [48.5], d26 b8 54.7
  [56.6], d26 b16 80.3 [82.4] GiB. Inductor fuses the logits' chain and saves fewer tensors, so the
  per-token coefficients are ``*_COMPILED`` (a least-squares fit of ``max_memory_allocated`` gave
  34.6 and 3.3, rounded up); what the allocator held beyond that grew with the Muon stacks
  (3.4 GiB at d12 to 13–15 GiB at d26): ``compiled_slack``. At world size 8 the estimate is an
  extrapolation (the optimizer state sharded as ``payload.workloads.optim`` shards it; NCCL's buffers for 8
  ranks were not in the measurement).

fp8 (``precision: fp8``, ``payload.workloads.fp8``) is judged as bf16: no term for its smaller saved
activations. Upstream published a figure (karpathy/nanochat, dev/LOG.md, the 2026-02-02 entry on
fp8 training with torchao, commit a67eba3): at d26 on 8 H100s, tensorwise fp8 used about 9 GB less
than bf16, which its author put down to activations saved in fp8. That is published, not measured
here, and it does not carry over to this estimate: the entry gives neither the device batch nor how
memory was read (GB or GiB, allocator or ``nvidia-smi``); it was torchao's Float8Linear, not
``payload.workloads.fp8.Fp8Matmul``, which saves the e4m3 input and weight for the backward and so frees a
Linear's bf16 input only where no other op saves it too (how much that is depends on the graph
Inductor builds). The estimate exists to refuse, before anything is rented, a batch that cannot fit:
an over-estimate costs a smaller batch, an under-estimate an out-of-memory on a billed node. Judged
as bf16, upstream's own batch (d26 at 16 on 8 ranks: 76.8 GiB against an H100's 79.6) fits already;
what it refuses that the published saving might let through is d26 at 16 on one H100 (82.4 GiB).
The profile records ``mem_est_gib`` beside ``max_mem_allocated_gib`` in every sample, so an fp8 run
on a GPU gives the figure an fp8 term should be fitted to.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .param_groups import BYTES, ParamGroup, param_groups
from .presets import model_dims

GIB = 1024**3
ACT_BYTES_PER_LAYER_DIM = 60
"""Bytes saved per token per layer per model-dim channel (≈ 30 bf16 tensors of width d)."""
LOGIT_BYTES_PER_VOCAB = 16
"""Bytes per token per vocabulary entry: four f32 copies of the logits at the loss's peak."""
ACT_BYTES_PER_LAYER_DIM_COMPILED = 36
LOGIT_BYTES_PER_VOCAB_COMPILED = 4
"""The same under ``torch.compile`` (fitted on the H200 measurements above, rounded up)."""
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
    compiled_slack_gib: float
    overhead_gib: float

    @property
    def total_gib(self) -> float:
        static = self.weights_gib + self.grads_gib + self.autocast_copies_gib + self.optimizer_state_gib
        peak = max(self.activations_gib, self.optimizer_transients_gib) + self.compiled_slack_gib
        return static + peak + self.overhead_gib

    def as_dict(self) -> dict[str, float]:
        return {**{k: round(v, 3) for k, v in asdict(self).items()}, "total_gib": round(self.total_gib, 2)}


def estimate(model: str, sequence_len: int, device_batch_size: int, world_size: int,
             vocab_size: int | None = None, *, compiled: bool) -> MemoryEstimate:
    """Peak memory of one rank of the profile, eager or ``torch.compile``d (raises ``UnknownPreset``
    for an unknown model)."""
    if min(sequence_len, device_batch_size, world_size) < 1:
        raise ValueError("sequence_len, device_batch_size and world_size must be >= 1")
    dims = model_dims(model, vocab_size)
    groups = param_groups(dims.parameters())
    weights, autocast, state, transients = _parameter_terms(groups, world_size)
    tokens = device_batch_size * sequence_len
    per_layer_dim, per_vocab = ((ACT_BYTES_PER_LAYER_DIM_COMPILED, LOGIT_BYTES_PER_VOCAB_COMPILED) if compiled
                                else (ACT_BYTES_PER_LAYER_DIM, LOGIT_BYTES_PER_VOCAB))
    activations = tokens * (per_layer_dim * dims.depth * dims.dim + per_vocab * dims.vocab_size)
    slack = _parameter_terms(groups, 1)[3] if compiled else 0.0
    return MemoryEstimate(weights / GIB, weights / GIB, autocast / GIB, state / GIB, activations / GIB,
                          transients / GIB, slack / GIB, OVERHEAD_GIB)


def _parameter_terms(groups: list[ParamGroup], world_size: int) -> tuple[float, float, float, float]:
    """Bytes of the weights (= the gradients), the autocast copies, this rank's optimizer state and
    the optimizer's transients at ``world_size``."""
    weights = autocast = state = transients = 0.0
    for group in groups:
        size = BYTES[group.dtype]
        group_bytes = len(group.names) * group.elements_per_param * size
        weights += group_bytes
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
    return weights, autocast, state, transients
