"""Softmax over the last dimension."""

from __future__ import annotations

import torch

NAME = "softmax"
# the last: Llama-3's 128256-wide vocabulary (rows too wide for one block: issue 31)
SHAPES = [(4096, 4096), (16384, 8192), (32768, 4096), (8192, 5120), (4097, 1537), (4096, 32768),
          (8192, 4096), (8192, 8192), (16384, 5120), (4096, 128256)]
INTERPRET_SHAPES = [(7, 129), (33, 1000), (4, 4097), (16, 1024)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def make_inputs(shape, dtype, device, generator):
    return ((3.0 * torch.randn(*shape, generator=generator, device=device)).to(dtype),)


def BYTES(inputs, outputs) -> int:
    x = inputs[0]
    return 2 * x.numel() * x.element_size()


def FLOPS(inputs, outputs) -> int:
    return 5 * inputs[0].numel()  # max, sub, exp, sum, div
