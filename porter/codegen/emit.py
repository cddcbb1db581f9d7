"""Expression emission: evaluate an IR node at symbolic coordinates into Triton (or Metal) code.

A kernel iterates over some index space; each dimension of a node is given a `Coord`, a code
expression (e.g. `cols`, `r0`, `(8 + cols)`). Index ops only rewrite coordinates (a slice adds
its start, a cat selects between two masked loads, a gather substitutes the loaded index), so
they cost no memory traffic; pointwise ops become one line each; loads happen once per
(node, coordinates) thanks to memoization, which is what fuses the whole graph into one kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import sympy
import torch

from porter.codegen.errors import UnsupportedOpError
from porter.codegen.ir import Graph
from porter.codegen.ir import Node
from porter.codegen.ir import value_class


@dataclass(frozen=True)
class Coord:
    """One dimension's index expression; `col` is True when it varies along the tile's columns.
    `unit`: a row coordinate whose stride is a constexpr as the columns' are (the column
    kernel's positions along the last dim: a unit stride the compiler sees gives 16-byte
    vector loads)."""

    expr: str
    col: bool = False
    unit: bool = False


ZERO = Coord("0")

# Triton spelling of each IR pointwise function (arguments already fp32/int/bool values).
LOG2E = "1.4426950408889634"  # exp(x) = exp2(x * log2 e)
TRITON_FN = {
    # div: IEEE round-to-nearest, as PyTorch does; plain `/` is an approximate (2 ulp) division on
    # NVIDIA, which breaks e.g. layernorm of a constant row (sum/n != x exactly -> x - mean != 0).
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "tl.math.div_rn(tl.cast({0}, tl.float32), tl.cast({1}, tl.float32))",
    # exp as exp2: tl.exp is ex2.approx.f32 on NVIDIA, whose subnormal results cost three more
    # instructions per element (a compare and two scaling multiplies); tl.exp2 is the .ftz
    # form, which flushes results under 2^-126 to 0 (bench/NOTES.md item 30)
    "neg": "(-{0})", "exp": "tl.exp2(({0}) * " + LOG2E + ")", "log": "tl.log({0})",
    "sqrt": "tl.sqrt({0})",
    "rsqrt": "tl.rsqrt({0})", "erf": "tl.erf({0})", "sigmoid": "tl.sigmoid({0})",
    # tanh(x) = 1 - 2 / (exp(2x) + 1): saturates cleanly to +-1 for large |x| (no inf/inf).
    "tanh": "(1.0 - 2.0 / (tl.exp2(2.8853900817779268 * {0}) + 1.0))",
    "abs": "tl.abs({0})", "reciprocal": "(1.0 / {0})",
    # log1p/expm1 without cancellation for tiny |x| (Goldberg's and Kahan's corrections):
    # u = 1 + x rounds; log(u) * x / (u - 1) restores the lost bits. Branch-free via where.
    "log1p": "tl.log(1.0 + {0})",  # see Emitter._log1p/_expm1
    "expm1": "(tl.exp2(({0}) * " + LOG2E + ") - 1.0)",
    "sin": "tl.sin({0})", "cos": "tl.cos({0})",
    "exp2": "tl.exp2({0})", "log2": "tl.log2({0})", "floor": "tl.floor({0})",
    "ceil": "tl.ceil({0})", "maximum": "tl.maximum({0}, {1})", "minimum": "tl.minimum({0}, {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
    "gt": "({0} > {1})", "ge": "({0} >= {1})", "and": "({0} & {1})", "or": "({0} | {1})",
    "xor": "({0} ^ {1})", "ne_bool": "(({0} != 0) != ({1} != 0))",
    "where": "tl.where({0}, {1}, {2})", "sign": "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, 0.0))",
}
METAL_FN = {
    **{k: v for k, v in TRITON_FN.items() if v.startswith("(")},
    "div": "({0} / {1})",  # Metal's float division is IEEE-correct by default (no fast-math)
    "exp": "exp({0})", "log": "log({0})", "sqrt": "sqrt({0})", "rsqrt": "rsqrt({0})",
    "erf": "porter_erf({0})", "sigmoid": "(1.0f / (1.0f + exp(-{0})))",
    "tanh": "precise::tanh({0})", "abs": "fabs({0})", "reciprocal": "(1.0f / {0})",
    "log1p": "log(1.0f + {0})", "expm1": "(exp({0}) - 1.0f)",
    "sin": "sin({0})",
    "cos": "cos({0})", "exp2": "exp2({0})", "log2": "log2({0})", "floor": "floor({0})",
    "ceil": "ceil({0})", "maximum": "fmax({0}, {1})", "minimum": "fmin({0}, {1})",
    "and": "({0} && {1})", "or": "({0} || {1})", "where": "({0} ? {1} : {2})",
    "sign": "sign({0})", "xor": "({0} ^ {1})", "ne_bool": "(({0} != 0) != ({1} != 0))",
}

# Pointwise functions whose value in masked lanes (a load's `other`, then constants) is worked
# out at codegen time, in float32 with IEEE semantics (inf, nan) as the kernel computes it.
MASKED_LANE_FN = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                  "neg": torch.neg, "exp": torch.exp, "exp2": torch.exp2, "abs": torch.abs,
                  "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "log": torch.log,
                  "maximum": torch.maximum, "minimum": torch.minimum, "pow": torch.pow}

TRITON_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
                torch.float64: "fp64", torch.int64: "i64", torch.int32: "i32", torch.int16: "i16",
                torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1"}
METAL_DTYPE = {torch.float32: "float", torch.float16: "half", torch.bfloat16: "bfloat",
               torch.int64: "long", torch.int32: "int", torch.bool: "bool", torch.uint8: "uchar",
               torch.int8: "char", torch.int16: "short"}


def _one_plus_erf_arg(n: Node) -> Node | None:
    """y when `n` is add(erf(y), 1.0) or add(1.0, erf(y)) of a float y, else None."""
    if n.attrs.get("fn") != "add" or len(n.args) != 2:
        return None
    for a, b in (n.args, n.args[::-1]):
        if (isinstance(a, Node) and a.op == "pw" and a.attrs.get("fn") == "erf"
                and not isinstance(b, (Node, bool)) and b == 1.0 and isinstance(a.args[0], Node)):
            return a.args[0]
    return None


def _scaled(n: Any, factor: float) -> Node | None:
    """x when `n` is mul(x, factor) or mul(factor, x) of a node x, else None."""
    if not (isinstance(n, Node) and n.op == "pw" and n.attrs.get("fn") == "mul"
            and len(n.args) == 2):
        return None
    for a, b in (n.args, n.args[::-1]):
        if isinstance(a, Node) and not isinstance(b, (Node, bool)) and abs(b - factor) < 1e-12:
            return a
    return None


def _gelu_arg(n: Node) -> Node | None:
    """x when `n` is GELU's erf form as traced, mul(mul(x, 0.5), 1 + erf(mul(x, 1/sqrt 2)))
    in either operand order, else None."""
    if n.attrs.get("fn") != "mul" or len(n.args) != 2:
        return None
    for a, b in (n.args, n.args[::-1]):
        x = _scaled(a, 0.5)
        y = _one_plus_erf_arg(b) if isinstance(b, Node) and b.op == "pw" else None
        if x is not None and y is not None and _scaled(y, 1.0 / math.sqrt(2.0)) is x:
            return x
    return None


def _one_operand_helper(n: Node) -> tuple[str, Node, Any] | None:
    """(Triton helper, its operand, the same function in torch) when `n` is a pattern one
    fastmath helper computes whole (GELU, 1 + erf), else None."""
    x = _gelu_arg(n)
    if x is not None:
        return "porter_gelu", x, torch.nn.functional.gelu
    y = _one_plus_erf_arg(n)
    if y is not None:
        return "porter_one_plus_erf", y, lambda v: 1.0 + torch.erf(v)
    return None


def sym_to_python(expr: Any, symbols: dict[sympy.Symbol, tuple[int, int]]) -> str:
    """Print a sympy size expression as Python over `inputs[k].shape[d]` (for launchers)."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Float and float(expr).is_integer():
        return str(int(expr))
    if expr.is_Symbol:
        k, d = symbols[expr]
        return f"inputs[{k}].shape[{d}]"
    if expr.is_Add:
        return "(" + " + ".join(sym_to_python(a, symbols) for a in expr.args) + ")"
    if expr.is_Mul:
        return "(" + " * ".join(sym_to_python(a, symbols) for a in expr.args) + ")"
    name = type(expr).__name__
    if name in ("FloorDiv", "floor") or isinstance(expr, sympy.floor):
        if name == "FloorDiv":
            a, b = expr.args
            return f"({sym_to_python(a, symbols)} // {sym_to_python(b, symbols)})"
    if name in ("Mod", "PythonMod"):
        a, b = expr.args
        return f"({sym_to_python(a, symbols)} % {sym_to_python(b, symbols)})"
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        return "(" + " * ".join([sym_to_python(expr.base, symbols)] * int(expr.exp)) + ")"
    raise UnsupportedOpError(f"size expression {expr}", "cannot express it from input sizes")


