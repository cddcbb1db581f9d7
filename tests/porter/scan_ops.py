"""The scan forms of KernelBench level 1's 89-93, shared by the interpreter tests
(test_codegen_scan.py) and the GPU ones (test_codegen_scan_gpu.py). A module of its own: the
interpreter tests set TRITON_INTERPRET=1 when imported, which would make the GPU tests interpret
too."""

from __future__ import annotations

import torch


def cumsum(x):
    return torch.cumsum(x, dim=1)


def cumprod(x):
    return torch.cumprod(x, dim=1)


def cumsum_reverse(x):
    return torch.cumsum(x.flip(1), dim=1).flip(1)


def cumsum_exclusive(x):
    c = torch.cumsum(x.narrow(dim=1, start=0, length=x.size(1) - 1), dim=1)
    return torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)), c), dim=1)


def masked_cumsum(x, mask):
    return torch.cumsum(x * mask, dim=1)
