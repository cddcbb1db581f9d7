"""Self-test Metal kernels: one correct row-wise softmax and five with real Metal bugs.

They run on the CPU Metal executor (targets.metal_exec), which is what the *emulated* tier
rests on; each must be caught by the stage named here, for the reason named here:

| kernel                  | the bug                                | caught by                    |
|-------------------------|----------------------------------------|------------------------------|
| metal_good              | none (SIMD-group reductions, float4    | passes all stages            |
|                         | loads on aligned rows)                 |                              |
| metal_missing_barrier   | no threadgroup_barrier between the     | smoke (error: data race)     |
|                         | SIMD-groups' partials written to       |                              |
|                         | threadgroup memory and read back       |                              |
| metal_wrong_threads     | assumes 256 threads per threadgroup    | smoke (error: uninitialized  |
|                         | (reads the partials of SIMD-groups     | threadgroup read)            |
|                         | that were never launched)              |                              |
| metal_small_threadgroup | one threadgroup slot per thread in a   | sweep (error: out of bounds, |
|                         | 256-slot array, launched with up to    | at the first row wider than  |
|                         | 1024 threads                           | 256)                         |
| metal_full_simd         | a simd_shuffle_down tree that assumes  | odd_sizes (NaN: a row        |
|                         | 32 active lanes (the last SIMD-group   | shorter than the SIMD-group  |
|                         | of a 1023-wide row has 31)             | reads absent lanes)          |
| metal_off_by_one        | the scalar (unaligned-row) loop stops  | odd_sizes (NaN: last column  |
|                         | at n - 1                               | never written)               |
| metal_row_overrun       | the last loop writes one element past  | smoke (error: the next row's |
|                         | its row, into the next row's first     | threadgroup writes it too: a |
|                         |                                        | race)                        |

The host side is the same for all: one threadgroup per row, min(n_cols, 1024) threads (so a
row shorter than 32 has a partial SIMD-group), n_cols as a `constant uint&`. The self-test's
powers-of-two shapes (harness.selftest.problem) keep the odd-size bugs hidden until the stage
that exists to find them.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from targets.metal_exec import MetalProgram

BUGS = {"good": 0, "missing_barrier": 1, "full_simd": 2, "off_by_one": 3,
        "small_threadgroup": 4, "wrong_threads": 5, "row_overrun": 6}
_T = {torch.float32: "float", torch.float16: "half", torch.bfloat16: "bfloat"}

BODY = r"""
#include <metal_stdlib>
using namespace metal;

enum { GOOD = 0, NO_BARRIER = 1, FULL_SIMD = 2, OFF_BY_ONE = 3, SMALL_TG = 4, WRONG_THREADS = 5,
       ROW_OVERRUN = 6 };
constant uint ASSUMED_THREADS = 256;  // what WRONG_THREADS takes threads_per_threadgroup to be