@dataclass
class KernelArgs:
    """The runtime arguments one kernel needs, in order, and how the launcher computes each."""

    symbols: dict[sympy.Symbol, tuple[int, int]]
    params: list[str] = field(default_factory=list)  # kernel parameter names
    launch_exprs: list[str] = field(default_factory=list)  # python expressions in the launcher
    kinds: list[str] = field(default_factory=list)  # "ptr:<input k>"/"ptr:out<j>"/"i64"/"i32"
    _sizes: dict[Any, str] = field(default_factory=dict)

    def add(self, name: str, launch: str, kind: str) -> str:
        if name not in self.params:
            self.params.append(name)
            self.launch_exprs.append(launch)
            self.kinds.append(kind)
        return name

    def size(self, expr: Any) -> str:
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return str(int(expr))
        if expr not in self._sizes:
            self._sizes[expr] = self.add(f"sz{len(self._sizes)}", sym_to_python(expr, self.symbols),
                                         "i32")
        return self._sizes[expr]

    def input_ptr(self, k: int) -> str:
        return self.add(f"in{k}_ptr", f"inputs[{k}]", f"ptr:in{k}")

    def input_stride(self, k: int, d: int, col: bool = False) -> str:
        """A stride argument. Strides multiplying the column index are constexprs: Triton's JIT
        does not specialize an int argument equal to 1, and without knowing the unit stride
        the compiler cannot emit 16-byte vector loads (ld.global.v4)."""
        if col:
            return self.add(f"in{k}_cs{d}", f"inputs[{k}].stride({d})", f"cstride:in{k}:{d}")
        return self.add(f"in{k}_s{d}", f"inputs[{k}].stride({d})", "i64")

    def output_ptr(self, j: int) -> str:
        return self.add(f"out{j}_ptr", f"outs[{j}]", f"ptr:out{j}")

    def output_stride(self, j: int, d: int, col: bool = False) -> str:
        if col:
            return self.add(f"out{j}_cs{d}", f"outs[{j}].stride({d})", f"cstride:out{j}:{d}")
        return self.add(f"out{j}_s{d}", f"outs[{j}].stride({d})", "i64")

    def declared(self) -> list[str]:
        """Parameter declarations for a kernel signature (constexpr strides annotated)."""
        return [f"{p}: tl.constexpr" if k.startswith("cstride") else p
                for p, k in zip(self.params, self.kinds, strict=True)]


