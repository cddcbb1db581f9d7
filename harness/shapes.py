"""The shapes the judge runs a candidate at: the sweep (the problem's, shrunk under the
interpreter), the odd sizes (non-powers of two, one element, a prime) and the generic adversarial
inputs (extreme magnitudes, ties, special values)."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING
from typing import Any

import torch

from harness.problem import Problem
from harness.problem import Shape

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

# Sizes the odd-sizes stage puts in the innermost dim: non-powers of two around common widths,
# a single element and a small prime.
ODD_INNER_SIZES: tuple[int, ...] = (1023, 1537, 4097, 1, 7)
# Under the interpreter, shapes are shrunk until the product of their dims fits these budgets.
INTERPRET_SWEEP_BUDGET = 1 << 14
INTERPRET_ODD_BUDGET = 1 << 16


def shrink_shape(shape: Shape, budget: int, keep_last: bool = False) -> Shape:
    """Shrink `shape` until the product of its dims is <= budget, keeping its structure.

    The largest dim is halved (earliest first on ties); rank never changes and a dim that was
    not a power of two stays one (4097 -> 2048 -> 2047), so masking paths stay exercised.
    With `keep_last`, the innermost dim is never touched (odd-sizes: it is the point).
    """
    dims = list(shape)
    candidates = list(range(len(dims) - 1 if keep_last else len(dims)))
    while math.prod(dims) > budget:
        shrinkable = [i for i in candidates if dims[i] > 1]
        if not shrinkable:
            break
        i = max(shrinkable, key=lambda k: (dims[k], -k))
        d = dims[i]
        nd = max(1, d // 2)
        if not is_pow2(d) and is_pow2(nd) and nd > 2:
            nd -= 1
        dims[i] = nd
    return tuple(dims)


def sweep_shapes(problem: Problem, interpreted: bool) -> tuple[Shape, ...]:
    """The sweep stage's shapes: the problem's, or (interpreter) shrunk ones, de-duplicated.

    `problem.extra["interpret_shapes"]` overrides the shrinking under the interpreter.
    """
    if not interpreted:
        return dedup_shapes(tuple(s) for s in problem.sweep_shapes)
    given = problem.extra.get("interpret_shapes")
    if given:
        return dedup_shapes(tuple(s) for s in given)
    return dedup_shapes(
        shrink_shape(tuple(s), INTERPRET_SWEEP_BUDGET) for s in problem.sweep_shapes
    )


def odd_shapes(problem: Problem, interpreted: bool) -> tuple[Shape, ...]:
    """The odd-sizes stage's shapes: the problem's, or derived from the smoke shape.

    Derived: the innermost dim replaced by each of ODD_INNER_SIZES, plus one shape whose outer
    dims are odd too (3 and 5 rows). Under the interpreter, outer dims shrink only when the
    shape exceeds INTERPRET_ODD_BUDGET. `problem.extra["interpret_odd_shapes"]` overrides the
    shrinking under the interpreter (shapes that are not tensor dims, such as a KernelBench
    file's size globals, cannot be shrunk dim by dim: their owner sizes them).
    """
    given = problem.extra.get("interpret_odd_shapes")
    if interpreted and given:
        return dedup_shapes(tuple(s) for s in given)
    if problem.odd_shapes:
        shapes = [tuple(s) for s in problem.odd_shapes]
    else:
        smoke = tuple(problem.smoke_shape)
        shapes = [smoke[:-1] + (n,) for n in ODD_INNER_SIZES]
        if len(smoke) >= 2:
            shapes.append(
                tuple(3 if i % 2 == 0 else 5 for i in range(len(smoke) - 1)) + (ODD_INNER_SIZES[0],)
            )
    if interpreted:
        shapes = [shrink_shape(s, INTERPRET_ODD_BUDGET, keep_last=True) for s in shapes]
    return dedup_shapes(shapes)


def generic_adversarial(
    problem: Problem, shape: Shape, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> list[tuple[str, tuple[Any, ...]]]:
    """Adversarial inputs that make sense for any floating-point op.

    Only the first floating tensor input (the data) is replaced; others (weights, ...) keep
    their random values, so the op's own parameters stay in a sane range. Rows are the
    innermost dim.

    Cases: all values large and identical (softmax max-subtraction, norm overflow of x^2 in
    low precision), one all-equal row among random ones, near-zero-variance rows, values
    spanning many decades, values near the smallest normal, and for dtypes whose max squared
    still fits fp32 (fp16, fp8) values near the dtype's max.
    """
    base = problem.make_inputs(shape, dtype, device, gen)
    idx = next(
        (i for i, t in enumerate(base) if isinstance(t, torch.Tensor) and t.is_floating_point()),
        None,
    )
    if idx is None:
        return []
    x0 = base[idx]
    fi = torch.finfo(dtype)
    large = 0.9 * fi.max if fi.max < 1e5 else 1e4
    # Magnitudes 10^-d .. 10^d: d <= 6 keeps squares and sums of squares inside fp32 (the
    # accumulation dtype of a sane kernel), and 10^d stays a decade below the dtype's max.
    decades = min(6.0, math.log10(fi.max) - 1.0)

    def with_x(x: torch.Tensor) -> tuple[Any, ...]:
        x = x.to(device)
        return tuple(x.to(dtype) if i == idx else t for i, t in enumerate(base))

    def rand_like(x: torch.Tensor) -> torch.Tensor:
        # float64 so fp64's smallest normal does not underflow before the cast to `dtype`
        return torch.rand(x.shape, generator=gen, device=device, dtype=torch.float64)

    sign = torch.where(rand_like(x0) < 0.5, -1.0, 1.0)
    rows = x0.float().reshape(-1, x0.shape[-1]) if x0.dim() else x0.float().reshape(1, 1)
    cases: list[tuple[str, tuple[Any, ...]]] = []
    cases.append(
        (f"large_identical({large:g})", with_x(torch.full(x0.shape, large, device=device)))
    )
    eq = rows.clone()
    eq[0] = 3.0
    cases.append(("all_equal_row", with_x(eq.reshape(x0.shape))))
    centre = 1.0 + 4.0 * torch.rand(
        (rows.shape[0], 1), generator=gen, device=device, dtype=torch.float64
    )
    noise = 1e-3 * (torch.rand(rows.shape, generator=gen, device=device, dtype=torch.float64) - 0.5)
    cases.append(("near_zero_variance", with_x((centre * (1.0 + noise)).reshape(x0.shape))))
    expo = (rand_like(x0) * 2.0 - 1.0) * decades
    cases.append((f"dynamic_range(1e+-{decades:.0f})", with_x(sign * torch.pow(10.0, expo))))
    cases.append(("near_smallest_normal", with_x(sign * fi.tiny * (1.0 + 7.0 * rand_like(x0)))))
    if fi.max**2 < torch.finfo(torch.float32).max:
        cases.append(("near_dtype_max", with_x(sign * fi.max * (0.5 + 0.4 * rand_like(x0)))))
    return cases

def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0

def dedup_shapes(shapes: Any) -> tuple[Shape, ...]:
    seen: list[Shape] = []
    for s in shapes:
        if s not in seen:
            seen.append(s)
    return tuple(seen)
