"""Cheaper math for kernels whose outputs are 16-bit floats.

`tl.erf` is libdevice's `erff`: accurate to ~1 ulp of fp32, and ~37 instructions per element
once its two coefficient sets are selected per element (read from the SASS of the GELU kernel
on sm_90: 125 MOVs, 62 constant HFMA2s, 16 FSEL for 16 elements). On an H100/H200 that makes a
bf16 GELU issue-bound, not memory-bound: 134M elements x 37 instructions ~ 170 us at 132 SMs x
128 lanes x ~1.8 GHz, against a 126 us memory floor on the H200 (eager PyTorch runs the same
erff and sits at ~70% of the copy bandwidth there).

A bf16 or fp16 output needs far less: half an ulp is 2^-9 (bf16) or 2^-11 (fp16) relative. So
where every output of a kernel is 16-bit, erf is computed from one formula without branches or
selects:

    erfc(z) = t * 2^(P(t) - z^2 log2(e)),  t = 1 / (1 + ERFC_P z),  z >= 0

with P a polynomial of degree 5 fitted here (`fit_erfc`), relative error < 1e-5 on [0, 10]
(erfc underflows fp32 past ~10). Then erf(y) = sign(y) (1 - erfc(|y|)) and, without the
cancellation of 1 + erf(y) for negative y, 1 + erf(y) = erfc(-y) (GELU's form: its negative
tail keeps its relative accuracy, which eager's 1 + erff(y) loses).
GELU itself, x (1 + erf(x / sqrt 2)) / 2, is one helper when the emitter sees its whole pattern
(`porter_gelu`): with h = erfc(|x| / sqrt 2) / 2 it is max(x, 0) - |x| h, the 1/2 folded into
the exponent and 1/sqrt 2 into the constants, ~17 instructions per element against ~21 for
the same formula spelled out op by op (bench/NOTES.md item 29: the matmul's fused epilogue is
issue-bound on these).
A kernel with an fp32 (or wider) output keeps `tl.erf`. The choice is made when the kernel is
compiled, from its output pointers' element types: one generated module serves every dtype.
"""

from __future__ import annotations

import math

import numpy as np

ERFC_P = 0.5
ERFC_DEGREE = 5
ERFC_Z_MAX = 10.0  # erfc(10) ~ 2e-45: past it the result is 0 in fp32 anyway
# P(t) coefficients (lowest degree first), in log2 units, from `fit_erfc()`; a test refits them
# and checks the formula against math.erfc and every bf16/fp16 GELU input.
ERFC_COEFFS = (-1.8272347000726568, 1.4687020023033799, 0.3669909544106984,
               0.6847461187821126, -1.0233351329663176, 0.33014189729393234)

# erf(y) = 2/sqrt(pi) (y - y^3/3 + y^5/10 - y^7/42 + y^9/216 - ...): coefficients of y^(2k+1)
# as a polynomial in y^2, used for |y| < 0.5 where 1 - erfc(|y|) would cancel.
ERF_TAYLOR = tuple(2.0 / math.sqrt(math.pi) * c
                   for c in (1.0, -1.0 / 3, 1.0 / 10, -1.0 / 42, 1.0 / 216))


def fit_erfc(degree: int = ERFC_DEGREE, p: float = ERFC_P, points: int = 100_001,
             rounds: int = 30) -> tuple[float, ...]:
    """Fit P in erfc(z) = t 2^(P(t) - z^2 log2 e), t = 1/(1 + p z), on z in [0, ERFC_Z_MAX].

    Weighted least squares, the weights raised where the error is largest (a cheap approach to
    the minimax fit). Returns the coefficients, lowest degree first.
    """
    z = np.linspace(0.0, ERFC_Z_MAX, points)
    erfc = np.array([math.erfc(v) for v in z])
    t = 1.0 / (1.0 + p * z)
    target = np.log2(erfc / t) + z * z / math.log(2.0)
    weights = np.ones_like(t)
    coeffs = np.polynomial.polynomial.polyfit(t, target, degree)
    for _ in range(rounds):
        coeffs = np.polynomial.polynomial.polyfit(t, target, degree, w=weights)
        err = np.abs(np.polynomial.polynomial.polyval(t, coeffs) - target)
        weights = weights * (1.0 + err / err.max())
    return tuple(float(c) for c in coeffs)


