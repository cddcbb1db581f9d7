"""GELU (exact, erf form), elementwise."""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "gelu"
SHAPES = [(4096, 4096), (16384, 8192), (32768, 4096), (8192, 5120), (4097, 1537), (4096, 32768),
          (8192, 14336), (8192, 28672)]  # the last two: Llama MLP intermediate widths
INTERPRET_SHAPES = [(7, 129), (33, 1000), (4, 4097)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def reference(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x)


def make_inputs(shape, dtype, device, generator):
    return ((2.0 * torch.randn(*shape, generator=generator, device=device)).to(dtype),)


def BYTES(inputs, outputs) -> int:
    x = inputs[0]
    return 2 * x.numel() * x.element_size()


def FLOPS(inputs, outputs) -> int:
    return 8 * inputs[0].numel()
