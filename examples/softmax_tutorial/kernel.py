"""Fused softmax in the style of Triton's tutorial 02: one persistent program per slot strides
over rows, each row loaded once into registers (BLOCK_SIZE = next_power_of_2(n_cols) lanes),
exponentiated after subtracting its max and divided by its sum, in fp32.

The launcher sizes everything from the input and the device, as the tutorial does: BLOCK_SIZE
from the row width, NUM_STAGES (rows in flight in the row loop) from the device's shared memory,
num_warps from the row width, and the grid from the SM/CU count times `programs_per_sm`
(the tutorial computes that from the compiled kernel's occupancy; here it is a parameter so it
can be tuned). Nothing in it names a GPU: porting changes only these launch choices.
Source: https://triton-lang.org/main/getting-started/tutorials/02-fused-softmax.html
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime import driver


@triton.jit
def _softmax_persistent_fwd_kernel(
    y_ptr,  # output, [n_rows, n_cols]
    x_ptr,  # input, [n_rows, n_cols]
    stride_xm,  # elements between consecutive rows of x
    stride_ym,  # elements between consecutive rows of y
    n_rows,
    n_cols,
    BLOCK_SIZE: tl.constexpr,  # power of two >= n_cols: the whole row in one block
    NUM_STAGES: tl.constexpr,  # rows whose loads are in flight in the row loop
):
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    for row in tl.range(row_start, n_rows, row_step, num_stages=NUM_STAGES):
        # -inf in masked lanes: the identity of the max, and exp(-inf) = 0 in the sum
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        z = x - tl.max(x, axis=0)
        num = tl.exp(z)
        y = num / tl.sum(num, axis=0)
        tl.store(y_ptr + row * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax_forward(
    x: torch.Tensor,
    out: torch.Tensor | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    programs_per_sm: int = 4,
) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D `x`.

    Args:
        x: [n_rows, n_cols], any float dtype.
        out: optional output like `x`.
        num_warps: warps per program (default: by row width, as the tutorial).
        num_stages: rows in flight per program (default: 4 where a block may use more than
            200 KB of shared memory, else 2, as the tutorial).
        programs_per_sm: persistent programs per SM/CU; the grid is that times the unit count,
            at most one per row.

    Returns:
        The softmax (`out` when given).
    """
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got {tuple(x.shape)}")
    n_rows, n_cols = x.shape
    if x.stride(-1) != 1:
        x = x.contiguous()
    y = out if out is not None else torch.empty_like(x)
    props = driver.active.utils.get_device_properties(0)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    if num_warps is None:
        num_warps = 4 if BLOCK_SIZE <= 2048 else 8 if BLOCK_SIZE <= 8192 else 16
    if num_stages is None:
        num_stages = 4 if props["max_shared_mem"] > 200000 else 2
    num_programs = max(1, min(props["multiprocessor_count"] * programs_per_sm, n_rows))
    _softmax_persistent_fwd_kernel[(num_programs, 1, 1)](
        y, x, x.stride(0), y.stride(0), n_rows, n_cols,
        BLOCK_SIZE, num_stages,
        num_warps=num_warps,
    )
    return y


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.float(), dim=-1).to(x.dtype)
