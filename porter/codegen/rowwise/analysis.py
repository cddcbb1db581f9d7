"""What the row-wise generator reads off a `RowPlan` before emitting anything: the per-row
coordinates, the reduction identities, and the pairs of reductions one pass can share (online
softmax's max and sum of exps, the robust 2-norm's max and scaled sum of squares, layernorm's
mean and variance)."""

from __future__ import annotations

from typing import Any

import sympy

from porter.codegen.emit import ZERO
from porter.codegen.emit import Coord
from porter.codegen.ir import Node
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.plan import RowPlan

# argmax / argmin (rowwise.argreduce) take their value's identity; they have no COMBINE/REDUCE
IDENTITY = {"sum": "0.0", "max": "float('-inf')", "min": "float('inf')",
            "argmax": "float('-inf')", "argmin": "float('inf')"}
IDENTITY_VALUE = {"sum": 0.0, "max": float("-inf"), "min": float("inf"),
                  "argmax": float("-inf"), "argmin": float("inf")}
COMBINE = {"sum": "{a} + {b}", "max": "tl.maximum({a}, {b})", "min": "tl.minimum({a}, {b})"}
REDUCE = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min"}


def row_coords(plan: RowPlan, args: KernelArgs,
               dialect: str = "triton") -> tuple[list[str], tuple[Coord, ...]]:
    """Per-row coordinates of each non-reduced dim, from the flat row index `rows` (once per
    row). `dialect` "triton" or "metal" sets the integer division and declaration syntax."""
    div, decl, end = ("//", "", "") if dialect == "triton" else ("/", "long ", ";")
    lines, coords = [], []
    dims = plan.row_dims
    for i, d in enumerate(dims):
        size = plan.space[d]
        if size == 1:
            coords.append(ZERO)
            continue
        inner = sympy.Mul(*[plan.space[e] for e in dims[i + 1:]])
        expr = "rows" if inner == 1 else f"(rows {div} {args.size(inner)})"
        if i > 0:
            expr = f"({expr} % {args.size(size)})"
        if expr == "rows":
            coords.append(Coord("rows"))
        else:
            lines.append(f"{decl}r{d} = {expr}{end}")
            coords.append(Coord(f"r{d}"))
    return lines, tuple(coords)


def full_coords(plan: RowPlan, rc: tuple[Coord, ...], cols: str = "cols") -> tuple[Coord, ...]:
    c = list(rc)
    c.insert(plan.dim, Coord(cols, True))
    return tuple(c)


def coords_for(plan: RowPlan, node: Node, rc: tuple[Coord, ...]) -> tuple[Coord, ...]:
    """Row coordinates for a row-level node (shape = rows, or rows with a kept size-1 dim)."""
    if node.rank == len(plan.space):
        c = list(rc)
        c.insert(plan.dim, ZERO)
        return tuple(c)
    return rc


def online_pairs(plan: RowPlan) -> dict[int, Node]:
    """max-reduction id -> the sum of exp(g - max) that can share its loop (online softmax)."""
    pairs: dict[int, Node] = {}
    for s in plan.main:
        e = s.args[0]
        if s.attrs["kind"] != "sum" or e.op != "pw" or e.attrs["fn"] != "exp":
            continue
        sub = e.args[0]
        if not isinstance(sub, Node) or sub.op != "pw" or sub.attrs["fn"] != "sub":
            continue
        g, m = sub.args
        if isinstance(m, Node) and m.op == "reduce" and m.attrs["kind"] == "max" and \
                m in plan.main and m.args[0] is g and plan.main.index(m) == plan.main.index(s) - 1:
            pairs[m.id] = s
    return pairs


def ssq_pairs(plan: RowPlan) -> dict[int, Node]:
    """max|x| reduction id -> the sum of (|x| / max)^2 scaled by it (the robust 2-norm)."""
    pairs: dict[int, Node] = {}
    for s in plan.main:
        mid = s.attrs.get("scaled_by")
        m = next((r for r in plan.main if r.id == mid), None)
        if m is None or s.attrs["kind"] != "sum" or m.attrs["kind"] != "max":
            continue
        sq = s.args[0]  # mul(q, q), q = div(a, m), a = abs(x) = m's argument
        q = sq.args[0] if sq.op == "pw" and sq.attrs["fn"] == "mul" else None
        if q is None or sq.args[1] is not q or q.op != "pw" or q.attrs["fn"] != "div" or \
                q.args[0] is not m.args[0] or q.args[1] is not m:
            continue
        if plan.main.index(m) == plan.main.index(s) - 1:
            pairs[m.id] = s
    return pairs


def variance_pairs(plan: RowPlan) -> dict[int, Node]:
    """sum(x) reduction id -> sum((x - sum(x) / n)^2), n the row's length: layernorm's mean and
    variance, which one reduction of shifted sums gives (the VAR1 branch)."""
    pairs: dict[int, Node] = {}
    n = plan.space[plan.dim] if plan.space else None
    for s in plan.main:
        sq = s.args[0]
        if s.attrs["kind"] != "sum" or not isinstance(sq, Node) or sq.op != "pw" or \
                sq.attrs["fn"] != "mul" or sq.args[0] is not sq.args[1]:
            continue
        a = sq.args[0]
        if not isinstance(a, Node) or a.op != "pw" or a.attrs["fn"] != "sub":
            continue
        x, mean = a.args
        if not isinstance(mean, Node) or mean.op != "pw" or mean.attrs["fn"] != "div":
            continue
        r, count = mean.args
        if isinstance(r, Node) and r.op == "reduce" and r.attrs["kind"] == "sum" and \
                r in plan.main and r.args[0] is x and isinstance(x, Node) and \
                x.rank == len(plan.space) and sympy.simplify(sympy.sympify(count) - n) == 0 and \
                plan.main.index(r) < plan.main.index(s):
            pairs[r.id] = s
    return pairs




def size_exprs(plan: RowPlan) -> tuple[Any, Any]:
    """(n_rows, n_cols) as sympy expressions."""
    return sympy.Mul(*plan.row_shape), plan.space[plan.dim] if plan.space else sympy.Integer(1)
