"""The nanochat-dN model (our implementation of the architecture described in REFERENCE.md).

Token embedding → for each layer i: x = resid_lambdas[i]·x + x0_lambdas[i]·x0, then attention and
a relu² MLP (pre-norm, RMSNorm without weights, no biases). Attention: rotary embedding, QK-norm;
layers with a value embedding add ``gate · ve`` to the values, gate = 2·sigmoid(ve_gate(x[..., :32])).
Untied lm_head with a tanh soft cap on the logits. Parameter names are the contract with the
optimizer and the communication-volume model (``payload.param_groups``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from payload.presets import VE_GATE_CHANNELS, ModelDims

LOGIT_SOFTCAP = 15.0


def _norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], dim=-1)


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

    def forward(self, x: torch.Tensor, ve: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.dims
        q = self.c_q(x).view(b, t, d.n_head, d.head_dim)
        k = self.c_k(x).view(b, t, d.n_kv_head, d.head_dim)
        v = self.c_v(x).view(b, t, d.n_kv_head, d.head_dim)
        if self.ve_gate is not None and ve is not None:
            gate = 2 * torch.sigmoid(self.ve_gate(x[..., :VE_GATE_CHANNELS]))
            v = v + gate.unsqueeze(-1) * ve.view(b, t, d.n_kv_head, d.head_dim)
        q, k = _norm(_rotary(q, cos, sin)), _norm(_rotary(k, cos, sin))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=d.n_head != d.n_kv_head)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, -1))


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

    def forward(self, x: torch.Tensor, ve: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(_norm(x), ve, cos, sin)
        return x + self.mlp(_norm(x))


class GPT(nn.Module):
    def __init__(self, dims: ModelDims, max_seq_len: int) -> None:
        super().__init__()
        self.dims = dims
        kv = dims.n_kv_head * dims.head_dim
        self.wte = nn.Embedding(dims.vocab_size, dims.dim)
        self.value_embeds = nn.ModuleDict({str(i): nn.Embedding(dims.vocab_size, kv) for i in range(dims.depth)
                                           if dims.has_value_embedding(i)})
        self.blocks = nn.ModuleList(Block(dims, dims.has_value_embedding(i)) for i in range(dims.depth))
        self.resid_lambdas = nn.Parameter(torch.ones(dims.depth))
        self.x0_lambdas = nn.Parameter(torch.full((dims.depth,), 0.1))
        self.lm_head = nn.Linear(dims.dim, dims.vocab_size, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dims.head_dim, 2, dtype=torch.float32) / dims.head_dim))
        freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq)
        self.cos_table: torch.Tensor
        self.sin_table: torch.Tensor
        self.register_buffer("cos_table", freqs.cos()[None, :, None, :], persistent=False)
        self.register_buffer("sin_table", freqs.sin()[None, :, None, :], persistent=False)
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self) -> None:
        if self.wte.weight.is_meta:
            return
        for block in self.blocks:
            assert isinstance(block, Block)
            nn.init.zeros_(block.attn.c_proj.weight)
            nn.init.zeros_(block.mlp.c_proj.weight)
            if block.attn.ve_gate is not None:
                nn.init.zeros_(block.attn.ve_gate.weight)
        nn.init.normal_(self.lm_head.weight, std=0.001)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        cos, sin = self.cos_table[:, :t], self.sin_table[:, :t]
        x = x0 = _norm(self.wte(idx))
        for i, block in enumerate(self.blocks):
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](idx) if str(i) in self.value_embeds else None
            x = block(x, ve, cos, sin)
        logits = self.lm_head(_norm(x)).float()
        logits = LOGIT_SOFTCAP * torch.tanh(logits / LOGIT_SOFTCAP)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6 × matmul parameters (embeddings excluded) + attention (12·L·d·T)."""
        embeddings = self.wte.weight.numel() + sum(p.numel() for p in self.value_embeds.parameters())
        scalars = self.resid_lambdas.numel() + self.x0_lambdas.numel()
        matmul = sum(p.numel() for p in self.parameters()) - embeddings - scalars
        d = self.dims
        return 6.0 * matmul + 12.0 * d.depth * d.n_head * d.head_dim * seq_len
