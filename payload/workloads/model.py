"""The nanochat-dN model (our implementation of the architecture described in REFERENCE.md).

Token embedding → for each layer i: x = resid_lambdas[i]·x + x0_lambdas[i]·x0, then attention and
a relu² MLP (pre-norm, RMSNorm without weights, no biases). Attention: rotary embedding, QK-norm;
layers with a value embedding add ``gate · ve`` to the values, gate = 2·sigmoid(ve_gate(x[..., :32])).
Untied lm_head with a tanh soft cap on the logits. Parameter names are the contract with the
optimizer and the communication-volume model (``payload.workloads.param_groups``); ``ModelDims.parameters()``
lists them without building the model.

As upstream, the token and value embeddings are stored in bf16 (so are the rotary tables); every
other parameter is f32 and the compute runs under bf16 autocast on GPU (f32 on CPU, where the
embeddings' output is cast up); with ``fp8`` the Linears the record converts run their matmuls in fp8
(``payload.workloads.fp8``). Attention is causal with upstream's sliding-window pattern
(``payload.workloads.presets.window_sizes``: short windows on most layers) on the fastest kernel the node has
(``payload.workloads.attention``: FA3, FA2, compiled flex_attention, SDPA); ``GPT.attention`` names it.
``build_model`` builds the module on the ``meta`` device and
materialises it directly on the target device (``to_empty`` + ``init_weights``): no host copy of
the weights, no CPU init.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import Kernel, attend, block_mask, choose
from .presets import VE_GATE_CHANNELS, ModelDims, window_sizes

LOGIT_SOFTCAP = 15.0
ROPE_BASE = 10000


def build_model(dims: ModelDims, max_seq_len: int, device: torch.device | str, seed: int = 0, *,
                compiled: bool = False, fp8: bool = False, attention: str | None = None) -> GPT:
    """The model, built on ``meta`` and materialised on ``device`` (``meta`` itself: nothing is allocated).
    ``compiled``: the caller will ``torch.compile`` it (flex_attention is chosen only then);
    ``fp8``: the record's Linears run fp8 matmuls (``payload.workloads.fp8.convert``); ``attention``: pin
    the kernel (``payload.workloads.attention.choose``; None: the fastest the node has)."""
    with torch.device("meta"):
        model = GPT(dims, max_seq_len)
    if fp8:
        from .fp8 import convert

        convert(model)
    device = torch.device(device)
    if device.type == "meta":
        return model
    model.kernel = choose(device, compiled, attention)
    materialise(model, device)
    model.init_weights(seed)
    if model.kernel.name == "flex":  # the masks exist before compilation: the compiled graph only reads them
        for window in set(model.window_sizes):
            if window < max_seq_len - 1:
                block_mask(model.kernel, window, max_seq_len, device)
    return model


def materialise(model: nn.Module, device: torch.device) -> None:
    """``model.to_empty(device=device)`` without its ``empty_like``, which on ``meta`` imports torch's
    symbolic shapes (0.4 s of CPU per rank); every tensor of the model is contiguous, so an ``empty`` of
    its shape is the same."""
    model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))


def _embedding(rows: int, dim: int) -> nn.Embedding:
    """A bf16 embedding whose weight is left uninitialised (``init_weights`` sets it): nn.Embedding's own
    ``normal_`` on ``meta`` goes through torch's Python reference ops, which import torch._dynamo
    (about 1.4 s of CPU per rank, for values ``materialise`` throws away)."""
    return nn.Embedding(rows, dim, _weight=torch.empty(rows, dim, dtype=torch.bfloat16))


def _compute_dtype(device: torch.device) -> torch.dtype:
    """bf16 under autocast (GPU), else f32: what the embeddings' output is cast to."""
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return torch.float32


def _norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, dims: ModelDims, has_value_embedding: bool) -> None:
        super().__init__()
        self.dims = dims
        kv = dims.n_kv_head * dims.head_dim
        self.c_q = nn.Linear(dims.dim, dims.n_head * dims.head_dim, bias=False)
        self.c_k = nn.Linear(dims.dim, kv, bias=False)
        self.c_v = nn.Linear(dims.dim, kv, bias=False)
        self.c_proj = nn.Linear(dims.dim, dims.dim, bias=False)
        self.ve_gate = nn.Linear(VE_GATE_CHANNELS, dims.n_kv_head, bias=False) if has_value_embedding else None

    def forward(self, x: torch.Tensor, ve: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, window: int,
                kernel: Kernel) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.dims
        q = self.c_q(x).view(b, t, d.n_head, d.head_dim)
        k = self.c_k(x).view(b, t, d.n_kv_head, d.head_dim)
        v = self.c_v(x).view(b, t, d.n_kv_head, d.head_dim)
        if self.ve_gate is not None and ve is not None:
            gate = 2 * torch.sigmoid(self.ve_gate(x[..., :VE_GATE_CHANNELS]))
            v = v + gate.unsqueeze(-1) * ve.to(v.dtype).view(b, t, d.n_kv_head, d.head_dim)
        q, k = _norm(_rotary(q, cos, sin)), _norm(_rotary(k, cos, sin))
        return self.c_proj(attend(q, k, v, window, kernel).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim, bias=False)
        self.c_proj = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, dims: ModelDims, has_value_embedding: bool) -> None:
        super().__init__()
        self.attn = Attention(dims, has_value_embedding)
        self.mlp = MLP(dims.dim)

    def forward(self, x: torch.Tensor, ve: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, window: int,
                kernel: Kernel) -> torch.Tensor:
        x = x + self.attn(_norm(x), ve, cos, sin, window, kernel)
        return x + self.mlp(_norm(x))