class Emitter:
    """Emits code lines that compute IR nodes at given coordinates inside one kernel body.

    Args:
        graph: the IR.
        args: where pointer/stride/size arguments are registered.
        full_mask / row_mask: mask expressions for loads that vary along columns / only rows.
        col_mask: if given, the mask of loads that vary along columns only (no row index).
        dialect: "triton" or "metal".
    """

    def __init__(self, graph: Graph, args: KernelArgs, *, full_mask: str = "mask",
                 row_mask: str = "row_mask", col_mask: str | None = None,
                 dialect: str = "triton") -> None:
        self.g = graph
        self.args = args
        self.full_mask = full_mask
        self.row_mask = row_mask
        self.col_mask = col_mask
        self.dialect = dialect
        self.lines: list[str] = []
        self.indent = 1
        self.memo: dict[Any, str] = {}
        # row values bound before a loop that later loops use as they are (the VAR1 mean)
        self.kept: dict[Any, str] = {}
        self.reduced: dict[int, str] = {}  # reduce node id -> variable holding its row value
        self.row_coords: tuple[Coord, ...] = ()  # the kernel's row coordinates (non-reduced dims)
        self.reduce_dim: int | None = None
        self.flat = False  # flat elementwise kernel: loads at `offs`
        self.fixed: dict[int, tuple[tuple[Coord, ...], str]] = {}  # node -> (coords, var): mm acc
        # Masked lanes (where `full_mask` is false): `fills` is what a full-row load of float
        # input k puts there (its `other`, 0.0 unless set), `masked` the known value of each
        # variable there, so a reduction whose masked lanes already hold its identity needs no
        # select (see rowwise.py).
        self.fills: dict[int, float] = {}
        self.masked: dict[str, float] = {}
        self._n = 0
        # Compile-time flag of a Triton kernel: every output is fp16/bf16, so erf may take the
        # cheaper formula of porter/codegen/fastmath.py (the pointers' types decide at JIT time).
        self.lowp = " and ".join(
            f"(out{j}_ptr.dtype.element_ty.is_fp16() or out{j}_ptr.dtype.element_ty.is_bf16())"
            for j in range(len(graph.outputs))) or "False"

    # -- small utilities --------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def tmp(self, expr: str, prefix: str = "v") -> str:
        self._n += 1
        name = f"{prefix}{self._n}"
        if self.dialect == "metal":
            self.emit(f"auto {name} = {expr};")
        else:
            self.emit(f"{name} = {expr}")
        return name

    def tmps(self, expr: str, *prefixes: str) -> list[str]:
        """Names bound to the values of a tuple-valued `expr` (a two-value tl.reduce)."""
        names = []
        for prefix in prefixes:
            self._n += 1
            names.append(f"{prefix}{self._n}")
        self.emit(f"{', '.join(names)} = {expr}")
        return names

    def reset(self) -> None:
        """Forget memoized values (at a loop boundary: loop-body variables do not escape), all
        but the `kept` row values bound outside every loop."""
        self.memo = dict(self.kept)

    def const(self, value: Any) -> str:
        if isinstance(value, sympy.Basic) and value.is_Number:
            # a size expression that folded to a number (fixed sizes): print it as one
            value = int(value) if value.is_Integer else float(value)
        if isinstance(value, bool):
            return ("true" if value else "false") if self.dialect == "metal" else str(value)
        if isinstance(value, (int, float)):
            v = float(value) if isinstance(value, float) else value
            if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
                if self.dialect == "metal":
                    return "NAN" if v != v else ("INFINITY" if v > 0 else "(-INFINITY)")
                return f"float('{v}')"
            if self.dialect == "metal" and isinstance(v, float):
                return f"{v!r}f"
            return repr(v)
        if isinstance(value, sympy.Basic):
            return self.args.size(value)
        raise UnsupportedOpError(str(value), "a constant of this kind is not covered")

    @staticmethod
    def broadcast_coords(coords: tuple[Coord, ...], shape: tuple[Any, ...]) -> tuple[Coord, ...]:
        """Coordinates of an operand of `shape` under numpy broadcasting (size-1 dims -> 0)."""
        off = len(coords) - len(shape)
        return tuple(ZERO if shape[j] == 1 else coords[off + j] for j in range(len(shape)))

    def mask_for(self, coords: tuple[Coord, ...], extra: str | None) -> str | None:
        base = self.full_mask if any(c.col for c in coords) else self.row_mask
        if self.col_mask and coords and all(c.col for c in coords):
            base = self.col_mask  # a load along the row only (weights): no row in its mask
        if extra:
            return f"({base}) & {extra}" if base else extra
        return base

    # -- the evaluator ----------------------------------------------------------------------
    def eval(self, node: Any, coords: tuple[Coord, ...], extra: str | None = None) -> str:
        """Code expression (usually a variable name) for `node` at `coords`.

        Raises:
            UnsupportedOpError: an op or indexing pattern this emitter does not cover.
        """
        if not isinstance(node, Node):
            return self.const(node)
        assert len(coords) == node.rank, (node, coords)
        key = (node.id, coords, extra)
        if key in self.memo:
            return self.memo[key]
        out = self._eval(node, coords, extra)
        self.memo[key] = out
        if node.op == "pw" and out not in self.masked:
            value = self._masked_lane_value(node, coords, extra)
            if value is not None:
                self.masked[out] = value
        return out

    def masked_value(self, var: str) -> float | None:
        """The value `var` holds in the masked lanes, when the codegen knows it."""
        return self.masked.get(var)

    def _masked_lane_value(self, n: Node, coords: tuple[Coord, ...],
                           extra: str | None) -> float | None:
        fn = n.attrs["fn"]
        if fn == "cast":
            keeps = value_class(n.dtype) == "f" and isinstance(n.args[0], Node) and \
                value_class(n.args[0].dtype) == "f"
            return self.masked_value(self.eval(n.args[0], coords, extra)) if keeps else None
        helper = _one_operand_helper(n) if self.dialect == "triton" else None
        if helper is not None:
            # not through the args: evaluating them would emit code the helper does not use
            _, arg, f = helper
            v = self.masked_value(self.eval(arg, self.broadcast_coords(coords, arg.shape), extra))
            return None if v is None else float(f(torch.tensor(v, dtype=torch.float32)))
        if fn not in MASKED_LANE_FN:
            return None
        vals = []
        for a in n.args:
            if isinstance(a, Node) and a.op == "scalar":
                a = a.attrs["value"]
            if isinstance(a, Node):
                v = self.masked_value(self.eval(a, self.broadcast_coords(coords, a.shape), extra))
            else:
                v = float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else None
            if v is None:
                return None
            vals.append(torch.tensor(v, dtype=torch.float32))
        return float(MASKED_LANE_FN[fn](*vals))

    def _eval(self, n: Node, coords: tuple[Coord, ...], extra: str | None) -> str:  # noqa: C901
        if n.id in self.fixed:
            fixed_coords, var = self.fixed[n.id]
            if coords != fixed_coords:
                raise UnsupportedOpError(n.origin, "matmul result re-indexed in the epilogue")
            return var
        if n.op == "input":
            return self.load(n, coords, extra)
        if n.op == "scalar":
            return self.const(n.attrs["value"])
        if n.op == "pw":
            return self.pointwise(n, coords, extra)
        if n.op == "reduce":
            if n.id not in self.reduced:
                raise UnsupportedOpError(n.origin, "reduction used before it is computed "
                                         "(reductions along different dims in one graph)")
            rc = coords
            if n.attrs["keepdim"] and self.reduce_dim is not None and len(coords) > 0:
                rc = coords[: self.reduce_dim] + coords[self.reduce_dim + 1:]
            want = tuple(c for c, s in zip(rc, _row_shape(n), strict=True) if s != 1)
            have = tuple(c for c, s in zip(self.row_coords, self.row_sizes, strict=True) if s != 1)
            if rc and want != have:
                raise UnsupportedOpError(n.origin, "reduction result re-indexed (transposed or "
                                         "sliced) after the reduction")
            return self.reduced[n.id]
        (x, *rest) = n.args
        if n.op == "expand":
            return self.eval(x, self.broadcast_coords(coords, x.shape), extra)
        if n.op == "unsqueeze":
            d = n.attrs["dim"]
            return self.eval(x, coords[:d] + coords[d + 1:], extra)
        if n.op == "squeeze":
            c = list(coords)
            for d in sorted(n.attrs["dims"]):
                c.insert(d, ZERO)
            return self.eval(x, tuple(c), extra)
        if n.op == "permute":
            c: list[Coord] = [ZERO] * x.rank
            for i, p in enumerate(n.attrs["perm"]):
                c[p] = coords[i]
            return self.eval(x, tuple(c), extra)
        if n.op == "reshape":
            return self.eval(x, self.reshape_coords(coords, n.shape, x.shape), extra)
        if n.op == "slice":
            d, step = n.attrs["dim"], n.attrs["step"]
            start = self.args.size(n.attrs["start"])
            c = list(coords)
            idx = coords[d].expr if step == 1 else f"{coords[d].expr} * {step}"
            c[d] = Coord(f"({start} + {idx})" if start != "0" else idx, coords[d].col)
            return self.eval(x, tuple(c), extra)
        if n.op == "cat":
            return self.cat(n, coords, extra)
        if n.op == "gather":
            d = n.attrs["dim"]
            idx = self.eval(rest[0], coords, extra)
            c = list(coords)
            c[d] = Coord(idx, any(k.col for k in coords))
            bound = self.args.size(x.shape[d])
            return self.eval(x, tuple(c), _and(extra, f"({idx} >= 0) & ({idx} < {bound})"))
        raise UnsupportedOpError(n.origin or n.op, f"IR op {n.op} has no emitter")

    row_sizes: tuple[Any, ...] = ()

    def load(self, n: Node, coords: tuple[Coord, ...], extra: str | None) -> str:
        k = n.attrs["index"]
        ptr = self.args.input_ptr(k)
        cls = value_class(n.dtype)
        if self.flat:
            # Flat elementwise: every non-scalar tensor is contiguous with the output's shape.
            scalar = all(s == 1 for s in n.shape)
            if self.dialect == "metal":
                val = f"in{k}[0]" if scalar else f"in{k}[offs]"
                return self.tmp(f"(float){val}" if cls == "f" else val, "x")
            load = f"tl.load({ptr})" if scalar else f"tl.load({ptr} + offs, mask=mask)"
            return self.tmp(load + (".to(tl.float32)" if cls == "f" else ""), "x")
        terms_row, terms_col = [], []
        for d, (c, s) in enumerate(zip(coords, n.shape, strict=True)):
            if s == 1 or c.expr == "0":
                continue
            term = f"{c.expr} * {self.args.input_stride(k, d, c.col or c.unit)}"
            (terms_col if c.col else terms_row).append(term)
        used = tuple(c for c, s in zip(coords, n.shape, strict=True) if s != 1 and c.expr != "0")
        mask = self.mask_for(used, extra) if used else extra
        if self.dialect == "metal":
            off = " + ".join(terms_row + terms_col) or "0"
            val = f"in{k}[{off}]"
            if cls == "f":
                # cast before the select: `cond ? bfloat : 0` mixes a 16-bit float with an int
                val = f"(float){val}"
            if mask:
                val = f"(({mask}) ? {val} : {'0.0f' if cls == 'f' else '0'})"
            return self.tmp(val, "x")
        addr = " + ".join([ptr] + [f"({t})" for t in terms_row + terms_col])
        # Only a plain full-row load (or a column-only one: its masked lanes are the same
        # columns) takes a fill: a gather's masked lanes (an ignored target's row) are not
        # padding and can reach an output, e.g. times a 0/1 weight (inf * 0 = NaN).
        full_row = cls == "f" and mask is not None and mask in (self.full_mask, self.col_mask)
        fill = self.fills.get(k, 0.0) if full_row else 0.0
        other = f", other={self.const(fill)}" if cls == "f" else ", other=0"
        load = f"tl.load({addr}, mask={mask}{other})" if mask else f"tl.load({addr})"
        if cls == "f":
            load += ".to(tl.float32)"
        var = self.tmp(load, "x")
        if full_row:
            self.masked[var] = fill
        return var

    def pointwise(self, n: Node, coords: tuple[Coord, ...], extra: str | None) -> str:
        fn = n.attrs["fn"]
        helper = _one_operand_helper(n) if self.dialect == "triton" else None
        if helper is not None:
            # GELU whole, or 1 + erf(y): one helper each, cheaper on 16-bit outputs (fastmath.py)
            name, arg, _ = helper
            x = self.eval(arg, self.broadcast_coords(coords, arg.shape), extra)
            return self.tmp(f"{name}({x}, {self.lowp})")
        vals = []
        for a in n.args:
            if isinstance(a, Node):
                vals.append(self.eval(a, self.broadcast_coords(coords, a.shape), extra))
            else:
                vals.append(self.const(a))
        if fn == "cast":
            src = n.args[0]
            src_cls = value_class(src.dtype) if isinstance(src, Node) else "f"
            dst = value_class(n.dtype)
            if src_cls == dst or src.op == "reduce":
                # reductions are held in fp32 already; a cast of one to float is a no-op
                if dst != "f" or src_cls == dst:
                    return vals[0] if src_cls == dst else self._convert(vals[0], dst)
                return vals[0]
            return self._convert(vals[0], dst)
        if fn == "pow":
            p = n.args[1]
            x = vals[0]
            if p == 2:
                return self.tmp(f"{x} * {x}")
            if p == 0.5:
                return self.tmp(self.fn("sqrt").format(x))
            if p == 1:
                return x
            if p == -1:
                return self.tmp(self.fn("reciprocal").format(x))
            if float(p).is_integer() and 0 < p <= 4:
                return self.tmp(" * ".join([x] * int(p)))
            exp2 = self.fn("exp2")
            log2 = self.fn("log2")
            return self.tmp(exp2.format(f"{log2.format(x)} * {self.const(float(p))}"))
        if fn in ("log1p", "expm1"):
            return self._log1p(vals[0]) if fn == "log1p" else self._expm1(vals[0])
        if fn == "not":
            return self.tmp(f"({vals[0]} == 0)" if self.dialect == "triton" else f"(!{vals[0]})")
        if fn == "div" and self.dialect == "triton" and _is_softmax_denominator(n.args[1]):
            # x / sum(exp(g - max g)): the divisor is a per-row value in [1, n_cols], so one
            # IEEE reciprocal per row and a multiply per element (<= 1.5 ulp from x / s) saves
            # an IEEE division per element, which costs ~10 instructions and a MUFU op.
            key = ("reciprocal", vals[1])
            if key not in self.memo:
                self.memo[key] = self.tmp(self.fn("div").format("1.0", vals[1]), "inv")
            return self.tmp(f"({vals[0]} * {self.memo[key]})")
        if fn == "erf" and self.dialect == "triton":
            return self.tmp(f"porter_erf({vals[0]}, {self.lowp})")
        return self.tmp(self.fn(fn).format(*vals))

    def _sel(self, cond: str, a: str, b: str) -> str:
        return f"tl.where({cond}, {a}, {b})" if self.dialect == "triton" else f"({cond} ? {a} : {b})"

    def _log1p(self, x: str) -> str:
        """log(1 + x) without cancellation for tiny |x| (Goldberg): u = 1 + x rounds, and
        log(u) * x / (u - 1) puts back the bits the rounding lost. u == inf passes through."""
        f = "f" if self.dialect == "metal" else ""
        log = self.fn("log")
        u = self.tmp(f"1.0{f} + {x}", "u")
        exact = self.tmp(f"{log.format(u)} * ({x} / ({u} - 1.0{f}))")
        inner = self._sel(f"{u} == {self.const(float('inf'))}", u, exact)
        return self.tmp(self._sel(f"{u} == 1.0{f}", x, inner))

    def _expm1(self, x: str) -> str:
        """exp(x) - 1 without cancellation for small |x| (Kahan): (u - 1) * x / log(u) with
        u = exp(x), u == 1 giving x. Only for |x| < 0.5: there is no cancellation beyond
        it, and far out u is subnormal or inf, where log(u) is no longer close to x."""
        f = "f" if self.dialect == "metal" else ""
        u = self.tmp(self.fn("exp").format(x), "u")
        um1 = self.tmp(f"{u} - 1.0{f}", "u")
        exact = self.tmp(f"{um1} * ({x} / {self.fn('log').format(u)})")
        small = f"{self.fn('abs').format(x)} < 0.5{f}"
        inner = self._sel(small, exact, um1)
        return self.tmp(self._sel(f"{u} == 1.0{f}", x, inner))

    def fn(self, name: str) -> str:
        table = TRITON_FN if self.dialect == "triton" else METAL_FN
        if name not in table:
            raise UnsupportedOpError(name, f"pointwise function {name} has no {self.dialect} form")
        return table[name]

    def _convert(self, val: str, cls: str) -> str:
        if self.dialect == "metal":
            return self.tmp({"f": f"(float)({val})", "i": f"(long)({val})", "b": f"({val} != 0)"}[cls])
        return self.tmp({"f": f"({val}).to(tl.float32)", "i": f"({val}).to(tl.int64)",
                         "b": f"({val} != 0)"}[cls])

    def cat(self, n: Node, coords: tuple[Coord, ...], extra: str | None) -> str:
        d = n.attrs["dim"]
        c = coords[d]
        bounds: list[Any] = [sympy.Integer(0)]
        for p in n.args:
            bounds.append(bounds[-1] + p.shape[d])
        result: str | None = None
        for i in range(len(n.args) - 1, -1, -1):
            lo = self.args.size(bounds[i])
            hi = self.args.size(bounds[i + 1])
            cond = f"({c.expr} < {hi})"
            shifted = Coord(f"({c.expr} - {lo})" if lo != "0" else c.expr, c.col)
            cc = coords[:d] + (shifted,) + coords[d + 1:]
            m = f"({c.expr} >= {lo})" if lo != "0" else None
            if i < len(n.args) - 1:
                m = _and(m, cond)
            val = self.eval(n.args[i], cc, _and(extra, m))
            result = val if result is None else self.tmp(self.fn("where").format(cond, val, result))
        assert result is not None
        return result

    def reshape_coords(self, coords: tuple[Coord, ...], out_shape: tuple[Any, ...],
                       in_shape: tuple[Any, ...]) -> tuple[Coord, ...]:
        """Coordinates in the source of a reshape: cheap when only size-1 dims move."""
        out_big = [i for i, s in enumerate(out_shape) if s != 1]
        in_big = [i for i, s in enumerate(in_shape) if s != 1]
        if [out_shape[i] for i in out_big] == [in_shape[i] for i in in_big]:
            c = [ZERO] * len(in_shape)
            for i, o in zip(in_big, out_big, strict=True):
                c[i] = coords[o]
            return tuple(c)
        merged = _trailing_merge(out_shape, in_shape)
        if merged is not None:
            # Trailing dims merged into one (a flattened row): split that one coordinate only.
            c = coords[merged]
            inner = in_shape[merged:]
            split = []
            for j, s in enumerate(inner):
                stride = sympy.Mul(*inner[j + 1:])
                div = "//" if self.dialect == "triton" else "/"
                e = c.expr if stride == 1 else f"({c.expr} {div} {self.args.size(stride)})"
                if j > 0:
                    e = f"({e} % {self.args.size(s)})"
                split.append(ZERO if s == 1 else Coord(e, c.col))
            return tuple(coords[:merged]) + tuple(split)
        # General case: through the row-major linear index (div/mod per element).
        terms = []
        for i, cd in enumerate(coords):
            stride = sympy.Mul(*out_shape[i + 1:])
            if out_shape[i] != 1:
                terms.append(f"{cd.expr} * {self.args.size(stride)}")
        lin = self.tmp(" + ".join(terms) or "0", "lin")
        col = any(c.col for c in coords)
        out = []
        for j, s in enumerate(in_shape):
            stride = self.args.size(sympy.Mul(*in_shape[j + 1:]))
            out.append(ZERO if s == 1 else Coord(f"({lin} // {stride} % {self.args.size(s)})", col))
        return tuple(out)