// op 0: sum, 1: max, over the threadgroup; `part` holds one float per SIMD-group (SMALL_TG: one
// per thread, 256 of them).
template <int BUG, int OP>
static inline float block_reduce(float v, threadgroup float* part, uint tid, uint lane, uint sg,
                                 uint tpt)
{
    if (BUG == SMALL_TG) {
        part[tid] = v;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (tid == 0) {
            for (uint i = 1; i < tpt; ++i) v = OP == 0 ? v + part[i] : fmax(v, float(part[i]));
            part[0] = v;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float r = part[0];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        return r;
    }
    float r;
    if (BUG == FULL_SIMD) {
        r = v;
        for (ushort d = 16; d > 0; d >>= 1) {
            float o = simd_shuffle_down(r, d);
            r = OP == 0 ? r + o : fmax(r, o);
        }
    } else {
        r = OP == 0 ? simd_sum(v) : simd_max(v);
    }
    if (lane == 0) part[sg] = r;
    if (BUG != NO_BARRIER) threadgroup_barrier(mem_flags::mem_threadgroup);
    // Every thread combines the partials in one order (bitwise the same everywhere). Not
    // simd_sum(part[lane]): the last SIMD-group of a 1023-thread threadgroup has 31 lanes and
    // would miss part[31] (the executor caught exactly that in this kernel's first draft).
    uint nsg = BUG == WRONG_THREADS ? ASSUMED_THREADS / 32 : (tpt + 31) / 32;
    r = part[0];
    for (uint i = 1; i < nsg; ++i) r = OP == 0 ? r + part[i] : fmax(r, float(part[i]));
    threadgroup_barrier(mem_flags::mem_threadgroup);  // part is written again by the next call
    return r;
}

template <typename T, int BUG>
static inline void softmax_row(device const T* x, device T* out, uint n, uint row, uint tid,
                               uint lane, uint sg, uint tpt, threadgroup float* part)
{
    typedef vec<T, 4> T4;
    device const T* xr = x + row * n;
    device T* yr = out + row * n;
    uint stride = BUG == WRONG_THREADS ? ASSUMED_THREADS : tpt;
    // rows start 4-element aligned when n % 4 == 0: whole rows as 4-wide vectors
    uint nvec = n % 4 == 0 ? n / 4 : 0;
    uint end = BUG == OFF_BY_ONE ? n - 1 : n;
    device const T4* xv = (device const T4*)(xr);
    device T4* yv = (device T4*)(yr);
    float m = -INFINITY;
    for (uint i = tid; i < nvec; i += stride) {
        T4 v = xv[i];
        m = fmax(m, fmax(fmax(float(v.x), float(v.y)), fmax(float(v.z), float(v.w))));
    }
    for (uint c = nvec * 4 + tid; c < end; c += stride) m = fmax(m, float(xr[c]));
    m = block_reduce<BUG, 1>(m, part, tid, lane, sg, tpt);
    float s = 0.0f;
    for (uint i = tid; i < nvec; i += stride) {
        T4 v = xv[i];
        s += exp(float(v.x) - m) + exp(float(v.y) - m) + exp(float(v.z) - m) + exp(float(v.w) - m);
    }
    for (uint c = nvec * 4 + tid; c < end; c += stride) s += exp(float(xr[c]) - m);
    s = block_reduce<BUG, 0>(s, part, tid, lane, sg, tpt);
    for (uint i = tid; i < nvec; i += stride) {
        T4 v = xv[i];
        yv[i] = T4(T(exp(float(v.x) - m) / s), T(exp(float(v.y) - m) / s),
                   T(exp(float(v.z) - m) / s), T(exp(float(v.w) - m) / s));
    }
    uint wend = BUG == ROW_OVERRUN ? n + 1 : end;
    for (uint c = nvec * 4 + tid; c < wend; c += stride) yr[c] = T(exp(float(xr[c]) - m) / s);
}
"""

KERNEL = r"""
kernel void softmax_{variant}_{t}(
    device const {t}* x [[buffer(0)]],
    device {t}* out [[buffer(1)]],
    constant uint& n [[buffer(2)]],
    uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_position_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint tpt [[threads_per_threadgroup]])
{{
    threadgroup float part[{slots}];
    softmax_row<{t}, {bug}>(x, out, n, row, tid, lane, sg, tpt, part);
}}
"""


def source() -> str:
    """The Metal source of every self-test kernel, for every dtype (one file, one build)."""
    parts = [BODY]
    for variant, bug in BUGS.items():
        slots = 256 if variant == "small_threadgroup" else 32
        for t in _T.values():
            parts.append(KERNEL.format(variant=variant, t=t, bug=bug, slots=slots))
    return "".join(parts)


@functools.lru_cache(maxsize=1)
def program() -> MetalProgram:
    """The compiled program (built once per process; the library is cached on disk)."""
    return MetalProgram(source())


class MetalSoftmax:
    """`candidate(x, out=out)`: one self-test kernel launched on the CPU Metal executor."""

    def __init__(self, variant: str) -> None:
        if variant not in BUGS:
            raise ValueError(f"unknown Metal self-test kernel {variant!r}; known: {list(BUGS)}")
        self.variant = variant
        self.__name__ = f"metal_{variant}"

    def __call__(self, x: torch.Tensor, *, out: torch.Tensor) -> Any:
        if x.dim() != 2 or out.shape != x.shape or x.dtype not in _T or out.dtype != x.dtype:
            raise ValueError(f"Metal softmax self-test kernels take 2-D x and out of one shape "
                             f"and dtype, got {tuple(x.shape)} {x.dtype} and {tuple(out.shape)} "
                             f"{out.dtype}")
        if not (x.is_contiguous() and out.is_contiguous()):
            raise ValueError("Metal softmax self-test kernels take contiguous x and out")
        rows, n = x.shape
        if rows and n:
            program().launch(f"softmax_{self.variant}_{_T[x.dtype]}", [x, out, n],
                             threadgroups=(rows,), threads=(min(n, 1024),))
        return out
