"""SwiGLU (silu(a) * b) with Liger-Kernel's forward kernel and launcher, by import path."""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "liger_swiglu"
SHAPES = [(4096, 4096), (4096, 14336)]
INTERPRET_SHAPES = [(7, 129), (9, 1000)]
SMOKE_SHAPE = (7, 129)
# No bf16: Liger multiplies silu(a) by b in bf16, and Triton 3.9's interpreter computes a
# bf16 x bf16 product from the bit patterns (1.92 * -0.245 gave 2.99e9, 2026-11-26), so the
# CPU check of any bf16 arithmetic is wrong; on a GPU bf16 is fine.
DTYPES = [torch.float16, torch.float32]
TRITON_KERNEL = "liger_kernel.ops.swiglu:_swiglu_forward_kernel"
TRITON_LAUNCHER = "liger_kernel.ops.swiglu:swiglu_forward"


def TRITON_CALL(launcher, a, b):
    # swiglu_forward(a, b, gate_multiplier=1.0) -> (a, b, c)
    return launcher(a, b)[2]


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def make_inputs(shape, dtype, device, generator):
    a = torch.randn(*shape, generator=generator, device=device).to(dtype)
    b = torch.randn(*shape, generator=generator, device=device).to(dtype)
    return (a, b)


def BYTES(inputs, outputs) -> int:
    a, _ = inputs
    return 3 * a.numel() * a.element_size()
