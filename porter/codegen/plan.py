"""Classify a traced graph into a template family and work out the rowwise iteration space."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

import sympy

from porter.codegen.errors import UnsupportedOpError
from porter.codegen.ir import Graph
from porter.codegen.ir import Node


@dataclass
class RowPlan:
    """A rowwise kernel: iterate rows of `space` (all dims but `dim`), columns along `dim`.

    main: reductions along `dim` in topological order; post: full reductions of row-level
    values (a second tiny kernel); out_kind[j]: "full" | "row" | "scalar" per output.
    """

    space: tuple[Any, ...]
    dim: int
    main: list[Node] = field(default_factory=list)
    post: list[Node] = field(default_factory=list)
    out_kind: list[str] = field(default_factory=list)

    @property
    def row_dims(self) -> list[int]:
        return [d for d in range(len(self.space)) if d != self.dim]

    @property
    def row_shape(self) -> tuple[Any, ...]:
        return tuple(self.space[d] for d in self.row_dims)


def classify(g: Graph) -> str:
    """'matmul_epilogue' | 'matmul_rowwise' | 'scan' | 'rowwise' | 'elementwise' (raises for
    what no template covers).

    scan: a cumulative sum or product with elementwise ops around it
    (porter/codegen/generation/scan.py).

    matmul_rowwise: matmuls (one, or a chain) whose output, after elementwise ops, is reduced
    row by row; porter.codegen.matmul_rowwise cuts the graph after each matmul's epilogue (and
    raises where one intermediate cannot carry a matmul's result on)."""
    live = g.live()
    mms = [n for n in live if n.op == "mm"]
    reds = [n for n in live if n.op == "reduce"]
    scans = [n for n in live if n.op == "scan"]
    if scans:
        if mms or reds:
            raise UnsupportedOpError(scans[0].origin, "a scan in one op with a matmul or a "
                                     "reduction is not covered")
        return "scan"
    if mms:
        if reds and any(r.id < mms[-1].id for r in reds):
            raise UnsupportedOpError("aten.mm", "a reduction before a matmul")
        if reds:
            return "matmul_rowwise"
        if len(mms) > 1:
            raise UnsupportedOpError("aten.mm", "more than one matmul in one op with no "
                                     "row-wise reduction after them")
        return "matmul_epilogue"
    return "rowwise" if reds else "elementwise"


def _eq(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(sympy.simplify(x - y) == 0 for x, y in zip(a, b, strict=True))


def unflattens(o: Node, space: tuple[Any, ...]) -> bool:
    """True when output `o` is a reshape of an iteration-space value (a flattened row split
    back into its dims, as multi-dim layer norm produces, or group norm's (N, G, row) rows
    back to (N, C, L) of the same rank, or to (N, C) of a lower one): it is stored element
    for element."""
    return (o.op == "reshape" and isinstance(o.args[0], Node) and _eq(o.args[0].shape, space)
            and not _eq(o.shape, space))


def row_plan(g: Graph) -> RowPlan:
    """Pick the iteration space and reduction dim; split reductions into main and post.

    Raises:
        UnsupportedOpError: reductions along different dims, or over several (not all) dims.
    """
    live = g.live()
    reds = [n for n in live if n.op == "reduce"]
    single = [r for r in reds if len(r.attrs["dims"]) == 1 and r.args[0].rank > 0]
    if not single and reds:
        # Only full reductions (torch.sum(x)): reduce the last dim first, then the rows.
        r = reds[0]
        x = r.args[0]
        if x.rank == 0:
            raise UnsupportedOpError(r.origin, "reduction of a scalar")
        inner = g.add("reduce", (x,), x.shape[:-1], r.dtype, r.origin, kind=r.attrs["kind"],
                      dims=(x.rank - 1,), keepdim=False)
        g.nodes.remove(inner)
        g.nodes.insert(g.nodes.index(r), inner)
        r.args = (inner,)
        r.attrs = {**r.attrs, "dims": tuple(range(inner.rank))}
        return row_plan(g)
    if not reds:
        out = g.outputs[0]
        plan = RowPlan(out.shape, max(out.rank - 1, 0))
    else:
        first = single[0]
        plan = RowPlan(first.args[0].shape, first.attrs["dims"][0])
    space, dim = plan.space, plan.dim
    row_shape = plan.row_shape
    keep_shape = tuple(1 if i == dim else s for i, s in enumerate(space))
    for r in reds:
        x = r.args[0]
        if len(r.attrs["dims"]) == 1 and _eq(x.shape, space) and r.attrs["dims"][0] == dim:
            plan.main.append(r)
        elif r.attrs["kind"] in ("argmax", "argmin"):
            raise UnsupportedOpError(r.origin, f"{r.attrs['kind']} over dims "
                                     f"{list(r.attrs['dims'])} of shape {list(x.shape)} is not "
                                     f"the row's reduction (dim {dim} of {list(space)}): only one "
                                     "along the row is covered")
        elif (_eq(x.shape, row_shape) or _eq(x.shape, keep_shape)) and len(r.shape) == 0:
            plan.post.append(r)
        elif len(r.attrs["dims"]) == x.rank and x.rank > 0 and len(r.shape) == 0 and r in single:
            plan.post.append(r)
        else:
            raise UnsupportedOpError(
                r.origin, f"reduction over dims {list(r.attrs['dims'])} of shape {list(x.shape)} "
                f"does not match the row space {list(space)} reduced along dim {dim}")
    for o in g.outputs:
        if _eq(o.shape, space) or unflattens(o, space):
            plan.out_kind.append("full")
        elif _eq(o.shape, row_shape) or (reds and _eq(o.shape, keep_shape)):
            plan.out_kind.append("row" if reds else "full")
        elif len(o.shape) == 0 and plan.post:
            plan.out_kind.append("scalar")
        else:
            raise UnsupportedOpError("output", f"output of shape {list(o.shape)} is neither the "
                                     f"iteration space {list(space)} nor one value per row")
    if plan.post and any(r.attrs["kind"] in ("argmax", "argmin") for r in plan.main):
        raise UnsupportedOpError(plan.post[0].origin, "a fold into a scalar beside argmax/argmin "
                                 "is not covered (the fold carries fp32 values, not indices)")
    return plan
