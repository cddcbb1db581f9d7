"""A small stack of Llama-style decoder blocks, in KernelBench's level-3 problem format.

Each block: RMSNorm (Hugging Face's LlamaRMSNorm numerics: the row upcast to fp32, the weight
applied after the cast back), causal attention through `F.scaled_dot_product_attention`, a
residual add, RMSNorm, a SiLU-and-multiply MLP, a residual add. A final RMSNorm closes the stack.
So the model holds the groups the porter is built for: residual add + RMSNorm (two outputs),
SiLU-and-multiply, and the ones it cannot take (attention, the projections' plain matmuls).

Sizes: `SIZES["toy"]` runs in seconds on a CPU (the CI flow under the Triton interpreter;
"toy_bf16" the same in bf16);
`SIZES["realistic"]` is a Llama-2-7B-wide block stack (hidden 4096, MLP 11008, 32 heads) at a
batch of 4 x 2048 tokens in bf16, for a GPU. `get_init_inputs(size)` / `get_inputs(size)` take
the name; with no argument they use $LLAMA_BLOCK_SIZE, else "toy".
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

SIZES: dict[str, dict[str, object]] = {
    "toy": {"hidden": 64, "intermediate": 160, "heads": 4, "layers": 2, "batch": 2, "seq": 8,
            "dtype": torch.float32},
    "toy_bf16": {"hidden": 64, "intermediate": 160, "heads": 4, "layers": 2, "batch": 2, "seq": 8,
                 "dtype": torch.bfloat16},
    "realistic": {"hidden": 4096, "intermediate": 11008, "heads": 32, "layers": 2, "batch": 4,
                  "seq": 2048, "dtype": torch.bfloat16},
}
EPS = 1e-6


def _size(size: str | None) -> dict[str, object]:
    name = size or os.environ.get("LLAMA_BLOCK_SIZE", "toy")
    if name not in SIZES:
        raise ValueError(f"llama_block: unknown size {name!r}; choose from {', '.join(SIZES)}")
    return SIZES[name]


class RMSNorm(nn.Module):
    """Hugging Face LlamaRMSNorm: normalize in fp32, cast back, then scale by the weight."""

    def __init__(self, hidden: int, eps: float = EPS) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * h.to(dtype)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, intermediate: int, heads: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = Attention(hidden, heads)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = MLP(hidden, intermediate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


class Model(nn.Module):
    """`layers` decoder blocks and a final RMSNorm over (batch, seq, hidden) activations."""

    def __init__(self, hidden: int, intermediate: int, heads: int, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, intermediate, heads) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        # Norm weights near 1 but not 1, so a kernel that ignores the weight fails the check.
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, RMSNorm):
                    m.weight.add_(0.1 * torch.randn_like(m.weight))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def get_init_inputs(size: str | None = None) -> list[int]:
    s = _size(size)
    return [s["hidden"], s["intermediate"], s["heads"], s["layers"]]


def get_inputs(size: str | None = None) -> list[torch.Tensor]:
    s = _size(size)
    return [torch.randn(s["batch"], s["seq"], s["hidden"]).to(s["dtype"])]


def get_dtype(size: str | None = None) -> torch.dtype:
    """The dtype the model runs in at this size (its parameters are cast to it)."""
    return _size(size)["dtype"]  # type: ignore[return-value]
