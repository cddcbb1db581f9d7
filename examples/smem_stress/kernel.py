"""Tiled matmul C = A @ B whose shared-memory footprint grows with its tile sizes and stages.

Each program computes one BLOCK_M x BLOCK_N tile of C, walking K in BLOCK_K steps and
accumulating in fp32 with `tl.dot`. With software pipelining (`num_stages`), the compiler keeps
several A and B tiles in flight in shared memory / LDS, so per block it needs about

    num_stages_buffered * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * sizeof(dtype)

bytes, which is what makes this kernel a good demonstration of a device-dependent fit: with
BLOCK_M=BLOCK_N=128, BLOCK_K=64 in bf16, num_warps=4 and num_stages=4 (and M, N, K and the strides
multiples of 16, so the loads vectorize and pipeline) Triton 3.9 keeps about 128 KB of tiles per
block on sm_90 and 96 KB of LDS per workgroup on gfx942: under the 227 KB an H100 block may
allocate, over the 64 KB of LDS an MI300X CU has. `porter compile` shows it:

    porter compile examples/smem_stress/kernel.py::_matmul_fwd_kernel --targets h100,mi300x \
        --constexpr BLOCK_M=128 --constexpr BLOCK_N=128 --constexpr BLOCK_K=64 --dtype bf16 \
        --num-warps 4 --num-stages 4 --divisible M --divisible N --divisible K \
        --divisible stride_am --divisible stride_bk --divisible stride_cm

It is a plain example of the Triton matmul tutorial's structure (no grouping, no masking on M/N
beyond the bounds check), kept short on purpose.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _matmul_fwd_kernel(
    a_ptr,  # [M, K]
    b_ptr,  # [K, N]
    c_ptr,  # [M, N]
    stride_am,
    stride_bk,
    stride_cm,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    # Wrap out-of-range rows/columns onto valid ones so loads stay in bounds unmasked; the
    # store below is masked, so the wrapped values are never written.
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :]

    # fp32 accumulator: bf16/fp16 partial sums over long K lose precision quickly.
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        # K is a multiple of BLOCK_K (the launcher checks), so the loads need no K mask and
        # the compiler can pipeline them through shared memory.
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :]
    c_mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


def matmul_forward(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor | None = None,
    block_m: int = 64,
    block_n: int = 64,
    block_k: int = 32,
) -> torch.Tensor:
    """C = A @ B for 2-D row-major `a` [M, K] and `b` [K, N].

    Args:
        a: left operand, [M, K].
        b: right operand, [K, N], same dtype and device as `a`.
        out: optional [M, N] output of `a`'s dtype; written and returned if given.
        block_m: tile rows (power of two, >= 16).
        block_n: tile columns (power of two, >= 16).
        block_k: reduction step (power of two, >= 16).

    Returns:
        The product (`out` when it was given).

    Raises:
        ValueError: when the shapes or dtypes do not agree.
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"need [M, K] @ [K, N], got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.shape[1] % block_k != 0:
        raise ValueError(f"K={a.shape[1]} must be a multiple of block_k={block_k}")
    if a.dtype != b.dtype:
        raise ValueError(f"a is {a.dtype}, b is {b.dtype}")
    m, k = a.shape
    n = b.shape[1]
    a = a.contiguous()
    b = b.contiguous()
    c = out if out is not None else torch.empty((m, n), dtype=a.dtype, device=a.device)
    if c.shape != (m, n) or c.dtype != a.dtype or not c.is_contiguous():
        raise ValueError(f"out must be a contiguous ({m}, {n}) {a.dtype} tensor")
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, block_n))
    _matmul_fwd_kernel[grid](
        a, b, c,
        a.stride(0), b.stride(0), c.stride(0),
        m, n, k,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
    )
    return c


def matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Plain PyTorch matmul in fp32, cast back to a's dtype."""
    return (a.float() @ b.float()).to(a.dtype)
