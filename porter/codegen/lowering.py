"""Lowering an fx graph of aten ops to the IR: one dispatch over the aten op's name, with the
tables of the ops that map one-to-one onto IR functions."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import sympy
import torch

from porter.codegen.errors import UnsupportedOpError
from porter.codegen.expansions import IRBuilder
from porter.codegen.expansions import Uncovered
from porter.codegen.expansions import fx_expr
from porter.codegen.expansions import fx_shape
from porter.codegen.ir import Graph
from porter.codegen.ir import Node

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


class Lowering(IRBuilder):
    """Walks the fx graph once, building IR nodes; `env` maps fx nodes to IR values."""

    def run(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Graph:
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i, (ph, ex) in enumerate(zip(placeholders, example_inputs, strict=True)):
            if isinstance(ex, torch.Tensor):
                val = ph.meta["val"]
                node = self.g.add("input", (), fx_shape(val), val.dtype, "input", index=i)
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
                    if isinstance(v, Uncovered):
                        raise UnsupportedOpError(v.origin, v.reason)
                    if not isinstance(v, Node):
                        raise UnsupportedOpError("output", "an output is not a tensor")
                    self.g.outputs.append(v)
        return self.g

    def arg(self, a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            v = self.env.get(a)
            return fx_expr(a.meta["val"]) if v is None and "val" in a.meta else v
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        return fx_expr(a)

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
                if isinstance(item, Uncovered):
                    raise UnsupportedOpError(item.origin, item.reason)
        if not isinstance(target, torch._ops.OpOverload):
            # Python arithmetic on sizes (x.shape[-1] // 2): the symbolic value is all we need.
            if isinstance(val, (torch.SymInt, int, float)):
                return fx_expr(val)
            raise UnsupportedOpError(origin, "only aten ops and size arithmetic are traced")
        name = target._schema.name.split("::")[-1].rstrip("_")
        if isinstance(val, torch.Tensor) and val.dtype.is_complex:
            raise UnsupportedOpError(origin, "complex tensors are not covered")
        if name == "sym_size":
            return fx_expr(val)
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
        if name in ("full", "full_like"):
            # a constant tensor is a scalar read at every position (no load, no buffer)
            c = self.g.add("scalar", (), (), val.dtype, origin, value=args[1])
            return c if len(val.shape) == 0 else self.g.add("expand", (c,), fx_shape(val),
                                                             val.dtype, origin)
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
            # torch.max(x, dim) -> (values, indices): an amax/amin and an argmax/argmin, each
            # traced only if something reads it
            dim = args[1]
            keep = bool(args[2] if len(args) > 2 else kw.get("keepdim", False))
            values = self.reduce("max" if name == "max" else "min", x, [dim], keep, origin,
                                 dtype=val[0].dtype)
            if not x.dtype.is_floating_point:
                return (values, Uncovered(origin, f"the indices of {name} of {x.dtype} are not "
                                                  "covered (float inputs only)"))
            return (values, self.reduce("arg" + name, x, [dim], keep, origin, dtype=val[1].dtype))
        if name in ("argmax", "argmin"):
            dim = args[1] if len(args) > 1 else kw.get("dim")
            keep = bool(args[2] if len(args) > 2 else kw.get("keepdim", False))
            if dim is None:
                raise UnsupportedOpError(origin, f"{name} over all dims (no dim) is not covered: "
                                                 "give a dim")
            if not x.dtype.is_floating_point:
                raise UnsupportedOpError(origin, f"{name} of {x.dtype} is not covered (float "
                                                 "inputs only)")
            return self.reduce(name, x, [dim], keep, origin, dtype=val.dtype)
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
            return (y, Uncovered(origin, "batch-norm statistics outputs are not covered"),
                    Uncovered(origin, "batch-norm statistics outputs are not covered"))
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
            return self.g.add("reshape", (y,), fx_shape(val), val.dtype, origin)
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
            return self.g.add("expand", (x,), fx_shape(val), val.dtype, origin)
        if name == "unsqueeze":
            return self.g.add("unsqueeze", (x,), fx_shape(val), val.dtype, origin,
                              dim=args[1] % (x.rank + 1))
        if name == "squeeze":
            dims = args[1] if len(args) > 1 else list(range(x.rank))
            dims = [dims] if isinstance(dims, int) else list(dims)
            dims = tuple(d % x.rank for d in dims if x.shape[d % x.rank] == 1)
            return self.g.add("squeeze", (x,), fx_shape(val), val.dtype, origin, dims=dims)
        if name in ("permute", "t", "transpose", "numpy_T"):
            if name == "permute":
                perm = [d % x.rank for d in args[1]]
            else:
                perm = list(range(x.rank))
                d0, d1 = (args[1] % x.rank, args[2] % x.rank) if name == "transpose" else (0, 1)
                if x.rank >= 2:
                    perm[d0], perm[d1] = perm[d1], perm[d0]
            return self.g.add("permute", (x,), fx_shape(val), val.dtype, origin, perm=tuple(perm))
        if name in _VIEW:
            if x.op == "reshape" and x.attrs.get("regroup"):
                x = x.args[0]  # instance norm's view back to (N, C, ...): one reshape of rows
            return self.g.add("reshape", (x,), fx_shape(val), val.dtype, origin)
        if name == "slice":
            dim = (args[1] if len(args) > 1 else 0) % x.rank
            start = args[2] if len(args) > 2 and args[2] is not None else 0
            step = args[4] if len(args) > 4 else 1
            if isinstance(start, int) and start < 0:
                start = x.shape[dim] + start
            return self.g.add("slice", (x,), fx_shape(val), val.dtype, origin, dim=dim,
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
                size = fx_expr(piece.shape[dim]) if name != "unbind" else sympy.Integer(1)
                sl_shape = tuple(size if i == dim else s for i, s in enumerate(x.shape))
                sl = self.g.add("slice", (x,), sl_shape, piece.dtype, origin, dim=dim,
                                start=sympy.sympify(start), step=1)
                if name == "unbind":
                    sl = self.g.add("squeeze", (sl,), fx_shape(piece), piece.dtype, origin,
                                    dims=(dim,))
                pieces.append(sl)
                start = start + size
            return pieces
        if name == "select":
            # x[..., i, ...]: a one-wide slice with its dim squeezed away (index arithmetic)
            dim = args[1] % x.rank
            index = args[2] if not (isinstance(args[2], int) and args[2] < 0) \
                else x.shape[dim] + args[2]
            sl_shape = tuple(sympy.Integer(1) if i == dim else s_ for i, s_ in enumerate(x.shape))
            sl = self.g.add("slice", (x,), sl_shape, x.dtype, origin, dim=dim,
                            start=sympy.sympify(index), step=1)
            return self.g.add("squeeze", (sl,), fx_shape(val), val.dtype, origin, dims=(dim,))
        if name == "flip":
            dims = tuple(sorted({d % x.rank for d in args[1]}))
            return self.g.add("flip", (x,), fx_shape(val), val.dtype, origin, dims=dims)
        if name in ("cumsum", "cumprod"):
            # the scan family (porter/codegen/generation/scan.py); an integer or bool input
            # accumulates in the output's dtype (int64), as torch's does
            if x.rank == 0:
                raise UnsupportedOpError(origin, "a scan of a 0-dim tensor is not covered")
            xin = x if x.dtype == val.dtype else self.pw("cast", x, like=val.dtype)
            return self.g.add("scan", (xin,), fx_shape(val), val.dtype, origin,
                              kind="sum" if name == "cumsum" else "prod", dim=args[1] % x.rank)
        if name == "cat":
            parts = [p for p in args[0] if isinstance(p, Node)]
            dim = (args[1] if len(args) > 1 else 0) % parts[0].rank
            return self.g.add("cat", tuple(parts), fx_shape(val), val.dtype, origin, dim=dim)
        if name == "gather":
            return self.g.add("gather", (x, args[2]), fx_shape(val), val.dtype, origin,
                              dim=args[1] % x.rank)
        if name in ("mm", "bmm"):
            # bmm: a batched mm node (3-D), the matmul family's batch grid axis
            return self.g.add("mm", (args[0], args[1]), fx_shape(val), val.dtype, origin)
        if name == "addmm":
            beta, alpha = kw.get("beta", 1), kw.get("alpha", 1)
            mm = self.g.add("mm", (args[1], args[2]), fx_shape(val), val.dtype, origin)
            acc = mm if alpha == 1 else self.pw("mul", mm, alpha, like=mm, origin=origin)
            bias = args[0] if beta == 1 else self.pw("mul", args[0], beta, like=mm)
            return self.pw("add", acc, bias, like=mm, origin=origin)
        raise UnsupportedOpError(origin, "no template covers this aten op")


def _pure(n: torch.fx.Node) -> bool:
    target = n.target
    if isinstance(target, torch._ops.OpOverload):
        return not target._schema.is_mutable
    return target is operator.getitem
