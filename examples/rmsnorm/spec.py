"""RMSNorm over the last dimension: y = x / sqrt(mean(x^2) + eps) * weight.

Starting point: the A100-tuned Triton kernel in kernel.py (one row per program).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "rmsnorm"
EPS = 1e-6
# Issue 5's sweep (rows x hidden), then Llama-style batch*seq rows x hidden 4096/5120/8192.
SHAPES = [(4096, 4096), (16384, 8192), (32768, 4096), (8192, 5120), (4097, 1537), (4096, 32768),
          (8192, 4096), (8192, 8192), (16384, 5120)]
INTERPRET_SHAPES = [(7, 129), (33, 1000), (4, 4097), (16, 1024)]
SMOKE_SHAPE = (7, 129)
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TRITON_KERNEL = "kernel.py::_rmsnorm_fwd_kernel"
TRITON_LAUNCHER = "kernel.py::rmsnorm_forward"
TUNABLES = {"num_warps": [4, 8, 16]}  # BLOCK_N is pinned to next_pow2(n_cols) by the launcher


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, eps=EPS)


def make_inputs(shape, dtype, device, generator):
    rows, cols = shape
    x = torch.randn(rows, cols, generator=generator, device=device).to(dtype)
    w = (1.0 + 0.1 * torch.randn(cols, generator=generator, device=device)).to(dtype)
    return (x, w)


def TRITON_CONSTEXPRS(shape, dtype) -> dict:
    """BLOCK_N and num_warps as kernel.py's rmsnorm_forward picks them for `shape` (its A100
    policy), so the porter cross-compiles the existing kernel the way it would launch."""
    block_n = 1 << max(0, int(shape[-1]) - 1).bit_length()  # triton.next_power_of_2
    return {"BLOCK_N": block_n, "num_warps": 4 if block_n <= 1024 else 8 if block_n <= 4096 else 16}


def BYTES(inputs, outputs) -> int:
    x, w = inputs
    return 2 * x.numel() * x.element_size() + w.numel() * w.element_size()  # read x + w, write y


def FLOPS(inputs, outputs) -> int:
    return 4 * inputs[0].numel()  # square, add, scale, weight
