"""LayerNorm with Liger-Kernel's forward kernel and launcher, by import path (its shipped
config is one row per program with warps by row width: weak at width 32768 on an H100)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "liger_layernorm"
EPS = 1e-6
SHAPES = [(4096, 4096), (4096, 32768)]
INTERPRET_SHAPES = [(7, 129), (9, 1000)]
SMOKE_SHAPE = (7, 129)
DTYPES = [torch.bfloat16, torch.float32]
TRITON_KERNEL = "liger_kernel.ops.layer_norm:_layer_norm_forward_kernel"
TRITON_LAUNCHER = "liger_kernel.ops.layer_norm:layer_norm_forward"


def TRITON_CALL(launcher, x, w, b):
    # layer_norm_forward(X, W, B, eps) -> (Y, X, Mean, RSTD, BLOCK_SIZE, num_warps)
    return launcher(x, w, b, 1e-6)[0]


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps=EPS)


def make_inputs(shape, dtype, device, generator):
    rows, cols = shape
    x = torch.randn(rows, cols, generator=generator, device=device).to(dtype)
    w = (1.0 + 0.1 * torch.randn(cols, generator=generator, device=device)).to(dtype)
    b = (0.1 * torch.randn(cols, generator=generator, device=device)).to(dtype)
    return (x, w, b)


def BYTES(inputs, outputs) -> int:
    x, w, _ = inputs
    return 2 * x.numel() * x.element_size() + 2 * w.numel() * w.element_size()
