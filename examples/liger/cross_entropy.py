"""Per-row cross-entropy (reduction "none") with Liger-Kernel's forward kernel and launcher, by
import path. See README.md: its launcher validates targets with torch ops."""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "liger_cross_entropy"
SHAPES = [(4096, 4096)]
INTERPRET_SHAPES = [(7, 129), (9, 1000)]
SMOKE_SHAPE = (7, 129)
DTYPES = [torch.float32]
TRITON_KERNEL = "liger_kernel.ops.cross_entropy:liger_cross_entropy_kernel"
TRITON_LAUNCHER = "liger_kernel.ops.cross_entropy:cross_entropy_forward"


def TRITON_CALL(launcher, logits, target):
    # cross_entropy_forward(input, target, weight, ignore_index, lse_square_scale,
    #                       label_smoothing, reduction, softcap, return_z_loss) -> (loss, ...)
    return launcher(logits, target, None, -100, 0.0, 0.0, "none", None, False)[0]


def reference(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), target, reduction="none").to(logits.dtype)


def make_inputs(shape, dtype, device, generator):
    rows, classes = shape
    logits = (4.0 * torch.randn(rows, classes, generator=generator, device=device)).to(dtype)
    target = torch.randint(0, classes, (rows,), generator=generator, device=device)
    return (logits, target)


def BYTES(inputs, outputs) -> int:
    logits, target = inputs
    return logits.numel() * logits.element_size() + 2 * target.numel() * target.element_size()
