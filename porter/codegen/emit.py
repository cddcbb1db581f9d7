"""Expression emission: evaluate an IR node at symbolic coordinates into Triton (or Metal) code.

A kernel iterates over some index space; each dimension of a node is given a `Coord`, a code
expression (e.g. `cols`, `r0`, `(8 + cols)`). Index ops only rewrite coordinates (a slice adds
its start, a cat selects between two masked loads, a gather substitutes the loaded index), so
they cost no memory traffic; pointwise ops become one line each; loads happen once per
(node, coordinates) thanks to memoization, which is what fuses the whole graph into one kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
import torch

from porter.codegen.errors import UnsupportedOpError
from porter.codegen.ir import Graph
from porter.codegen.ir import Node
from porter.codegen.ir import value_class
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.kernel_args import sym_to_python  # noqa: F401 - importable from here as before
from porter.codegen.patterns import is_softmax_denominator
from porter.codegen.patterns import one_operand_helper
from porter.codegen.patterns import row_shape
from porter.codegen.patterns import trailing_merge
from porter.codegen.spellings import LOG2E  # noqa: F401 - importable from here as before
from porter.codegen.spellings import MASKED_LANE_FN
from porter.codegen.spellings import METAL_DTYPE  # noqa: F401 - importable from here as before
from porter.codegen.spellings import METAL_FN
from porter.codegen.spellings import TRITON_DTYPE  # noqa: F401 - importable from here as before
from porter.codegen.spellings import TRITON_FN


@dataclass(frozen=True)
class Coord:
    """One dimension's index expression; `col` is True when it varies along the tile's columns.
    `unit`: a row coordinate whose stride is a constexpr as the columns' are (the column
    kernel's positions along the last dim: a unit stride the compiler sees gives 16-byte
    vector loads). `lin`, `dim`: a reshape's split of one row-major linear index `lin` over
    the source's dims from some dim on, this coordinate being source dim `dim`; where the
    tensor is contiguous its address there is `lin` itself, with no division (`flat_terms`)."""

    expr: str
    col: bool = False
    unit: bool = False
    lin: str = ""
    dim: int = -1


ZERO = Coord("0")


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
        # The looped kernel's SHIFT body (rowwise.looped.shifted): a whole row's loads and
        # stores take the block's 16-byte-aligned address (`row_address`); `shifted`: the
        # tensors that did (launcher expressions, whose strides the launcher checks), each with
        # its row stride's parameter.
        self.shift = False
        self.shifted: dict[str, str] = {}
        self.shift_body = 0  # where the open SHIFT loop's statements begin (rowwise.looped)
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
        helper = one_operand_helper(n) if self.dialect == "triton" else None
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
                what = "scan" if n.op == "scan" else "matmul"
                raise UnsupportedOpError(n.origin, f"{what} result re-indexed in the epilogue")
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
            want = tuple(c for c, s in zip(rc, row_shape(n), strict=True) if s != 1)
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
        if n.op == "flip":
            c = list(coords)
            for d in n.attrs["dims"]:
                c[d] = flip_coord(coords[d], self.args.size(x.shape[d]))
            return self.eval(x, tuple(c), extra)
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
        shifted = self.row_address(f"inputs[{k}]", ptr, coords, n.shape,
                                   lambda d, col: self.args.input_stride(k, d, col))
        if shifted is not None and mask == self.full_mask:
            load = f"tl.load({shifted}{{}})" + (".to(tl.float32)" if cls == "f" else "")
            fill = self.fills.get(k, 0.0) if cls == "f" else 0
            var = self.branch_on_inner(
                load.format(""), load.format(f", mask={mask}, other={self.const(fill)}"), "x")
            self.masked[var] = fill
            return var
        addr = " + ".join([ptr] + [f"({t})" for t in terms_row + terms_col])
        flat = self.flat_terms(coords, n.shape, lambda d, c: self.args.input_stride(
            k, d, c.col or c.unit))
        if flat is not None:
            # a constexpr choice: the division-free address where the input is contiguous
            addr = (f"({' + '.join([ptr] + flat)}) if {self.args.input_flat(k)} "
                    f"else ({addr})")
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

    def row_address(self, tensor: str, ptr: str, coords: tuple[Coord, ...],
                    shape: tuple[Any, ...], stride: Any) -> str | None:
        """In the SHIFT body, a whole row's address at the block's aligned columns: the row's
        start rounded down to SHIFT elements (a multiple the compiler sees), plus `cols_al`
        (the columns plus the row's skew, from a multiple of BLOCK_N), so that its loads are
        16 bytes wide. None elsewhere (the usual address, at the true `cols`)."""
        if not self.shift or self.dialect != "triton" or len(coords) != 2 or \
                coords[0].expr != "rows" or coords[1].expr != "cols" or not coords[1].col or \
                any(s == 1 for s in shape):
            return None
        row, col = stride(0, False), stride(1, True)
        self.shifted.setdefault(tensor, row)
        return f"{ptr} + (row_s * {row}) // SHIFT * SHIFT + cols_al * {col}"

    def branch_on_inner(self, inner: str, edge: str, prefix: str) -> str:
        """A value that is `inner` in the SHIFT body's inner blocks (no lane masked: their
        loads unmasked) and `edge` in the row's first and last blocks (`inner`, a constexpr
        in each of the loops over them, rowwise.looped.close_loop)."""
        self._n += 1
        name = f"{prefix}{self._n}"
        self.emit("if inner:")
        self.emit(f"    {name} = {inner}")
        self.emit("else:")
        self.emit(f"    {name} = {edge}")
        return name

    def pointwise(self, n: Node, coords: tuple[Coord, ...], extra: str | None) -> str:
        fn = n.attrs["fn"]
        helper = one_operand_helper(n) if self.dialect == "triton" else None
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
        if fn == "div" and self.dialect == "triton" and is_softmax_denominator(n.args[1]):
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
        if self.dialect == "triton":
            return f"tl.where({cond}, {a}, {b})"
        return f"({cond} ? {a} : {b})"

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
            return self.tmp({"f": f"(float)({val})", "i": f"(long)({val})",
                             "b": f"({val} != 0)"}[cls])
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
        merged = trailing_merge(out_shape, in_shape)
        if merged is not None:
            # Trailing dims merged into one (a flattened row): split that one coordinate only.
            c = coords[merged]
            inner = in_shape[merged:]
            split = []
            for j, s in enumerate(inner):
                stride = sympy.Mul(*inner[j + 1:])
                div = "//" if self.dialect == "triton" else "/"
                e = c.expr if stride == 1 else f"({c.expr} {div} {self._divisor(stride)})"
                if j > 0:
                    e = f"({e} % {self.args.size(s)})"
                split.append(ZERO if s == 1 else Coord(e, c.col, lin=c.expr, dim=merged + j))
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
            stride = self._divisor(sympy.Mul(*in_shape[j + 1:]))
            out.append(ZERO if s == 1 else Coord(f"({lin} // {stride} % {self.args.size(s)})", col,
                                                 lin=lin, dim=j))
        return tuple(out)

    def _divisor(self, size: Any) -> str:
        """A size index math divides by: a constexpr in Triton (`KernelArgs.divisor`)."""
        return self.args.divisor(size) if self.dialect == "triton" else self.args.size(size)

    def flat_terms(self, coords: tuple[Coord, ...], shape: tuple[Any, ...],
                   stride: Any) -> list[str] | None:
        """The address terms of a contiguous tensor of `shape` at `coords` without a reshape's
        divisions, or None where they do not apply: the coordinates of a trailing run of its
        dims (all of them from some dim on) split one linear index `lin` in order, so there the
        offset is `lin` itself. `stride(d, coord)` gives the other dims' stride argument. A
        flattened group or channels dim (GroupNorm's [N, C, H, W] rows of C/G * H * W) then
        costs no 64-bit division per element (KernelBench 35: 13% of copy bandwidth)."""
        if self.dialect != "triton":
            return None
        big = [d for d, (c, s) in enumerate(zip(coords, shape, strict=True))
               if s != 1 and c.expr != "0"]
        group = [d for d in big if coords[d].lin]
        if not group or len({coords[d].lin for d in group}) != 1:
            return None
        if any(coords[d].dim != d for d in group) or group != [d for d in big if d >= group[0]]:
            return None
        terms = [f"({coords[d].expr} * {stride(d, coords[d])})" for d in big if d < group[0]]
        return terms + [f"({coords[group[0]].lin})"]


def flip_coord(c: Coord, size: str) -> Coord:
    """The coordinate of position `c` along a flipped dim of `size` positions: size - 1 - c.
    A coordinate flipped twice is the one it came from, unwrapped rather than nested: the
    reversed scan's `n - 1 - cols` read through a flip of its input is `cols` again, which the
    compiler sees as contiguous (vector loads) where the nested form it would not."""
    head = f"({size} - 1 - "
    inner = c.expr[len(head):-1]
    if c.expr.startswith(head) and c.expr.endswith(")") and _balanced(inner):
        return Coord(inner, c.col, c.unit)
    return Coord(f"{head}{c.expr})", c.col, c.unit)


def _balanced(expr: str) -> bool:
    """Whether `expr`'s parentheses pair up inside it (it is one expression, not the tail of
    one and the head of another)."""
    depth = 0
    for ch in expr:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _and(a: str | None, b: str | None) -> str | None:
    if a and b:
        return f"{a} & {b}"
    return a or b
