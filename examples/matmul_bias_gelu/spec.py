"""Linear layer with a fused bias + GELU epilogue: y = gelu(x @ W^T + b).

Shape (M, N, K): x is (M, K), W is (N, K) as in nn.Linear, b is (N,).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "matmul_bias_gelu"
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 14336, 4096), (4097, 1537, 4096),
          (16384, 4096, 4096)]
INTERPRET_SHAPES = [(7, 33, 64), (33, 65, 127), (64, 64, 64)]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, weight, bias))


def make_inputs(shape, dtype, device, generator):
    m, n, k = shape
    x = torch.randn(m, k, generator=generator, device=device).to(dtype)
    # 1/sqrt(K) scaling keeps the pre-activation O(1), where GELU is not just ReLU.
    w = (torch.randn(n, k, generator=generator, device=device) / k**0.5).to(dtype)
    b = (0.1 * torch.randn(n, generator=generator, device=device)).to(dtype)
    return (x, w, b)


def BYTES(inputs, outputs) -> int:
    x, w, _b = inputs
    m, k = x.shape
    n = w.shape[0]
    return (m * k + n * k + n + m * n) * x.element_size()


def FLOPS(inputs, outputs) -> int:
    x, w, _ = inputs
    return 2 * x.shape[0] * x.shape[1] * w.shape[0]
