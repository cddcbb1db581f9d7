"""Residual add + RMSNorm (fused in transformer blocks): r = x + residual; y = rmsnorm(r) * w.

Two outputs: the normalized `y` and the new residual `r` (both in the input dtype).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "add_rmsnorm"
EPS = 1e-6
SHAPES = [(4096, 4096), (16384, 8192), (32768, 4096), (8192, 5120), (4097, 1537), (4096, 32768),
          (8192, 4096), (8192, 8192), (16384, 5120)]
INTERPRET_SHAPES = [(7, 129), (33, 1000), (4, 4097), (16, 1024)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r = x + residual
    return F.rms_norm(r, (r.shape[-1],), weight, eps=EPS), r


def make_inputs(shape, dtype, device, generator):
    rows, cols = shape
    x = torch.randn(rows, cols, generator=generator, device=device).to(dtype)
    res = (4.0 * torch.randn(rows, cols, generator=generator, device=device)).to(dtype)
    w = (1.0 + 0.1 * torch.randn(cols, generator=generator, device=device)).to(dtype)
    return (x, res, w)


def BYTES(inputs, outputs) -> int:
    x, _res, w = inputs
    # read x, res; write y, r
    return 4 * x.numel() * x.element_size() + w.numel() * w.element_size()


def FLOPS(inputs, outputs) -> int:
    return 5 * inputs[0].numel()
