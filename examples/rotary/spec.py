"""Rotary position embedding, rotate_half form (as in Llama): y = x*cos + rotate_half(x)*sin.

Shape (tokens, heads, head_dim); cos/sin are (tokens, head_dim) from the real rotary
frequencies theta_i = base^(-2i/head_dim), base 10000, positions 0..tokens-1.
"""

from __future__ import annotations

import torch

NAME = "rotary"
BASE = 10000.0
# (batch*seq tokens, heads, head_dim): Llama-2-7B (32 heads), Llama-3-70B (64 heads), plus an
# odd token count.
SHAPES = [(4096, 32, 128), (16384, 32, 128), (8192, 64, 128), (4097, 32, 128), (32768, 8, 128)]
INTERPRET_SHAPES = [(7, 3, 64), (33, 2, 128), (5, 4, 32)]
# head_dim stays even (rotate_half splits it in two); tokens and heads go odd and tiny.
ODD_SHAPES = [(1, 1, 64), (13, 5, 32), (31, 3, 128)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


def rotary_cos_sin(tokens: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(tokens, dtype=torch.float64), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos(), emb.sin()


def make_inputs(shape, dtype, device, generator):
    tokens, heads, head_dim = shape
    x = torch.randn(tokens, heads, head_dim, generator=generator, device=device).to(dtype)
    # Random starting position so every trial sees different angles, as in decoding.
    # Drawn on the generator's own device: make_inputs is also called with device="meta" (to
    # size a problem without allocating), where .item() has no value to read.
    start = int(torch.randint(0, 4096, (1,), generator=generator, device=generator.device).item())
    cos, sin = rotary_cos_sin(start + tokens, head_dim)
    return (
        x,
        cos[start:].to(device=device, dtype=dtype),
        sin[start:].to(device=device, dtype=dtype),
    )


def BYTES(inputs, outputs) -> int:
    x, cos, _sin = inputs
    return 2 * x.numel() * x.element_size() + 2 * cos.numel() * cos.element_size()


def FLOPS(inputs, outputs) -> int:
    return 3 * inputs[0].numel()
