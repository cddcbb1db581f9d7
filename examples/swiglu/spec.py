"""SwiGLU gate: silu(a) * b, elementwise over two inputs of the same shape."""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "swiglu"
SHAPES = [(4096, 4096), (16384, 8192), (32768, 4096), (8192, 5120), (4097, 1537), (4096, 32768),
          (8192, 11008), (8192, 14336)]  # Llama-2-7B / Llama-3-8B intermediate widths
INTERPRET_SHAPES = [(7, 129), (33, 1000), (4, 4097)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def make_inputs(shape, dtype, device, generator):
    a = (2.0 * torch.randn(*shape, generator=generator, device=device)).to(dtype)
    b = torch.randn(*shape, generator=generator, device=device).to(dtype)
    return (a, b)


def BYTES(inputs, outputs) -> int:
    a = inputs[0]
    return 3 * a.numel() * a.element_size()  # read a, b; write y


def FLOPS(inputs, outputs) -> int:
    return 5 * inputs[0].numel()
