"""Trace a reference function with make_fx (symbolic sizes) and lower the aten graph to the IR.

Ops that core decompositions leave whole (softmax, log-softmax, layer norm, gelu, vector norm)
are expanded here into the IR's pointwise and reduction nodes, so every template sees the same
small vocabulary.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import sympy
import torch
import torch.fx.experimental._config as fx_config
from torch._decomp import core_aten_decompositions
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._sympy.functions import FloorDiv

from porter.codegen.errors import UnsupportedOpError
from porter.codegen.ir import Graph
from porter.codegen.ir import Node

log = logging.getLogger(__name__)
aten = torch.ops.aten

# Unary pointwise aten ops that map one-to-one onto an IR function name.
_UNARY = {
    "neg": "neg", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh",
    "erf": "erf", "sigmoid": "sigmoid", "abs": "abs", "reciprocal": "reciprocal",
    "log1p": "log1p", "expm1": "expm1", "sin": "sin", "cos": "cos", "exp2": "exp2",
    "log2": "log2", "floor": "floor", "ceil": "ceil", "logical_not": "not", "sign": "sign",
    "bitwise_not": "not",
}
_BINARY = {
    "mul": "mul", "div": "div", "maximum": "maximum", "minimum": "minimum", "eq": "eq",
    "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "logical_and": "and",
    "logical_or": "or", "bitwise_and": "and", "bitwise_or": "or", "fmod": "fmod",
    "logical_xor": "ne_bool", "bitwise_xor": "xor",
    "remainder": "remainder",
}
_IDENTITY = ("clone", "alias", "detach", "lift_fresh_copy", "contiguous", "_to_copy_noop")
_VIEW = ("view", "_unsafe_view", "reshape")


def _expr(v: Any) -> Any:
    """A SymInt/int/float as a sympy expression (python numbers stay numbers)."""
    if isinstance(v, torch.SymInt):
        return v.node.expr
    if isinstance(v, torch.fx.Node):
        return _expr(v.meta["val"])
    return v


def _shape(val: Any) -> tuple[Any, ...]:
    return tuple(_expr(s) for s in val.shape)


class _Lowering:
    """Walks the fx graph once, building IR nodes; `env` maps fx nodes to IR values."""

    def __init__(self) -> None:
        self.g = Graph()
        self.env: dict[torch.fx.Node, Any] = {}
        self.cur = ""  # the aten op being lowered: every IR node it creates is tagged with it

    # -- helpers -----------------------------------------------------------------------------
    def pw(self, fn: str, *args: Any, like: Any, dtype: torch.dtype | None = None,
           origin: str = "") -> Node:
        origin = origin or self.cur
        shape = _broadcast([a.shape for a in args if isinstance(a, Node)])
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
        stats = _Uncovered(origin, "batch-norm statistics outputs are not covered")
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
        stats = _Uncovered(origin, "group-norm statistics outputs are not covered")
        return (y, stats, stats)

    # -- the walk ----------------------------------------------------------------------------
    def run(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Graph:
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i, (ph, ex) in enumerate(zip(placeholders, example_inputs, strict=True)):
            if isinstance(ex, torch.Tensor):
                val = ph.meta["val"]
                node = self.g.add("input", (), _shape(val), val.dtype, "input", index=i)
                for d, s in enumerate(node.shape):
                    if isinstance(s, sympy.Symbol) and s not in self.g.symbols:
                        self.g.symbols[s] = (i, d)
                self.g.inputs.append(node)
                self.env[ph] = node
            else:
                self.g.inputs.append(None)
                self.g.scalar_args[i] = ex
                self.env[ph] = ex
        for n in gm.graph.nodes:
            if n.op == "call_function":
                if not n.users and _pure(n):
                    # Dead values a decomposition leaves behind (batch norm's empty reserve
                    # buffer): nothing reads them, so nothing needs a template for them.
                    continue
                self.env[n] = self.lower(n)
            elif n.op == "output":
                outs = n.args[0]
                self.g.tuple_output = isinstance(outs, (tuple, list))
                outs = list(outs) if self.g.tuple_output else [outs]
                for o in outs:
                    v = self.env[o]
                    if isinstance(v, _Uncovered):
                        raise UnsupportedOpError(v.origin, v.reason)
                    if not isinstance(v, Node):
                        raise UnsupportedOpError("output", "an output is not a tensor")
                    self.g.outputs.append(v)
        return self.g

    def arg(self, a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            v = self.env.get(a)
            return _expr(a.meta["val"]) if v is None and "val" in a.meta else v
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return _expr(a)

    def lower(self, n: torch.fx.Node) -> Any:  # noqa: C901 - one dispatch table, flat
        target = n.target
        origin = str(target)
        self.cur = origin
        args = [self.arg(a) for a in n.args]
        kw = {k: self.arg(v) for k, v in n.kwargs.items()}
        val = n.meta.get("val")
        if target is operator.getitem:
            return args[0][args[1]]
        for a in [*args, *kw.values()]:
            for item in (a if isinstance(a, (list, tuple)) else (a,)):
                if isinstance(item, _Uncovered):
                    raise UnsupportedOpError(item.origin, item.reason)
        if not isinstance(target, torch._ops.OpOverload):
            # Python arithmetic on sizes (x.shape[-1] // 2): the symbolic value is all we need.
            if isinstance(val, (torch.SymInt, int, float)):
                return _expr(val)
            raise UnsupportedOpError(origin, "only aten ops and size arithmetic are traced")
        name = target._schema.name.split("::")[-1].rstrip("_")
        if isinstance(val, torch.Tensor) and val.dtype.is_complex:
            raise UnsupportedOpError(origin, "complex tensors are not covered")
        if name == "sym_size":
            return _expr(val)
        if name in _IDENTITY:
            return args[0]
        x = args[0] if args else None
        if name in ("_to_copy", "convert_element_type", "to"):
            dtype = kw.get("dtype") or (args[1] if len(args) > 1 else val.dtype)
            if not isinstance(dtype, torch.dtype):
                dtype = val.dtype
            return self.pw("cast", x, like=dtype, origin=origin)
        if name == "scalar_tensor":
            return self.g.add("scalar", (), (), val.dtype, origin, value=args[0])
        if name in ("full", "full_like") and len(val.shape) == 0:
            return self.g.add("scalar", (), (), val.dtype, origin, value=args[1])
        if name in ("add", "sub", "rsub"):
            alpha = kw.get("alpha", 1)
            a, b = args[0], args[1]
            if alpha != 1:
                b = self.pw("mul", b, alpha, like=val.dtype) if isinstance(b, Node) else b * alpha
            fn = "add" if name == "add" else "sub"
            if name == "rsub":
                a, b = b, a
            return self.pw(fn, a, b, like=val.dtype, origin=origin)
        if name in _UNARY:
            return self.pw(_UNARY[name], x, like=val.dtype, origin=origin)
        if name in _BINARY:
            if name == "div" and kw.get("rounding_mode") is not None:
                raise UnsupportedOpError(origin, "rounding division is not covered")
            return self.pw(_BINARY[name], args[0], args[1], like=val.dtype, origin=origin)
        if name == "pow":
            if not isinstance(args[1], (int, float)):
                raise UnsupportedOpError(origin, "only a constant exponent is covered")
            return self.pw("pow", x, float(args[1]), like=val.dtype, origin=origin)
        if name == "leaky_relu":
            slope = args[1] if len(args) > 1 else kw.get("negative_slope", 0.01)
            return self.pw("where", self.pw("gt", x, 0.0, like=torch.bool), x,
                           self.pw("mul", x, slope, like=x), like=val.dtype, origin=origin)
        if name == "elu":
            # scale * (x > 0 ? x : alpha * expm1(input_scale * x)); SELU is elu with constants.
            alpha = args[1] if len(args) > 1 else kw.get("alpha", 1.0)
            scale = args[2] if len(args) > 2 else kw.get("scale", 1.0)
            in_scale = args[3] if len(args) > 3 else kw.get("input_scale", 1.0)
            xs = x if in_scale == 1 else self.pw("mul", x, in_scale, like=x)
            neg = self.pw("expm1", xs, like=x)
            if alpha != 1:
                neg = self.pw("mul", neg, alpha, like=x)
            y = self.pw("where", self.pw("gt", x, 0.0, like=torch.bool), x, neg, like=x)
            if scale != 1:
                y = self.pw("mul", y, scale, like=x)
            return y if y.dtype == val.dtype else self.pw("cast", y, like=val.dtype)
        if name == "isnan":
            return self.pw("ne", x, x, like=torch.bool, origin=origin)
        if name == "isinf":
            return self.pw("eq", self.pw("abs", x, like=x), math.inf, like=torch.bool,
                           origin=origin)
        if name == "isfinite":
            # |x| < inf is False for both inf and NaN.
            return self.pw("lt", self.pw("abs", x, like=x), math.inf, like=torch.bool,
                           origin=origin)
        # The next three are core decompositions today (never reach here); kept so a trace
        # without the decomposition table still lowers them.
        if name == "hardsigmoid":
            return self.pw("minimum", self.pw("maximum", self.pw(
                "add", self.pw("div", x, 6.0, like=x), 0.5, like=x), 0.0, like=x), 1.0,
                like=val.dtype, origin=origin)
        if name == "hardswish":
            hs = self.pw("minimum", self.pw("maximum", self.pw("add", x, 3.0, like=x), 0.0,
                                            like=x), 6.0, like=x)
            return self.pw("div", self.pw("mul", x, hs, like=x), 6.0, like=val.dtype,
                           origin=origin)
        if name == "softplus":
            beta = args[1] if len(args) > 1 else kw.get("beta", 1.0)
            thr = args[2] if len(args) > 2 else kw.get("threshold", 20.0)
            bx = x if beta == 1 else self.pw("mul", x, beta, like=x)
            sp = self.pw("log1p", self.pw("exp", bx, like=x), like=x)
            if beta != 1:
                sp = self.pw("div", sp, beta, like=x)
            return self.pw("where", self.pw("gt", bx, thr, like=torch.bool), x, sp,
                           like=val.dtype, origin=origin)
        if name == "relu":
            return self.pw("maximum", x, 0.0, like=val.dtype, origin=origin)
        if name == "silu":
            return self.pw("mul", x, self.pw("sigmoid", x, like=x), like=x, origin=origin)
        if name == "gelu":
            return self.gelu(x, kw.get("approximate", "none"), origin)
        if name in ("clamp", "clamp_min", "clamp_max", "hardtanh"):
            lo = args[1] if len(args) > 1 else kw.get("min")
            hi = args[2] if len(args) > 2 else kw.get("max")
            if name == "clamp_max":
                lo, hi = None, args[1]
            if name == "hardtanh":
                lo, hi = (args[1] if len(args) > 1 else -1.0), (args[2] if len(args) > 2 else 1.0)
            out = x
            if lo is not None:
                out = self.pw("maximum", out, lo, like=val.dtype, origin=origin)
            if hi is not None:
                out = self.pw("minimum", out, hi, like=val.dtype, origin=origin)
            return out
        if name == "where":
            return self.pw("where", *args[:3], like=val.dtype, origin=origin)
        if name in ("max", "min") and isinstance(val, (tuple, list)):
            # torch.max(x, dim) -> (values, indices): the values are an amax/amin; the indices
            # stay a marker that fails only if something reads them (`torch.max(x, 1)[0]` works).
            dim = args[1]
            keep = bool(args[2] if len(args) > 2 else kw.get("keepdim", False))
            values = self.reduce("max" if name == "max" else "min", x, [dim], keep, origin,
                                 dtype=val[0].dtype)
            return (values, _Uncovered(origin, f"the indices of {name} along a dim are not covered "
                                               "(no template returns an index); use amax/amin for the values"))
        if name in ("argmax", "argmin"):
            raise UnsupportedOpError(origin, f"{name} (a reduction that returns an index) is not covered: "
                                             "no template returns an index")
        if name in ("sum", "amax", "amin", "max", "min", "mean") and isinstance(val, torch.Tensor):
            if name in ("max", "min") and len(args) == 1:
                dims, keep = [], False
            else:
                dims = args[1] if len(args) > 1 and args[1] is not None else kw.get("dim", [])
                dims = [dims] if isinstance(dims, int) else list(dims or [])
                keep = bool(args[2] if len(args) > 2 else kw.get("keepdim", False))
            if name == "mean":
                return self.mean(x, dims, keep, origin)
            kind = {"sum": "sum", "amax": "max", "max": "max", "amin": "min", "min": "min"}[name]
            xin = x if x.dtype.is_floating_point or kind != "sum" else self.pw(
                "cast", x, like=val.dtype)
            return self.reduce(kind, xin, dims, keep, origin, dtype=val.dtype)
        if name in ("var", "var_mean", "std"):
            dims = args[1] if len(args) > 1 else kw.get("dim")
            dims = list(dims) if dims else []
            corr = kw.get("correction", 1)
            corr = 1 if corr is None else corr
            v, mu = self.var(x, dims, float(corr), bool(kw.get("keepdim", False)), origin)
            if name == "std":
                return self.pw("sqrt", v, like=v, origin=origin)
            return (v, mu) if name == "var_mean" else v
        if name == "linalg_vector_norm":
            ordv = args[1] if len(args) > 1 else kw.get("ord", 2)
            dims = args[2] if len(args) > 2 else kw.get("dim")
            keep = bool(args[3] if len(args) > 3 else kw.get("keepdim", False))
            dims = list(dims) if dims else []
            if ordv == 2 and len(dims) == 1 and x.rank > 1:
                return self.scaled_norm2(x, dims[0], keep, origin)
            if ordv == 2:
                s = self.reduce("sum", self.pw("mul", x, x, like=x), dims, keep, origin)
                return self.pw("sqrt", s, like=s, origin=origin)
            if ordv == 1:
                return self.reduce("sum", self.pw("abs", x, like=x), dims, keep, origin)
            if ordv == math.inf:
                return self.reduce("max", self.pw("abs", x, like=x), dims, keep, origin)
            raise UnsupportedOpError(origin, f"vector norm of order {ordv} is not covered")
        if name in ("_softmax", "_log_softmax", "softmax", "log_softmax"):
            out = self.softmax(x, args[1], name.endswith("log_softmax"), origin)
            return out if out.dtype == val.dtype else self.pw("cast", out, like=val.dtype)
        if name == "_native_batch_norm_legit_no_training":
            # Inference batch norm: per-channel (dim 1) affine from the running statistics.
            w, b, rm, rv, eps = args[1], args[2], args[3], args[4], args[6]
            per_c = (x.shape[1], *([1] * (x.rank - 2)))

            def chan(t: Any) -> Any:
                return None if t is None else self.g.add("reshape", (t,), per_c, t.dtype, origin)

            rstd = self.pw("rsqrt", self.pw("add", chan(rv), eps, like=x, origin=origin), like=x,
                           origin=origin)
            y = self.pw("mul", self.pw("sub", x, chan(rm), like=x, origin=origin), rstd, like=x,
                        origin=origin)
            if w is not None:
                y = self.pw("mul", y, chan(w), like=x, origin=origin)
            if b is not None:
                y = self.pw("add", y, chan(b), like=x, origin=origin)
            return (y, _Uncovered(origin, "batch-norm statistics outputs are not covered"),
                    _Uncovered(origin, "batch-norm statistics outputs are not covered"))
        if name == "_native_batch_norm_legit" and target._overloadname == "no_stats":
            return self.instance_norm(x, args[1], args[2], args[5], origin)
        if name == "repeat":
            # x tiled: (s0, s1) by (r0, r1) is x viewed as (1, s0, 1, s1), expanded to
            # (r0, s0, r1, s1) and merged to (r0 * s0, r1 * s1): coordinates only, no copy
            # (instance norm repeats its per-channel weight over the batch)
            reps = list(args[1])
            shape = [sympy.Integer(1)] * (len(reps) - x.rank) + list(x.shape)
            split = tuple(v for s_ in shape for v in (sympy.Integer(1), s_))
            tiled = tuple(v for r, s_ in zip(reps, shape, strict=True) for v in (r, s_))
            y = self.g.add("reshape", (x,), split, x.dtype, origin)
            y = self.g.add("expand", (y,), tiled, x.dtype, origin)
            return self.g.add("reshape", (y,), _shape(val), val.dtype, origin)
        if name == "native_group_norm":
            return self.group_norm(x, args[1], args[2], args[6], args[7], origin)
        if name == "native_layer_norm":
            norm_shape, w, b, eps = args[1], args[2], args[3], args[4]
            k = len(norm_shape)
            shape = x.shape
            if k > 1:
                # Normalize over one flattened row: the rowwise template reduces one dim.
                # (The emitter maps the merged column back to the k dims by div/mod, so any
                # strides work; weight/bias are flattened the same way.)
                flat = (*shape[:-k], sympy.Mul(*shape[-k:]))
                x = self.g.add("reshape", (x,), flat, x.dtype, origin)
                w = None if w is None else self.g.add("reshape", (w,), flat[-1:], w.dtype, origin)
                b = None if b is None else self.g.add("reshape", (b,), flat[-1:], b.dtype, origin)
            v, mu = self.var(x, [-1], 0.0, True, origin)
            rstd = self.pw("rsqrt", self.pw("add", v, eps, like=v), like=v, origin=origin)
            y = self.pw("mul", self.pw("sub", x, mu, like=x), rstd, like=x, origin=origin)
            if w is not None:
                y = self.pw("mul", y, w, like=x, origin=origin)
            if b is not None:
                y = self.pw("add", y, b, like=x, origin=origin)
            if k > 1:
                stat = (*shape[:-k], *([1] * k))
                y = self.g.add("reshape", (y,), shape, y.dtype, origin)
                mu = self.g.add("reshape", (mu,), stat, mu.dtype, origin)
                rstd = self.g.add("reshape", (rstd,), stat, rstd.dtype, origin)
            return (y, mu, rstd)
        if name == "expand":
            return self.g.add("expand", (x,), _shape(val), val.dtype, origin)
        if name == "unsqueeze":
            return self.g.add("unsqueeze", (x,), _shape(val), val.dtype, origin,
                              dim=args[1] % (x.rank + 1))
        if name == "squeeze":
            dims = args[1] if len(args) > 1 else list(range(x.rank))
            dims = [dims] if isinstance(dims, int) else list(dims)
            dims = tuple(d % x.rank for d in dims if x.shape[d % x.rank] == 1)
            return self.g.add("squeeze", (x,), _shape(val), val.dtype, origin, dims=dims)
        if name in ("permute", "t", "transpose", "numpy_T"):
            if name == "permute":
                perm = [d % x.rank for d in args[1]]
            else:
                perm = list(range(x.rank))
                d0, d1 = (args[1] % x.rank, args[2] % x.rank) if name == "transpose" else (0, 1)
                if x.rank >= 2:
                    perm[d0], perm[d1] = perm[d1], perm[d0]
            return self.g.add("permute", (x,), _shape(val), val.dtype, origin, perm=tuple(perm))
        if name in _VIEW:
            if x.op == "reshape" and x.attrs.get("regroup"):
                x = x.args[0]  # instance norm's view back to (N, C, ...): one reshape of rows
            return self.g.add("reshape", (x,), _shape(val), val.dtype, origin)
        if name == "slice":
            dim = (args[1] if len(args) > 1 else 0) % x.rank
            start = args[2] if len(args) > 2 and args[2] is not None else 0
            step = args[4] if len(args) > 4 else 1
            if isinstance(start, int) and start < 0:
                start = x.shape[dim] + start
            return self.g.add("slice", (x,), _shape(val), val.dtype, origin, dim=dim,
                              start=sympy.sympify(start), step=step)
        if name in ("split", "split_with_sizes", "unbind"):
            # Each piece is a slice of x (index arithmetic, no copy): chunk/split/unbind fuse
            # into the consumer like any other view, and a later cat stitches them back.
            # unbind(x, dim); split(x, size, dim); split_with_sizes(x, sizes, dim)
            at = 1 if name == "unbind" else 2
            dim = (args[at] if len(args) > at else kw.get("dim", 0)) % x.rank
            pieces = []
            start: Any = sympy.Integer(0)
            for piece in val:
                size = _expr(piece.shape[dim]) if name != "unbind" else sympy.Integer(1)
                sl_shape = tuple(size if i == dim else s for i, s in enumerate(x.shape))
                sl = self.g.add("slice", (x,), sl_shape, piece.dtype, origin, dim=dim,
                                start=sympy.sympify(start), step=1)
                if name == "unbind":
                    sl = self.g.add("squeeze", (sl,), _shape(piece), piece.dtype, origin,
                                    dims=(dim,))
                pieces.append(sl)
                start = start + size
            return pieces
        if name == "cat":
            parts = [p for p in args[0] if isinstance(p, Node)]
            dim = (args[1] if len(args) > 1 else 0) % parts[0].rank
            return self.g.add("cat", tuple(parts), _shape(val), val.dtype, origin, dim=dim)
        if name == "gather":
            return self.g.add("gather", (x, args[2]), _shape(val), val.dtype, origin,
                              dim=args[1] % x.rank)
        if name == "mm":
            return self.g.add("mm", (args[0], args[1]), _shape(val), val.dtype, origin)
        if name == "addmm":
            beta, alpha = kw.get("beta", 1), kw.get("alpha", 1)
            mm = self.g.add("mm", (args[1], args[2]), _shape(val), val.dtype, origin)
            acc = mm if alpha == 1 else self.pw("mul", mm, alpha, like=mm, origin=origin)
            bias = args[0] if beta == 1 else self.pw("mul", args[0], beta, like=mm)
            return self.pw("add", acc, bias, like=mm, origin=origin)
        raise UnsupportedOpError(origin, "no template covers this aten op")


class _Uncovered:
    """A value the lowering cannot produce; an error only if something reads it."""

    def __init__(self, origin: str, reason: str) -> None:
        self.origin = origin
        self.reason = reason


def _pure(n: torch.fx.Node) -> bool:
    target = n.target
    if isinstance(target, torch._ops.OpOverload):
        return not target._schema.is_mutable
    return target is operator.getitem


def _broadcast(shapes: list[tuple[Any, ...]]) -> tuple[Any, ...]:
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


def trace(reference: Callable[..., Any], example_inputs: Sequence[Any]) -> Graph:
    """Trace `reference(*example_inputs)` with symbolic sizes and lower it to the IR.

    Args:
        reference: a plain function of tensors and python scalars.
        example_inputs: one set of arguments (python scalars are baked into the kernel).

    Returns:
        The IR graph, its sizes symbolic in the input sizes.

    Raises:
        UnsupportedOpError: an aten op (or pattern) no template covers.
    """
    decomps = core_aten_decompositions()
    # Keep these whole: the lowering expands them itself into reductions the templates fuse.
    for op in (aten.gelu.default, aten._softmax.default, aten._log_softmax.default,
               aten.native_layer_norm.default, aten.linalg_vector_norm.default,
               aten.addmm.default, aten.var_mean.correction, aten.var.correction):
        decomps.pop(op, None)
    # Distinct symbols for equal example sizes: a square example must not make the kernel
    # assume M == N for every later shape.
    with fx_config.patch(use_duck_shape=False):
        try:
            gm = make_fx(reference, decomposition_table=decomps, tracing_mode="symbolic")(
                *example_inputs)
        except UnsupportedOpError:
            raise
        except Exception as exc:  # make_fx failures come from deep inside torch; name them
            raise UnsupportedOpError(getattr(reference, "__name__", "reference"),
                                     f"tracing with make_fx failed: {exc}") from exc
    return _Lowering().run(gm, example_inputs)
