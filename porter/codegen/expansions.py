"""Building the IR from fx values: sizes as sympy, broadcasting, values no template covers, and
the expansion of composite ops (softmax, gelu, var, norms) into the IR's small vocabulary."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv

from porter.codegen.errors import UnsupportedOpError
from porter.codegen.ir import Graph
from porter.codegen.ir import Node


def fx_expr(v: Any) -> Any:
    """A SymInt/int/float as a sympy expression (python numbers stay numbers)."""
    if isinstance(v, torch.SymInt):
        return v.node.expr
    if isinstance(v, torch.fx.Node):
        return fx_expr(v.meta["val"])
    return v


def fx_shape(val: Any) -> tuple[Any, ...]:
    return tuple(fx_expr(s) for s in val.shape)


class Uncovered:
    """A value the lowering cannot produce; an error only if something reads it."""

    def __init__(self, origin: str, reason: str) -> None:
        self.origin = origin
        self.reason = reason


def _pure(n: torch.fx.Node) -> bool:
    target = n.target
    if isinstance(target, torch._ops.OpOverload):
        return not target._schema.is_mutable
    return target is operator.getitem


def broadcast(shapes: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out: list[Any] = []
    for i in range(rank):
        size: Any = sympy.Integer(1)
        for s in shapes:
            j = i - (rank - len(s))
            if j >= 0 and s[j] != 1:
                size = s[j]
        out.append(size)
    return tuple(out)


class IRBuilder:
    """Builds IR nodes for the lowering, and expands the ops core decompositions leave whole
    (softmax, gelu, var, vector norm, instance and group norm) into pointwise and reduction
    nodes; `env` maps fx nodes to IR values."""

    def __init__(self) -> None:
        self.g = Graph()
        self.env: dict[torch.fx.Node, Any] = {}
        self.cur = ""  # the aten op being lowered: every IR node it creates is tagged with it

    # -- helpers -----------------------------------------------------------------------------
    def pw(self, fn: str, *args: Any, like: Any, dtype: torch.dtype | None = None,
           origin: str = "") -> Node:
        origin = origin or self.cur
        shape = broadcast([a.shape for a in args if isinstance(a, Node)])
        if dtype is None:
            dtype = like.dtype if isinstance(like, Node) else like
        return self.g.add("pw", args, shape, dtype, origin, fn=fn)

    def reduce(self, kind: str, x: Node, dims: Sequence[int], keepdim: bool, origin: str,
               dtype: torch.dtype | None = None) -> Node:
        origin = origin or self.cur
        dims = sorted({d % x.rank for d in dims}) if dims else list(range(x.rank))
        shape = [1 if i in dims else s for i, s in enumerate(x.shape)]
        if not keepdim:
            shape = [s for i, s in enumerate(shape) if i not in dims]
        return self.g.add("reduce", (x,), tuple(shape), dtype or x.dtype, origin, kind=kind,
                          dims=tuple(dims), keepdim=keepdim)

    def numel(self, x: Node, dims: Sequence[int]) -> Any:
        dims = [d % x.rank for d in dims] if dims else list(range(x.rank))
        return sympy.Mul(*[x.shape[d] for d in dims])

    def mean(self, x: Node, dims: Sequence[int], keepdim: bool, origin: str) -> Node:
        s = self.reduce("sum", x, dims, keepdim, origin)
        return self.pw("div", s, self.numel(x, dims), like=s, origin=origin)

    def softmax(self, x: Node, dim: int, log_: bool, origin: str) -> Node:
        m = self.reduce("max", x, [dim], True, origin)
        shifted = self.pw("sub", x, m, like=x, origin=origin)
        e = self.pw("exp", shifted, like=x, origin=origin)
        s = self.reduce("sum", e, [dim], True, origin)
        if log_:
            return self.pw("sub", shifted, self.pw("log", s, like=s, origin=origin), like=x,
                           origin=origin)
        return self.pw("div", e, s, like=x, origin=origin)

    def gelu(self, x: Node, approximate: str, origin: str) -> Node:
        if approximate == "tanh":
            # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            x3 = self.pw("mul", self.pw("mul", x, x, like=x), x, like=x, origin=origin)
            inner = self.pw("mul", self.pw("add", x, self.pw("mul", x3, 0.044715, like=x), like=x),
                            math.sqrt(2.0 / math.pi), like=x, origin=origin)
            t = self.pw("tanh", inner, like=x, origin=origin)
        else:
            # 0.5 x (1 + erf(x / sqrt(2)))
            t = self.pw("erf", self.pw("mul", x, 1.0 / math.sqrt(2.0), like=x), like=x,
                        origin=origin)
        return self.pw("mul", self.pw("mul", x, 0.5, like=x),
                       self.pw("add", t, 1.0, like=x), like=x, origin=origin)

    def var(self, x: Node, dims: Sequence[int], correction: float, keepdim: bool,
            origin: str) -> tuple[Node, Node]:
        mu = self.mean(x, dims, True, origin)
        xc = self.pw("sub", x, mu, like=x, origin=origin)
        ss = self.reduce("sum", self.pw("mul", xc, xc, like=x), dims, keepdim, origin)
        # An integral correction stays an integer size expression (0.0 would make it a Float).
        corr = int(correction) if float(correction).is_integer() else correction
        v = self.pw("div", ss, self.numel(x, dims) - corr, like=ss, origin=origin)
        if not keepdim:
            mu = self.g.add("squeeze", (mu,), v.shape, mu.dtype, origin,
                            dims=tuple(d % x.rank for d in dims))
        return v, mu

    def scaled_norm2(self, x: Node, dim: int, keepdim: bool, origin: str) -> Node:
        """||x||_2 along `dim` as m * sqrt(sum((x / m)^2)), m = max |x| (the BLAS nrm2 way).

        The plain sum of squares underflows to 0 for rows near the smallest normal (and
        overflows past ~1e19), so x / ||x|| gave inf/NaN where float64 is finite. The row is
        already on chip: the max is one more in-register reduction, and the looped kernel
        folds both into one pass (`rowwise` pairs them, rescaling as the max grows).
        """
        a = self.pw("abs", x, like=x, origin=origin)
        m = self.reduce("max", a, [dim], True, origin)
        q = self.pw("div", a, m, like=x, origin=origin)
        s = self.reduce("sum", self.pw("mul", q, q, like=x, origin=origin), [dim], keepdim,
                        origin)
        s.attrs["scaled_by"] = m.id  # lets the looped kernel fuse the pair (see rowwise)
        mo = m
        if not keepdim:
            mo = self.g.add("squeeze", (m,), s.shape, m.dtype, origin, dims=(dim % x.rank,))
        norm = self.pw("mul", mo, self.pw("sqrt", s, like=s, origin=origin), like=s,
                       origin=origin)
        # max |x| == 0: the norm is 0 (not 0 * sqrt(NaN)); == inf: inf (not inf * NaN).
        special = self.pw("or", self.pw("eq", mo, 0.0, like=torch.bool, origin=origin),
                          self.pw("eq", mo, math.inf, like=torch.bool, origin=origin),
                          like=torch.bool, origin=origin)
        return self.pw("where", special, mo, norm, like=s, origin=origin)

    def instance_norm(self, x: Node, w: Any, b: Any, eps: float, origin: str) -> tuple[Any, ...]:
        """Batch norm with batch statistics and no running ones (_native_batch_norm_legit's
        no_stats overload) of x of shape (1, C, *S): per channel, the mean and biased variance
        over S, each channel one row of prod(S) elements (as multi-dim layer norm flattens its
        row). This is instance norm: PyTorch views its (N, C, *S) input as (1, N * C, *S)
        first, and that view is looked through, so that the rows are (N, C, prod(S)) of the
        input itself and the view back to (N, C, *S) is one reshape of them.

        Raises:
            UnsupportedOpError: a batch of more than one (training batch norm: the reduction
                over N and S per channel is not one row of the input).
        """
        if x.rank < 3 or x.shape[0] != 1:
            raise UnsupportedOpError(origin, "batch norm with batch statistics over a batch of "
                                     "more than one (its reduction over N and the spatial dims "
                                     "of each channel is not one row)")
        spatial = x.shape[2:]
        src, lead = x, x.shape[:2]
        inner = x.args[0] if x.op == "reshape" else None
        if inner is not None and inner.rank == x.rank and tuple(inner.shape[2:]) == spatial and \
                sympy.simplify(inner.shape[0] * inner.shape[1] - x.shape[1]) == 0:
            src, lead = inner, inner.shape[:2]  # instance norm's (N * C) view of (N, C)
        flat = (*lead, sympy.Mul(*spatial))
        xf = self.g.add("reshape", (src,), flat, x.dtype, origin)
        v, mu = self.var(xf, [-1], 0.0, True, origin)
        rstd = self.pw("rsqrt", self.pw("add", v, eps, like=v), like=v, origin=origin)
        y = self.pw("mul", self.pw("sub", xf, mu, like=xf), rstd, like=xf, origin=origin)
        for t, fn in ((w, "mul"), (b, "add")):
            if t is not None:  # per channel of x: (N * C,) as (N, C, 1)
                tc = self.g.add("reshape", (t,), (*lead, 1), t.dtype, origin)
                y = self.pw(fn, y, tc, like=xf, origin=origin)
        y = self.g.add("reshape", (y,), x.shape, y.dtype, origin, regroup=True)
        stats = Uncovered(origin, "batch-norm statistics outputs are not covered")
        return (y, stats, stats)

    def group_norm(self, x: Node, w: Any, b: Any, groups: int, eps: float,
                   origin: str) -> tuple[Any, ...]:
        """Group norm of x of shape (N, C, *S): each of the G groups of C / G channels of a
        sample is one row of C / G * prod(S) elements (x viewed as (N, G, row)), normalised by
        its mean and biased variance; the per-channel weight and bias are expanded over S and
        viewed the same way, so that the affine happens on the rows and the output is one
        reshape of them (as multi-dim layer norm's)."""
        if x.rank < 2:
            raise UnsupportedOpError(origin, "group norm of a tensor of rank < 2")
        n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
        per = FloorDiv(c, groups)  # channels per group (C // G: the launcher can print it)
        row = per * sympy.Mul(*spatial)
        xf = self.g.add("reshape", (x,), (n, groups, row), x.dtype, origin)
        v, mu = self.var(xf, [-1], 0.0, True, origin)
        rstd = self.pw("rsqrt", self.pw("add", v, eps, like=v), like=v, origin=origin)
        y = self.pw("mul", self.pw("sub", xf, mu, like=xf), rstd, like=xf, origin=origin)
        for t, fn in ((w, "mul"), (b, "add")):
            if t is None:
                continue
            # (C,) -> (G, C / G, prod S) -> (G, row): each element's channel
            tg = self.g.add("reshape", (t,), (groups, per, 1), t.dtype, origin)
            te = self.g.add("expand", (tg,), (groups, per, sympy.Mul(*spatial)), t.dtype, origin)
            tr = self.g.add("reshape", (te,), (groups, row), t.dtype, origin)
            y = self.pw(fn, y, tr, like=xf, origin=origin)
        y = self.g.add("reshape", (y,), x.shape, y.dtype, origin)
        stats = Uncovered(origin, "group-norm statistics outputs are not covered")
        return (y, stats, stats)
