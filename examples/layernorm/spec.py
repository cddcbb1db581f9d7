"""LayerNorm over the last dimension with weight and bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "layernorm"
EPS = 1e-5
SHAPES = [(4096, 4096), (16384, 8192), (32768, 4096), (8192, 5120), (4097, 1537), (4096, 32768),
          (8192, 4096), (8192, 8192), (16384, 5120)]
INTERPRET_SHAPES = [(7, 129), (33, 1000), (4, 4097), (16, 1024)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=EPS)


def make_inputs(shape, dtype, device, generator):
    rows, cols = shape
    x = (2.0 * torch.randn(rows, cols, generator=generator, device=device) + 0.5).to(dtype)
    w = (1.0 + 0.1 * torch.randn(cols, generator=generator, device=device)).to(dtype)
    b = (0.1 * torch.randn(cols, generator=generator, device=device)).to(dtype)
    return (x, w, b)


def BYTES(inputs, outputs) -> int:
    x, w, b = inputs
    return 2 * x.numel() * x.element_size() + (w.numel() + b.numel()) * w.element_size()


def FLOPS(inputs, outputs) -> int:
    return 7 * inputs[0].numel()