class GPT(nn.Module):
    def __init__(self, dims: ModelDims, max_seq_len: int) -> None:
        super().__init__()
        self.dims = dims
        self.max_seq_len = max_seq_len
        self.window_sizes = window_sizes(dims.depth, max_seq_len)
        self.kernel = Kernel()
        """The attention kernel (``payload.workloads.attention.choose``); ``build_model`` picks it for the device."""
        kv = dims.n_kv_head * dims.head_dim
        self.wte = _embedding(dims.vocab_size, dims.dim)
        self.value_embeds = nn.ModuleDict({str(i): _embedding(dims.vocab_size, kv)
                                           for i in range(dims.depth) if dims.has_value_embedding(i)})
        self.blocks = nn.ModuleList(Block(dims, dims.has_value_embedding(i)) for i in range(dims.depth))
        self.resid_lambdas = nn.Parameter(torch.ones(dims.depth))
        self.x0_lambdas = nn.Parameter(torch.full((dims.depth,), 0.1))
        self.lm_head = nn.Linear(dims.dim, dims.vocab_size, bias=False)
        self.cos_table: torch.Tensor
        self.sin_table: torch.Tensor
        # On ``meta`` only the shape counts: computing the tables there would run torch's Python
        # reference ops, which import torch._dynamo (``_embedding``); ``init_weights`` computes them.
        shape = (1, max_seq_len, 1, dims.head_dim // 2)
        self.register_buffer("cos_table", torch.empty(shape, dtype=torch.bfloat16), persistent=False)
        self.register_buffer("sin_table", torch.empty(shape, dtype=torch.bfloat16), persistent=False)
        if not self.wte.weight.is_meta:
            self.init_weights()

    def _rotary_tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        head_dim = self.dims.head_dim
        inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
        freqs = torch.outer(torch.arange(self.max_seq_len, dtype=torch.float32, device=device), inv_freq)
        return (freqs.cos().bfloat16()[None, :, None, :], freqs.sin().bfloat16()[None, :, None, :])

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Set every parameter and buffer from ``seed`` alone (after ``to_empty`` nothing else is defined)."""
        device = self.wte.weight.device
        generator = torch.Generator(device=device).manual_seed(seed)
        for embedding in (self.wte, *self.value_embeds.values()):
            assert isinstance(embedding, nn.Embedding)
            embedding.weight.normal_(0.0, 1.0, generator=generator)
        for block in self.blocks:
            assert isinstance(block, Block)
            for linear in (block.attn.c_q, block.attn.c_k, block.attn.c_v, block.mlp.c_fc):
                bound = linear.weight.size(1) ** -0.5
                linear.weight.uniform_(-bound, bound, generator=generator)
            for zeroed in (block.attn.c_proj, block.mlp.c_proj, block.attn.ve_gate):
                if zeroed is not None:
                    zeroed.weight.zero_()
        self.resid_lambdas.fill_(1.0)
        self.x0_lambdas.fill_(0.1)
        self.lm_head.weight.normal_(0.0, 0.001, generator=generator)
        cos, sin = self._rotary_tables(device)
        self.cos_table.copy_(cos)
        self.sin_table.copy_(sin)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        cos, sin = self.cos_table[:, :t], self.sin_table[:, :t]
        dtype = _compute_dtype(idx.device)
        x = x0 = _norm(self.wte(idx).to(dtype))
        for i, block in enumerate(self.blocks):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](idx) if str(i) in self.value_embeds else None
            x = block(x, ve, cos, sin, self.window_sizes[i], self.kernel)
        logits = self.lm_head(_norm(x)).float()
        logits = LOGIT_SOFTCAP * torch.tanh(logits / LOGIT_SOFTCAP)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    @property
    def attention(self) -> str:
        """The attention kernel's name, as every sample records it."""
        return self.kernel.name

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 × matmul parameters (embeddings excluded) + attention, 12·d·min(window, T)
        per layer (as upstream: a short-window layer attends to fewer tokens)."""
        embeddings = self.wte.weight.numel() + sum(p.numel() for p in self.value_embeds.parameters())
        scalars = self.resid_lambdas.numel() + self.x0_lambdas.numel()
        matmul = sum(p.numel() for p in self.parameters()) - embeddings - scalars
        d = self.dims
        attended = sum(min(window, seq_len) for window in self.window_sizes)
        return 6.0 * matmul + 12.0 * d.n_head * d.head_dim * attended