def _trailing_merge(out_shape: tuple[Any, ...], in_shape: tuple[Any, ...]) -> int | None:
    """k when `out_shape` is `in_shape` with dims k.. merged into its last dim, else None."""
    k = len(out_shape) - 1
    if k < 0 or len(in_shape) <= k or tuple(out_shape[:k]) != tuple(in_shape[:k]):
        return None
    if sympy.simplify(out_shape[k] - sympy.Mul(*in_shape[k:])) != 0:
        return None
    return k


def _and(a: str | None, b: str | None) -> str | None:
    if a and b:
        return f"{a} & {b}"
    return a or b


def _row_shape(n: Node) -> tuple[Any, ...]:
    """Shape of a reduce node without its reduced (kept) dims."""
    if n.attrs["keepdim"]:
        return tuple(s for i, s in enumerate(n.shape) if i not in n.attrs["dims"])
    return n.shape


def _is_softmax_denominator(d: Any) -> bool:
    """True for sum(exp(g - max(g))) over a row: a value in [1, n] (the max term is exp(0))."""
    if not (isinstance(d, Node) and d.op == "reduce" and d.attrs.get("kind") == "sum"):
        return False
    e = d.args[0]
    if not (isinstance(e, Node) and e.op == "pw" and e.attrs.get("fn") == "exp"):
        return False
    sub = e.args[0]
    if not (isinstance(sub, Node) and sub.op == "pw" and sub.attrs.get("fn") == "sub"):
        return False
    g, m = sub.args
    return (isinstance(m, Node) and m.op == "reduce" and m.attrs.get("kind") == "max"
            and m.args[0] is g and m.attrs.get("dims") == d.attrs.get("dims"))
