"""A small GPT in the nanochat style, sized by a preset (torch).

Rotary position embedding, QK-norm, relu² MLP, RMSNorm without weights, no biases, untied
embedding and lm_head. This is the walking skeleton's workload; the faithful nanochat preset
(value embeddings, residual scalars) is tracked separately.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from payload.presets import ModelDims


def _rms_norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.size(-1),))


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, dims: ModelDims) -> None:
        super().__init__()
        self.dims = dims
        kv = dims.n_kv_head * dims.head_dim
        self.c_q = nn.Linear(dims.dim, dims.n_head * dims.head_dim, bias=False)
        self.c_k = nn.Linear(dims.dim, kv, bias=False)
        self.c_v = nn.Linear(dims.dim, kv, bias=False)
        self.c_proj = nn.Linear(dims.dim, dims.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        d = self.dims
        q = self.c_q(x).view(b, t, d.n_head, d.head_dim)
        k = self.c_k(x).view(b, t, d.n_kv_head, d.head_dim)
        v = self.c_v(x).view(b, t, d.n_kv_head, d.head_dim)
        q, k = _rms_norm(_rotary(q, cos, sin)), _rms_norm(_rotary(k, cos, sin))
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim, bias=False)
        self.c_proj = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, dims: ModelDims) -> None:
        super().__init__()
        self.attn = Attention(dims)
        self.mlp = MLP(dims.dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(_rms_norm(x), cos, sin)
        return x + self.mlp(_rms_norm(x))


class GPT(nn.Module):
    def __init__(self, dims: ModelDims, max_seq_len: int) -> None:
        super().__init__()
        self.dims = dims
        self.wte = nn.Embedding(dims.vocab_size, dims.dim)
        self.blocks = nn.ModuleList(Block(dims) for _ in range(dims.depth))
        self.lm_head = nn.Linear(dims.dim, dims.vocab_size, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dims.head_dim, 2, dtype=torch.float32) / dims.head_dim))
        freqs = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), inv_freq)
        self.cos_table: torch.Tensor
        self.sin_table: torch.Tensor
        self.register_buffer("cos_table", freqs.cos()[None, :, None, :], persistent=False)
        self.register_buffer("sin_table", freqs.sin()[None, :, None, :], persistent=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        cos, sin = self.cos_table[:, :t], self.sin_table[:, :t]
        x = _rms_norm(self.wte(idx))
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.lm_head(_rms_norm(x)).float()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