def erfc_pos(z: np.ndarray, coeffs: tuple[float, ...] = ERFC_COEFFS,
             dtype: type = np.float32) -> np.ndarray:
    """The kernel's formula for erfc(z), z >= 0, evaluated in `dtype` (numpy) as the kernel does."""
    z = np.asarray(z, dtype=dtype)
    r = dtype(1.0) / np.sqrt(dtype(1.0) + dtype(ERFC_P) * z)  # the kernel's rsqrt, squared
    t = r * r
    poly = np.full_like(t, dtype(coeffs[-1]))
    for c in reversed(coeffs[:-1]):
        poly = poly * t + dtype(c)
    return t * np.exp2(poly - z * z * dtype(1.0 / math.log(2.0)))


def gelu_lowp(x: np.ndarray, coeffs: tuple[float, ...] = ERFC_COEFFS) -> np.ndarray:
    """`porter_gelu`'s LOWP formula in numpy float32, step for step as the kernel runs it."""
    x = np.asarray(x, dtype=np.float32)
    f = np.float32
    r = f(1.0) / np.sqrt(f(1.0) + f(ERFC_P / math.sqrt(2.0)) * np.abs(x))
    t = r * r
    poly = np.full_like(t, f(coeffs[-1]))
    for c in reversed(coeffs[1:-1]):
        poly = poly * t + f(c)
    poly = poly * t + f(coeffs[0] - 1.0)  # the 1/2 of h, as 2^-1
    with np.errstate(over="ignore", invalid="ignore"):
        h = t * np.exp2(poly - x * x * f(0.5 / math.log(2.0)))
        return np.maximum(x, f(0.0)) - np.abs(x) * h


def triton_source() -> str:
    """The `@triton.jit` helpers a generated module gets when its graph computes erf."""
    taylor = f"{ERF_TAYLOR[-1]!r}"
    for c in reversed(ERF_TAYLOR[:-1]):
        taylor = f"({taylor}) * y2 + {c!r}"
    horner = f"{ERFC_COEFFS[-1]!r}"
    for c in reversed(ERFC_COEFFS[:-1]):
        horner = f"({horner}) * t + {c!r}"
    # the same polynomial with h's 1/2 folded in (2^(P - 1))
    half = f"{ERFC_COEFFS[-1]!r}"
    for c in reversed(ERFC_COEFFS[1:-1]):
        half = f"({half}) * t + {c!r}"
    half = f"({half}) * t + {ERFC_COEFFS[0] - 1.0!r}"
    return f'''

@triton.jit
def porter_erfc_pos(z):
    """erfc(z) for z >= 0, relative error < 1e-5 (porter/codegen/fastmath.py): one reciprocal,
    one exp2, {len(ERFC_COEFFS) + 2} FMAs, no branches."""
    # 1 / d as rsqrt(d)^2: d is in [1, 6], where the approximate rsqrt is one MUFU op; `/`
    # would add full division's range fixes (~6 instructions), and fast_dividef is CUDA-only.
    r = tl.rsqrt(1.0 + {ERFC_P!r} * z)
    t = r * r
    return t * tl.exp2({horner} - z * z * {1.0 / math.log(2.0)!r})


@triton.jit
def porter_erf(y, LOWP: tl.constexpr):
    """erf(y): libdevice's erff, or the cheaper formula when every output is 16-bit (LOWP)."""
    if LOWP:
        # Near 0, 1 - erfc(|y|) would leave an absolute error of ~1e-5 in a value ~1.13 y:
        # the Taylor series takes |y| < 0.5 (relative error < 5e-6 there).
        y2 = y * y
        small = y * ({taylor})
        e = porter_erfc_pos(tl.abs(y))
        return tl.where(tl.abs(y) < 0.5, small, tl.where(y < 0, e - 1.0, 1.0 - e))
    else:
        return tl.erf(y)


@triton.jit
def porter_gelu(x, LOWP: tl.constexpr):
    """GELU, x (1 + erf(x / sqrt 2)) / 2; LOWP: max(x, 0) - |x| h, h = erfc(|x| / sqrt 2) / 2
    (porter_erfc_pos with 1/sqrt 2 in its constants and the 1/2 in its exponent)."""
    if LOWP:
        r = tl.rsqrt(1.0 + {ERFC_P / math.sqrt(2.0)!r} * tl.abs(x))
        t = r * r
        h = t * tl.exp2({half} - x * x * {0.5 / math.log(2.0)!r})
        return tl.maximum(x, 0.0) - tl.abs(x) * h
    else:
        return x * 0.5 * (1.0 + tl.erf(x * {1.0 / math.sqrt(2.0)!r}))


@triton.jit
def porter_one_plus_erf(y, LOWP: tl.constexpr):
    """1 + erf(y) = erfc(-y); LOWP: without the cancellation of 1 + erf(y) for y < 0."""
    if LOWP:
        e = porter_erfc_pos(tl.abs(y))
        return tl.where(y < 0, e, 2.0 - e)
    else:
        return 1.0 + tl.erf(y)
'''
