"""RMSNorm with Liger-Kernel's forward kernel and launcher, by import path.

Casting mode "gemma" with offset 0: everything in fp32, rounded once at the end, which is
F.rms_norm. (Liger's "llama" mode rounds x * rstd to the input dtype before the weight multiply,
as Hugging Face's Llama does; that double rounding is outside the judge's bf16 tolerance
against F.rms_norm, so it would need a reference that rounds the same way.)"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "liger_rmsnorm"
EPS = 1e-6
SHAPES = [(4096, 4096), (4096, 32768)]
INTERPRET_SHAPES = [(7, 129), (9, 1000)]
SMOKE_SHAPE = (7, 129)
DTYPES = [torch.bfloat16, torch.float32]
TRITON_KERNEL = "liger_kernel.ops.rms_norm:_rms_norm_forward_kernel"
TRITON_LAUNCHER = "liger_kernel.ops.rms_norm:rms_norm_forward"


def TRITON_CALL(launcher, x, w):
    # rms_norm_forward(X, W, eps, offset, casting_mode, row_mode)
    #   -> (Y, X, RSTD, BLOCK, warps, mode)
    return launcher(x, w, 1e-6, 0.0, "gemma", None)[0]


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, eps=EPS)


def make_inputs(shape, dtype, device, generator):
    rows, cols = shape
    x = torch.randn(rows, cols, generator=generator, device=device).to(dtype)
    w = (1.0 + 0.1 * torch.randn(cols, generator=generator, device=device)).to(dtype)
    return (x, w)


def BYTES(inputs, outputs) -> int:
    x, w = inputs
    return 2 * x.numel() * x.element_size() + w.numel() * w.element_size()
