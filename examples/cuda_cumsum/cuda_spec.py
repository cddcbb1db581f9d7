"""Inclusive cumulative sum along the last dim, brought as an existing CUDA C++ kernel.

`porter port examples/cuda_cumsum/cuda_spec.py --agent claude` asks the model to port `kernel.cu`
to Triton (NVIDIA, AMD) and to Metal (Apple), and the harness judges the result against
`reference` below (the offline porter's own scan template covers cumsum too, Triton only).
(Named cuda_spec.py, not spec.py: the template-only tools, e.g. bench/port_budget.py, port every
examples/*/spec.py.)
"""

import torch

NAME = "cuda_cumsum"
CUDA_KERNEL = "kernel.cu::cumsum_rows"
CUDA_SIGNATURE = ("void cumsum_rows(const float* x, float* y, int n_rows, int n_cols)"
                  "  // <<<n_rows, 256>>>")
SHAPES = [(4096, 4096), (16384, 1024), (1024, 32768)]
INTERPRET_SHAPES = [(5, 37), (3, 300)]
SMOKE_SHAPE = (5, 37)
ODD_SHAPES = [(2, 1), (3, 7), (2, 1023), (1, 1537)]
DTYPES = [torch.float32]


def reference(x):
    return torch.cumsum(x, dim=-1)


def make_inputs(shape, dtype, device, generator):
    return (torch.randn(*shape, generator=generator, device=device).to(dtype),)
