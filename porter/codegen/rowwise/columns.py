"""The column kernel: reductions over a dim that is not the innermost one (RMSNorm over the
channels of an NCHW tensor, a softmax or a sum over dim 0 of a 2-D tensor), reduced across
rows with coalesced loads.

Where the reduced dim is not the last, one row of the iteration space is strided in memory
(36_RMSNorm's 64 channels lie 512 * 512 elements apart), and a program that owns a few rows
reads a few elements per 32-byte sector. The column kernel turns the tile around: a program
takes BLOCK_I consecutive positions of the last dim (contiguous in memory) for one index of
the other row dims, and walks the reduced dim in chunks of BLOCK_R. Its tile is the looped
kernel's [ROWS, BLOCK_N] with ROWS = BLOCK_I positions and BLOCK_N = BLOCK_R steps of the
reduced dim, so the body is `looped.looped`'s (the reductions' loops, then a second pass that
re-reads the input for full outputs), emitted at the column kernel's coordinates:

- the positions `ii` (a [BLOCK_I, 1] range along the last dim) have a constexpr stride
  (`Coord.unit`), so that the compiler sees the unit stride and loads 16 bytes per thread;
- the running values are per position (the template binds LANES = VEC = 1): each chunk's max,
  sum or sum of squares is taken over its BLOCK_R steps inside the thread, and the positions
  combine nothing across threads;
- the other row dims come from the program's `outer` index (one per program, no per-element
  division), and the flat row index `rows = outer * n_inner + ii` is the same one the other
  kernels use, so a fold's words land where the fold reads them.

A program's positions stay inside one last-dim row: with several trailing dims (H and W of
NCHW) the addresses along the tile stay `base + ii`, which the compiler can prove contiguous
(a flat index over H * W would need a division per element and hide the contiguity). A last
dim shorter than BLOCK_I leaves lanes masked: the search offers blocks up to its length.

The kernel has its own arguments (`KernelArgs` of its own, starting from the other kernels'),
so that the constexpr strides it adds leave their signatures as they were.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import sympy

from porter.codegen.emit import ZERO
from porter.codegen.emit import Coord
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.plan import RowPlan
from porter.codegen.rowwise.analysis import full_coords
from porter.codegen.rowwise.looped import looped
from porter.codegen.rowwise.rowgen import RowGen


@dataclass
class ColumnBody:
    """The column kernel's pieces.

    Attributes:
        args: its runtime arguments: the other kernels' first, then what it adds (the
            constexpr stride of the last dim, the sizes of the outer dims).
        coord_lines: the statements binding each outer dim's coordinate from `outer`.
        body: the looped body at the column coordinates, at the kernel's indentation.
        n_inner: the last dim's length (a sympy expression): positions per outer index.
    """

    args: KernelArgs
    coord_lines: list[str]
    body: list[str]
    n_inner: Any


def applies(plan: RowPlan) -> bool:
    """Whether the column kernel is generated: the reduced dim is not the last and the last
    dim is not a single element (there would be no positions to coalesce)."""
    space = plan.space
    if len(space) < 2 or plan.dim >= len(space) - 1:
        return False
    last = sympy.sympify(space[-1])
    return not (last.is_Integer and int(last) == 1)


def column_coords(plan: RowPlan, args: KernelArgs) -> tuple[list[str], tuple[Coord, ...]]:
    """Coordinates of the row dims: the last one is the program's positions `ii`; the others
    come from the program's `outer` index (row-major over the row dims but the last)."""
    lines, coords = [], []
    outer_dims = plan.row_dims[:-1]
    for i, d in enumerate(outer_dims):
        size = plan.space[d]
        if size == 1:
            coords.append(ZERO)
            continue
        inner = sympy.Mul(*[plan.space[e] for e in outer_dims[i + 1:]])
        expr = "outer" if inner == 1 else f"(outer // {args.size(inner)})"
        if i > 0:
            expr = f"({expr} % {args.size(size)})"
        lines.append(f"r{d} = {expr}")
        coords.append(Coord(f"r{d}"))
    coords.append(Coord("ii", unit=True))
    return lines, tuple(coords)


def columns(rg: RowGen) -> ColumnBody | None:
    """The column kernel for `rg`'s plan, or None where it does not apply (`applies`).

    Args:
        rg: the other kernels' generation state (its fills are reused; its arguments are
            copied, not extended).
    """
    plan = rg.plan
    if not applies(plan):
        return None
    args = copy.deepcopy(rg.args)
    coord_lines, rc = column_coords(plan, args)
    col = RowGen(rg.g, plan, args, coord_lines, rc, full_coords(plan, rc), rg.outs, rg.pairs,
                 rg.variance, rg.ssq, dict(rg.fills))
    body, _ = looped(col)
    return ColumnBody(args, coord_lines, body, plan.space[-1])
