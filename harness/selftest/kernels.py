"""Self-test kernels: one correct row-wise softmax and the purpose-built bad ones.

Every kernel shares one Triton body, `_softmax_selftest_fwd_kernel`; the bad behaviours are
constexpr switches (compiled away when off) or launcher tricks, so each bad kernel differs from
the good one in exactly the way it is meant to be caught:

| launcher          | what is wrong                                      | who must catch it  |
|-------------------|----------------------------------------------------|--------------------|
| softmax_good      | nothing                                            | passes all stages  |
| softmax_bias      | output scaled by (1 + 1e-3)                        | smoke (numeric)    |
| softmax_unwritten | skips the last row                                 | smoke (poison NaN) |
| softmax_pow2      | no mask; handles n rounded down to a power of two  | odd_sizes          |
| softmax_noisy     | relative noise ~5e-7 from a clock-seeded hash      | determinism        |
| softmax_torch     | computes with torch.softmax, no kernel at all      | no_torch_compute   |
| SoftmaxEarly      | writes `out` after returning (thread / side stream)| completion         |
| SoftmaxMemo       | skips work when called again with the same buffers | stale_output, and  |
|                   |                                                    | the roofline (GPU) |

This file is imported by `harness.selftest.runner` under a module name per mode, with
TRITON_INTERPRET set accordingly, because @triton.jit picks interpreter or compiler when the
decorator runs.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_selftest_fwd_kernel(
    x_ptr,
    out_ptr,
    stride_xm,
    stride_om,
    n_cols,
    seed,  # only read when NOISY
    BLOCK_N: tl.constexpr,
    MASKED: tl.constexpr,  # False: assumes n_cols == BLOCK_N (the power-of-two-only bug)
    BIASED: tl.constexpr,
    NOISY: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    x_row = x_ptr + row * stride_xm
    if MASKED:
        x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"))
    else:
        x = tl.load(x_row + offs)
    # fp32 math whatever the storage dtype: exp of fp16 values would lose the small entries.
    x = x.to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    if BIASED:
        # 1e-3 relative: 100x the fp32 tolerance, invisible by eye
        y = y * (1.0 + 1e-3)
    if NOISY:
        # +-5e-7 relative: inside every tolerance, but not bitwise repeatable. A cheap hash of
        # (position, clock seed) instead of tl.rand, which is slow under the interpreter; two
        # launches agree only if their seeds agree mod 1009.
        h = ((offs * 7 + seed) % 1009).to(tl.float32) / 1009.0
        y = y * (1.0 + 1e-6 * (h - 0.5))
    o_row = out_ptr + row * stride_om
    if MASKED:
        tl.store(o_row + offs, y.to(out_ptr.dtype.element_ty), mask=offs < n_cols)
    else:
        tl.store(o_row + offs, y.to(out_ptr.dtype.element_ty))


def _num_warps(block_n: int) -> int:
    return 4 if block_n <= 2048 else 8 if block_n <= 8192 else 16


def _launch(
    x: torch.Tensor,
    out: torch.Tensor,
    *,
    rows: int | None = None,
    masked: bool = True,
    biased: bool = False,
    noisy: bool = False,
) -> torch.Tensor:
    if x.dim() != 2 or out.shape != x.shape:
        raise ValueError(
            f"softmax self-test kernels take 2-D x and out of the same shape, got "
            f"{tuple(x.shape)} and {tuple(out.shape)}"
        )
    n_rows, n_cols = x.shape
    if masked:
        block_n = triton.next_power_of_2(n_cols)
    else:
        block_n = 1 << (n_cols.bit_length() - 1)  # n rounded down to a power of two
    grid_rows = n_rows if rows is None else rows
    if grid_rows > 0:
        seed = time.time_ns() & 0x3FFFFFFF  # < 2^30 so offs * 7 + seed fits int32
        _softmax_selftest_fwd_kernel[(grid_rows,)](
            x,
            out,
            x.stride(0),
            out.stride(0),
            n_cols,
            seed,
            BLOCK_N=block_n,
            MASKED=masked,
            BIASED=biased,
            NOISY=noisy,
            num_warps=_num_warps(block_n),
        )
    return out


def softmax_good(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """Correct row-wise softmax: must pass all five stages and every guard."""
    return _launch(x, out)


def softmax_bias(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """Wrong by a small relative bias (1e-3)."""
    return _launch(x, out, biased=True)


def softmax_unwritten(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """Leaves the last row unwritten (grid one short)."""
    return _launch(x, out, rows=x.shape[0] - 1)


def softmax_pow2(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """Correct only when the row width is a power of two: no mask, n rounded down."""
    return _launch(x, out, masked=False)


def softmax_noisy(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """Adds a ~5e-7 relative perturbation seeded from the clock: never bitwise repeatable."""
    return _launch(x, out, noisy=True)


def softmax_torch(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """Does the work with torch, not a kernel (right numbers, wrong claim)."""
    out.copy_(torch.softmax(x.float(), dim=-1))
    return out


class SoftmaxEarly:
    """Returns before the work is done.

    CPU: a background thread launches the kernel a moment later. GPU: the kernel is queued on a
    side stream behind a ~30 ms spin, and the caller's stream is never told to wait for it.
    """

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self._side: Any = None

    def __call__(self, x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            if self._side is None:
                self._side = torch.cuda.Stream(device=x.device)
            self._side.wait_stream(torch.cuda.current_stream(x.device))  # inputs are ready
            with torch.cuda.stream(self._side):
                torch.cuda._sleep(50_000_000)  # ~30 ms of spinning at ~1.7 GHz
                _launch(x, out)
            return out

        def late() -> None:
            # Well after the harness snapshots the output (it does so right after the call
            # returns), and well inside its wait (check.CPU_COMPLETION_WAIT_S): at 2 ms a loaded
            # 2-core machine sometimes took the snapshot after the write, and a later stage
            # caught the kernel instead.
            time.sleep(0.02)
            _launch(x, out)

        t = threading.Thread(target=late, daemon=True)
        t.start()
        self.threads.append(t)
        return out

    def join(self) -> None:
        """Wait for late writers (so a test does not leave threads running)."""
        for t in self.threads:
            t.join()
        if self._side is not None:
            self._side.synchronize()


class SoftmaxMemo:
    """Memoizes by pointer: a call with the same input and output buffers launches nothing.

    Repeated timing calls with the same buffers therefore cost nothing on the device, a speed
    no kernel can reach; and new contents in the same buffers give stale results.
    """

    def __init__(self) -> None:
        self.seen: set[tuple[Any, ...]] = set()
        self.hits = 0

    def __call__(self, x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        key = (x.data_ptr(), out.data_ptr(), tuple(x.shape), x.dtype)
        if key in self.seen:
            self.hits += 1
            return out
        self.seen.add(key)
        return _launch(x, out)
