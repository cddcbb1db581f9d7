"""Softmax over the last dimension, ported from a kernel written in the style of Triton's
tutorials (kernel.py): a persistent program per slot striding over rows, its BLOCK_SIZE,
NUM_STAGES, warps and grid computed by its launcher. No TRITON_CONSTEXPRS: the porter records
how the launcher launches (porter.recorder), answering its device questions per target."""

from __future__ import annotations

import torch

NAME = "softmax_tutorial"
SHAPES = [(4096, 4096), (8192, 8192), (4096, 32768)]
INTERPRET_SHAPES = [(7, 129), (33, 1000)]
SMOKE_SHAPE = (7, 129)
DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TRITON_KERNEL = "kernel.py::_softmax_persistent_fwd_kernel"
TRITON_LAUNCHER = "kernel.py::softmax_forward"
# the launcher's own parameters: warps, rows in flight, and the grid size per SM/CU
TUNABLES = {"num_warps": [4, 8, 16], "num_stages": [2, 4], "programs_per_sm": [2, 4, 8]}


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def make_inputs(shape, dtype, device, generator):
    return ((3.0 * torch.randn(*shape, generator=generator, device=device)).to(dtype),)


def BYTES(inputs, outputs) -> int:
    x = inputs[0]
    return 2 * x.numel() * x.element_size()  # read x, write y


def FLOPS(inputs, outputs) -> int:
    return 5 * inputs[0].numel()  # max, sub, exp, sum, div
