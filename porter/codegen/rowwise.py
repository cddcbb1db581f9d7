"""Rowwise kernels (also the tiled form of elementwise ops): bodies for the single-pass, looped
and post (final scalar reduction) kernels, from a `RowPlan`."""

from __future__ import annotations

import ast
import copy
import itertools
import re
from collections import Counter
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import sympy

from porter.codegen.emit import LOG2E
from porter.codegen.emit import ZERO
from porter.codegen.emit import Coord
from porter.codegen.emit import Emitter
from porter.codegen.emit import KernelArgs
from porter.codegen.ir import value_class
from porter.codegen.ir import Graph
from porter.codegen.ir import Node
from porter.codegen.plan import RowPlan
from porter.codegen.plan import unflattens

IDENTITY = {"sum": "0.0", "max": "float('-inf')", "min": "float('inf')"}
IDENTITY_VALUE = {"sum": 0.0, "max": float("-inf"), "min": float("inf")}
COMBINE = {"sum": "{a} + {b}", "max": "tl.maximum({a}, {b})", "min": "tl.minimum({a}, {b})"}
REDUCE = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min"}


@dataclass
class RowBodies:
    single: list[str]
    looped: list[str]
    post: list[str] | None
    row_coord_lines: list[str]
    online_pairs: list[tuple[int, int]]
    # The single pass with its reduction-free statements first (None where that is `single`):
    # run when a config sets HOIST.
    single_hoisted: list[str] | None = None
    # The persistent kernel: what does not depend on the row (weights, biases) before its row
    # loop, loaded once per program; the rest inside the loop.
    persistent_pre: list[str] = field(default_factory=list)
    persistent_body: list[str] = field(default_factory=list)
    # The single pass over a head block (BLOCK_N) and a tail block (BLOCK_TAIL) of the row.
    two_block: list[str] = field(default_factory=list)
    # A mean and variance the one-block kernels compute either way (constexpr VAR1).
    one_round_variance: bool = False


def _row_coords(plan: RowPlan, args: KernelArgs,
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


def _full(plan: RowPlan, rc: tuple[Coord, ...], cols: str = "cols") -> tuple[Coord, ...]:
    c = list(rc)
    c.insert(plan.dim, Coord(cols, True))
    return tuple(c)


def _coords_for(plan: RowPlan, node: Node, rc: tuple[Coord, ...]) -> tuple[Coord, ...]:
    """Row coordinates for a row-level node (shape = rows, or rows with a kept size-1 dim)."""
    if node.rank == len(plan.space):
        c = list(rc)
        c.insert(plan.dim, ZERO)
        return tuple(c)
    return rc


def _online_pairs(plan: RowPlan) -> dict[int, Node]:
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


def _ssq_pairs(plan: RowPlan) -> dict[int, Node]:
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


def _variance_pairs(plan: RowPlan) -> dict[int, Node]:
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


# Layernorm's mean and variance from one block-wide reduction (constexpr VAR1, a search knob):
# the sums of d = x - k and d^2, k the row's first element, then sum((x - mean)^2) =
# sum(d^2) - sum(d)^2 / n; tiles where k sits more than 4 spreads from the mean take an exact
# second round. The shift keeps the cancellation small: the variance's relative error is about
# eps * (mean - k)^2 / variance (E[x^2] - E[x]^2, no shift, has no such bound). A knob, not the
# default form: on the H200 it took layernorm 4096x32768 from 164 to 149 us but made widths
# 4096-5120 3-15% slower (bench/NOTES.md items 36-37). Welford/Chan triples (stable without a
# shift) cost 27% more instructions and lost the gain.


def build(g: Graph, plan: RowPlan, args: KernelArgs) -> RowBodies:
    """Emit the kernel bodies; registers every argument they use in `args`."""
    coord_lines, rc = _row_coords(plan, args)
    full = _full(plan, rc)
    outs = list(zip(g.outputs, plan.out_kind, strict=True))

    fills: dict[int, float] = {}

    def new_emitter() -> Emitter:
        em = Emitter(g, args)
        em.row_coords = rc
        em.row_sizes = plan.row_shape
        em.reduce_dim = plan.dim
        em.fills = dict(fills)
        return em

    def store_outputs(em: Emitter, kinds: tuple[str, ...],
                      full_coords: tuple[Coord, ...] = full) -> None:
        for j, (o, kind) in enumerate(outs):
            if kind not in kinds:
                continue
            coords = full_coords if kind == "full" else _coords_for(plan, o, rc)
            if kind == "full" and unflattens(o, plan.space):
                # Evaluate the row value at the row's own coordinates (shared with the
                # reductions, so nothing is loaded twice); split them only for the address.
                val = em.eval(o.args[0], coords)
                coords = em.reshape_coords(coords, plan.space, o.shape)
            else:
                val = em.eval(o, coords)
            ptr = args.output_ptr(j)
            terms = [f"({c.expr} * {args.output_stride(j, d, c.col)})"
                     for d, (c, s) in enumerate(zip(coords, o.shape, strict=True))
                     if s != 1 and c.expr != "0"]
            mask = em.full_mask if kind == "full" else "row_mask"
            if kind == "full" and not any(c.col for c in coords if c.expr != "0"):
                mask = "row_mask"
            if val[0].isdigit() or val.startswith("float") or val.startswith("-"):
                val = f"tl.full([ROWS, 1], {val}, tl.float32)"
            em.emit(f"tl.store({' + '.join([ptr] + terms)}, "
                    f"({val}).to({ptr}.dtype.element_ty), mask={mask})")

    def store_post_inputs(em: Emitter) -> None:
        # one 64-bit word per row and folded value: this call's stamp in the high half, the
        # value's fp32 bits in the low half, in one store, so the fold can wait on the word
        if not plan.post:
            return
        words = args.add("words_ptr", "words", "ptr:words")
        stamp = args.add("stamp", "stamp", "stamp")
        for i, p in enumerate(plan.post):
            x = p.args[0]
            val = em.eval(x, _coords_for(plan, x, rc))
            em.emit(f"tl.store({words} + {i} * n_rows + rows, {stamp} | ({val}).to(tl.float32)"
                    ".to(tl.uint32, bitcast=True).to(tl.int64), mask=row_mask)")

    variance = _variance_pairs(plan)
    variance_second = {s.id for s in variance.values()}

    def shift_point(em: Emitter, x: Node) -> str:
        """k, the row's first element: the shift of the VAR1 sums."""
        # an empty row has no column 0 (a tensor compare: the interpreter's scalar one is no mask)
        row_mask, em.row_mask = em.row_mask, f"({em.row_mask}) & (rows * 0 < n_cols)"
        k = em.tmp(f"({em.eval(x, _coords_for(plan, x, rc))}).to(tl.float32)", "k")
        em.row_mask = row_mask
        return k

    def shifted_result(em: Emitter, r: Node, k: str, t1: str, t2: str) -> tuple[str, str, str]:
        """From the row's sums t1 of d = x - k and t2 of d^2: r's sum, the mean (memoized for
        the code after) and the variance partner's sum; returns (mean, variance, guard), the
        guard an `if` whose tiles need the exact second round."""
        em.reduced[r.id] = em.tmp(f"{t1} + {k} * n_cols", "red")
        # the mean as k + sum(d) / n: (sum(d) + k * n) / n would round k * n (at a mean of 1e4
        # and n = 700, to 0.5) and lose what the shift kept
        second = variance[r.id]
        mean_node = second.args[0].args[0].args[1]
        mean = em.tmp(f"{k} + {t1} / n_cols", "mean")
        em.memo[(mean_node.id, _coords_for(plan, mean_node, rc), None)] = mean
        var = em.tmp(f"tl.maximum({t2} - {t1} * {t1} / n_cols, 0.0)", "red")
        em.reduced[second.id] = var
        # Where k sits far out in its row ((mean - k)^2 > 16 variances: an outlier in column 0)
        # the cancellation costs more than 16 roundings: those tiles take the exact second
        # round; a row drawn from one distribution does so with probability ~6e-5.
        return mean, var, f"if tl.max(({t1} * {t1} / n_cols > 16.0 * {var}).to(tl.int32)) > 0:"

    def shifted_sums(em: Emitter, r: Node, blocks: tuple[tuple[tuple[Coord, ...], str], ...]
                     ) -> None:
        """r's sum and its variance partner's from one reduction of (x - k, (x - k)^2) per
        block of the row, k the row's first element (the VAR1 form)."""
        x = r.args[0]
        k = shift_point(em, x)
        s1, s2, xs = [], [], []
        for block_coords, block_mask in blocks:
            em.full_mask = block_mask
            xs.append((f"({em.eval(x, block_coords)}).to(tl.float32)", block_mask))
            d = em.tmp(f"tl.where({block_mask}, {xs[-1][0]} - {k}, 0.0)", "d")
            a, b = em.tmps(f"tl.reduce(({d}, {d} * {d}), 1, _add_pairs)", "s1_", "s2_")
            s1.append(f"{a}[:, None]")
            s2.append(f"{b}[:, None]")
        em.full_mask = blocks[0][1]
        t1 = em.tmp(" + ".join(s1), "s1")
        t2 = em.tmp(" + ".join(s2), "s2")
        mean, var, guard = shifted_result(em, r, k, t1, t2)
        em.emit(guard)
        parts = [f"tl.sum(tl.where({m}, ({xv} - {mean}) * ({xv} - {mean}), 0.0), axis=1)[:, None]"
                 for xv, m in xs]
        em.emit(f"    {var} = {' + '.join(parts)}")

    def reduce_blocks(em: Emitter, r: Node, blocks: tuple[tuple[tuple[Coord, ...], str], ...]
                      ) -> int:
        """r reduced over each block of the row, the partial results combined; returns how
        many blocks needed a select of their masked lanes."""
        kind = r.attrs["kind"]
        parts, selects = [], 0
        for block_coords, block_mask in blocks:
            em.full_mask = block_mask
            v = em.eval(r.args[0], block_coords)
            if not _masked_lanes_hold_identity(em, r, v, pairs, block_coords):
                selects += 1
                v = f"tl.where({block_mask}, {v}, {IDENTITY[kind]})"
            v = f"({v}).to(tl.float32)" if kind == "sum" else v
            parts.append(f"{REDUCE[kind]}({v}, axis=1)[:, None]")
        em.full_mask = blocks[0][1]
        combined = parts[0] if len(parts) == 1 else COMBINE[kind].format(a=parts[0], b=parts[1])
        em.reduced[r.id] = em.tmp(combined, "red")
        return selects

    def mean_and_variance(em: Emitter, r: Node,
                          blocks: tuple[tuple[tuple[Coord, ...], str], ...]) -> int:
        """r (a row's sum) and its variance partner: `if VAR1:` from one reduction of shifted
        sums, else in two rounds (the variance's reduction waits for the mean). Both branches
        bind the same names (the two reductions and the mean), which the code after uses."""
        second = variance[r.id]
        mean_node = second.args[0].args[0].args[1]
        mean_key = (mean_node.id, _coords_for(plan, mean_node, rc), None)
        for block_coords, block_mask in blocks:  # x's loads before the branch: both use them
            em.full_mask = block_mask
            em.eval(r.args[0], block_coords)
        em.full_mask = blocks[0][1]
        before = dict(em.memo)
        em.emit("if VAR1:")
        em.indent += 1
        shifted_sums(em, r, blocks)
        names = (em.reduced[r.id], em.reduced[second.id], em.memo[mean_key])
        em.indent -= 1
        em.emit("else:")
        em.indent += 1
        em.memo = dict(before)
        selects = reduce_blocks(em, r, blocks) + reduce_blocks(em, second, blocks)
        mean = em.eval(mean_node, _coords_for(plan, mean_node, rc))
        for name, value in zip(names, (em.reduced[r.id], em.reduced[second.id], mean),
                               strict=True):
            em.emit(f"{name} = {value}")
        em.indent -= 1
        em.memo = before  # what either branch computed besides the three names stays inside
        em.memo[mean_key] = names[2]
        em.reduced[r.id], em.reduced[second.id] = names[0], names[1]
        return selects

    def max_and_sum_per_thread(em: Emitter, r: Node, s: Node) -> int:
        """r, the row's max of g, and s, its sum of exp(g - max), from one block-wide reduction:
        the row is viewed as [ROWS, BLOCK_N / LANES, LANES / VEC, VEC] (LANES = threads x VEC,
        VEC the elements a thread loads at once: `heuristics.thread_lanes`), so that axes 1
        and 3 hold what each thread owns;
        each thread takes the max and the sum of exps of its own elements, then the threads'
        (max, sum) pairs combine across the block once, where reducing the max across the block
        and then the sum takes two rounds (bench/NOTES.md item 47). exp(g - max) itself, where
        the code after uses it (softmax's output), is each thread's exps rescaled by one exp.
        Returns how many selects of the masked lanes it needed."""
        gv = em.eval(r.args[0], full)
        gl = _lanes_as_identity(em, gv, "max")
        gt = em.tmp(f"tl.reshape({gl}, [ROWS, BLOCK_N // LANES, LANES // VEC, VEC])", "g")
        m_t = em.tmp(f"tl.max(tl.max({gt}, axis=3), axis=1)", "m_t")  # inside the thread
        # a thread that holds only padding (-inf) is shifted by 0: -inf - -inf is NaN
        sh_t = em.tmp(f"tl.where({m_t} > float('-inf'), {m_t}, 0.0) * {LOG2E}", "shift_t")
        p = em.tmp(f"tl.exp2({gt} * {LOG2E} - {sh_t}[:, None, :, None])", "p")
        m_row, s_row = em.tmps(f"tl.reduce(({m_t}, tl.sum(tl.sum({p}, axis=3), axis=1)), 1, "
                               "_max_sum_exp)", "m_row", "s_row")
        em.reduced[r.id] = em.tmp(f"{m_row}[:, None]", "red")
        em.reduced[s.id] = em.tmp(f"{s_row}[:, None]", "red")
        e = s.args[0]
        users = [n for n in g.live() if e in n.args and n is not s]
        # softmax's exp / sum: the thread's scale and 1 / sum folded, one multiply an element
        divs = [n for n in users if n.op == "pw" and n.attrs["fn"] == "div" and
                n.args[0] is e and n.args[1] is s]
        if not users and e not in g.outputs:
            return int(gl != gv)
        sh_row = em.tmp(f"tl.where({m_row} > float('-inf'), {m_row}, 0.0) * {LOG2E}", "shift")
        # m_t <= the row's max, so the scale is at most 1; a padding-only thread's is 0, which
        # keeps exp(g - max) 0 in every masked lane
        scale = em.tmp(f"tl.where({m_t} > float('-inf'), tl.exp2({sh_t} - {sh_row}[:, None]), "
                       "0.0)", "scale")
        if divs:
            inv = em.tmp(em.fn("div").format("1.0", em.reduced[s.id]), "inv")
            dv = em.tmp(f"tl.reshape({p} * ({scale} * {inv})[:, None, :, None], [ROWS, BLOCK_N])")
            for d in divs:
                em.memo[(d.id, full, None)] = dv
        if len(divs) < len(users) or e in g.outputs:
            ev = em.tmp(f"tl.reshape({p} * {scale}[:, None, :, None], [ROWS, BLOCK_N])", "e")
            em.memo[(e.id, full, None)] = ev
            em.masked[ev] = 0.0
        return int(gl != gv)

    # ---- single pass: every row lives in registers; each load happens once -----------------
    def reduce_single(em: Emitter) -> int:
        """Emit the reductions; returns how many needed a select of the masked lanes."""
        selects = 0
        for r in plan.main:
            if r.id in variance_second or r.id in paired_sums:
                continue
            if r.id in variance:
                selects += mean_and_variance(em, r, ((full, em.full_mask),))
            elif r.id in pairs:
                selects += max_and_sum_per_thread(em, r, pairs[r.id])
            else:
                selects += reduce_blocks(em, r, ((full, em.full_mask),))
        return selects

    pairs = _online_pairs(plan)
    paired_sums = {s.id for s in pairs.values()}
    fills = _choose_fills(g, plan, lambda fl: reduce_single(_trial(new_emitter(), fl)))
    em = new_emitter()
    reduce_single(em)
    store_outputs(em, ("full", "row"))
    store_post_inputs(em)
    single = em.lines

    # ---- two blocks: a row that is not a power of two wide as a head and a tail block -------
    # (5120 = 4096 + 1024), so no registers hold masked lanes (an 8192-wide block would keep
    # 37.5% of them); each reduction combines its two partial reductions.
    em = new_emitter()
    blocks = ((full, "mask"), (_full(plan, rc, "cols_t"), "mask_t"))
    for r in plan.main:
        if r.id in variance_second:
            continue
        if r.id in variance:
            mean_and_variance(em, r, blocks)
        else:
            reduce_blocks(em, r, blocks)
    for block_coords, block_mask in blocks:
        em.full_mask = block_mask
        store_outputs(em, ("full",), block_coords)
    em.full_mask = "mask"
    store_outputs(em, ("row",))
    store_post_inputs(em)
    two_block = em.lines

    # ---- persistent: the single pass in a loop over row blocks ------------------------------
    em = new_emitter()
    em.col_mask = "col_mask"
    reduce_single(em)
    store_outputs(em, ("full", "row"))
    store_post_inputs(em)
    # What depends on no row (weights, biases) goes before the row loop, loaded once per
    # program: at width 32768 a layernorm's weight and bias, pipelined with every row, took two
    # thirds of the shared memory, and 3 stages did not fit (bench/NOTES.md item 16).
    row_names = {"rows", "row_mask", "mask", "block"} | set(_assignments(coord_lines))
    persistent_pre, persistent_body = split_invariant(em.lines, row_names)

    # ---- looped: one pass over the row per reduction (max+sum(exp) share one), then outputs --
    em = new_emitter()

    def open_loop() -> None:
        """Start a loop over the row's BLOCK_N chunks (values computed inside stay inside)."""
        em.emit("for start in range(0, n_cols, BLOCK_N):")
        em.emit("    cols = start + tl.arange(0, BLOCK_N)[None, :]")
        em.emit("    mask = row_mask & ((cols < n_cols) | EVEN)")
        em.indent += 1
        em.reset()

    def close_loop() -> None:
        em.indent -= 1
        em.reset()

    def looped_reduce(r: Node) -> None:
        """r over the row's chunks: a per-lane accumulator, reduced once after the loop."""
        kind = r.attrs["kind"]
        em.emit(f"acc = tl.full([ROWS, BLOCK_N], {IDENTITY[kind]}, tl.float32)")
        open_loop()
        v = _lanes_as_identity(em, em.eval(r.args[0], full), kind)
        v = f"({v}).to(tl.float32)" if kind == "sum" else v
        em.emit("acc = " + COMBINE[kind].format(a="acc", b=v))
        close_loop()
        em.reduced[r.id] = em.tmp(f"{REDUCE[kind]}(acc, axis=1)[:, None]", "red")

    def looped_mean_and_variance(r: Node) -> None:
        """r and its variance partner over the row's chunks: `if VAR1:` one pass of shifted
        sums, else a pass for the mean and one more for the variance. Both bind the same names;
        the mean is kept for the loops after.

        The VAR1 pass keeps one (sum, sum of squares) pair per thread: each chunk is viewed as
        [ROWS, BLOCK_N / LANES, LANES / VEC, VEC] (LANES = threads x VEC, VEC the elements of
        one 16-byte load) and summed over the thread's own repetitions and its VEC elements,
        which stays inside the thread; the block combines once per row. Per-lane tiles of both
        sums (item 38) took 16-32 registers more and lost; this form won (item 40)."""
        x, second = r.args[0], variance[r.id]
        mean_node = second.args[0].args[0].args[1]
        mean_key = (mean_node.id, _coords_for(plan, mean_node, rc), None)
        em.emit("if VAR1:")
        em.indent += 1
        k = shift_point(em, x)
        em.emit("acc1 = tl.zeros([ROWS, LANES // VEC], tl.float32)")
        em.emit("acc2 = tl.zeros([ROWS, LANES // VEC], tl.float32)")
        open_loop()
        d = em.tmp(f"tl.reshape(tl.where(mask, ({em.eval(x, full)}).to(tl.float32) - {k}, 0.0), "
                   "[ROWS, BLOCK_N // LANES, LANES // VEC, VEC])", "d")
        em.emit(f"acc1 = acc1 + tl.sum(tl.sum({d}, axis=3), axis=1)")
        em.emit(f"acc2 = acc2 + tl.sum(tl.sum({d} * {d}, axis=3), axis=1)")
        close_loop()
        a, b = em.tmps("tl.reduce((acc1, acc2), 1, _add_pairs)", "s1_", "s2_")
        t1, t2 = em.tmp(f"{a}[:, None]", "s1"), em.tmp(f"{b}[:, None]", "s2")
        mean, var, guard = shifted_result(em, r, k, t1, t2)
        em.emit(guard)
        em.indent += 1
        em.emit("acc = tl.zeros([ROWS, BLOCK_N], tl.float32)")
        open_loop()
        xv = f"({em.eval(x, full)}).to(tl.float32)"
        em.emit(f"acc = acc + tl.where(mask, ({xv} - {mean}) * ({xv} - {mean}), 0.0)")
        close_loop()
        em.emit(f"{var} = tl.sum(acc, axis=1)[:, None]")
        em.indent -= 2
        names = (em.reduced[r.id], var, mean)
        em.emit("else:")
        em.indent += 1
        em.reset()
        looped_reduce(r)
        looped_reduce(second)
        values = (em.reduced[r.id], em.reduced[second.id], em.eval(mean_node, mean_key[1]))
        for name, value in zip(names, values, strict=True):
            em.emit(f"{name} = {value}")
        em.indent -= 1
        em.reduced[r.id], em.reduced[second.id] = names[0], names[1]
        em.kept[mean_key] = names[2]
        em.reset()

    ssq = _ssq_pairs(plan)
    looped_with_max = paired_sums | {s.id for s in ssq.values()}
    online: list[tuple[int, int]] = []
    for r in plan.main:
        if r.id in looped_with_max:
            continue
        if r.id in ssq:
            # max |x| and sum((|x| / max)^2) in one pass: rescale the sum when the max grows.
            s = ssq[r.id]
            em.emit("m_acc = tl.zeros([ROWS, BLOCK_N], tl.float32)")
            em.emit("s_acc = tl.zeros([ROWS, BLOCK_N], tl.float32)")
            open_loop()
            av = em.eval(r.args[0], full)
            em.emit(f"a = {_lanes_as_identity(em, av, 'sum')}")
            em.emit("m_new = tl.maximum(m_acc, a)")
            em.emit("ratio = tl.where(m_new > 0, m_acc / m_new, 0.0)")
            em.emit("q = tl.where(m_new > 0, a / m_new, 0.0)")
            em.emit("s_acc = s_acc * ratio * ratio + q * q")
            em.emit("m_acc = m_new")
            close_loop()
            red_m = em.tmp("tl.max(m_acc, axis=1)[:, None]", "red")
            em.reduced[r.id] = red_m
            ratio = em.tmp(f"tl.where({red_m} > 0, m_acc / {red_m}, 0.0)", "ratio")
            em.reduced[s.id] = em.tmp(f"tl.sum(s_acc * {ratio} * {ratio}, axis=1)[:, None]",
                                      "red")
            continue
        if r.id in pairs:
            s = pairs[r.id]
            online.append((r.id, s.id))
            # A running (max, sum of exp) per lane position, not per row: the chunk [ROWS,
            # BLOCK_N] is viewed as [ROWS, BLOCK_N / LANES, LANES], LANES = threads x the
            # elements of one 16-byte load, so that axis 1 holds the repetitions each thread
            # owns and the chunk's max and sum along it stay in the thread. No block-wide
            # reduction (and barrier) per chunk; the lanes combine once per row. The exps are
            # exp2(g * log2 e - m * log2 e), one FFMA each (bench/NOTES.md item 39).
            em.emit("m_lane = tl.full([ROWS, LANES], float('-inf'), tl.float32)")
            em.emit("s_lane = tl.zeros([ROWS, LANES], tl.float32)")
            open_loop()
            gv = em.eval(r.args[0], full)
            em.emit(f"g = tl.reshape({_lanes_as_identity(em, gv, 'max')}, "
                    "[ROWS, BLOCK_N // LANES, LANES])")
            em.emit("m_new = tl.maximum(m_lane, tl.max(g, axis=1))")
            # a lane that has seen only padding (-inf) is shifted by 0: -inf - -inf is NaN
            em.emit(f"m_shift = tl.where(m_new > float('-inf'), m_new, 0.0) * {LOG2E}")
            em.emit(f"p = tl.exp2(g * {LOG2E} - m_shift[:, None, :])")
            em.emit(f"s_lane = s_lane * tl.exp2(m_lane * {LOG2E} - m_shift) + tl.sum(p, axis=1)")
            em.emit("m_lane = m_new")
            close_loop()
            m_row = em.tmp("tl.max(m_lane, axis=1)[:, None]", "red")
            shift = em.tmp(f"tl.where({m_row} > float('-inf'), {m_row}, 0.0) * {LOG2E}", "shift")
            em.reduced[r.id] = m_row
            em.reduced[s.id] = em.tmp(
                f"tl.sum(s_lane * tl.exp2(m_lane * {LOG2E} - {shift}), axis=1)[:, None]", "red")
            continue
        if r.id in variance_second:
            continue  # reduced with its mean's sum, below
        if r.id in variance:
            looped_mean_and_variance(r)
            continue
        looped_reduce(r)
    if "full" in plan.out_kind:
        open_loop()
        store_outputs(em, ("full",))
        close_loop()
    store_outputs(em, ("row",))
    store_post_inputs(em)
    looped = em.lines

    # ---- post: one program folds the per-row values into the scalar outputs ----------------
    post = None
    if plan.post:
        em = Emitter(g, args)
        em.emit("late = False  # a word never stamped within MAX_SPINS polls: the result is NaN")
        for i, p in enumerate(plan.post):
            kind = p.attrs["kind"]
            em.emit(f"pacc{i} = tl.full([BLOCK], {IDENTITY[kind]}, tl.float32)")
        em.emit("for start in range(0, n_rows, BLOCK):")
        em.emit("    offs = start + tl.arange(0, BLOCK)")
        em.emit("    m = offs < n_rows")
        loads = [f"    w{i} = tl.load(words_ptr + {i} * n_rows + offs, mask=m, other=stamp, "
                 "volatile=True)" for i in range(len(plan.post))]
        unstamped = " | ".join(f"((w{i} >> 32) != (stamp >> 32))" for i in range(len(plan.post)))
        for ln in loads:
            em.emit(ln)
        em.emit("    spins = 0")
        em.emit(f"    while (tl.max(({unstamped}).to(tl.int32), axis=0) > 0) & (spins < MAX_SPINS):")
        for ln in loads:
            em.emit("    " + ln)
        em.emit("        spins += 1")
        em.emit(f"    late = late | (tl.max(({unstamped}).to(tl.int32), axis=0) > 0)")
        for i, p in enumerate(plan.post):
            kind = p.attrs["kind"]
            bits = f"(w{i} & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)"
            em.emit(f"    pacc{i} = " + COMBINE[kind].format(
                a=f"pacc{i}", b=f"tl.where(m, {bits}, {IDENTITY[kind]})"))
        for i, p in enumerate(plan.post):
            total = em.tmp(f"{REDUCE[p.attrs['kind']]}(pacc{i}, axis=0)", "total")
            em.reduced[p.id] = em.tmp(f"tl.where(late, float('nan'), {total})", "total")
        for j, (o, kind) in enumerate(outs):
            if kind == "scalar":
                val = em.eval(o, ())
                ptr = args.output_ptr(j)
                em.emit(f"tl.store({ptr}, ({val}).to({ptr}.dtype.element_ty))")
        post = em.lines
    hoisted = hoist_reduction_free(single)
    moves_a_load = _loads_before_a_reduction(hoisted) > _loads_before_a_reduction(single)
    return RowBodies(single, looped, post, coord_lines, online,
                     hoisted if moves_a_load else None, persistent_pre, persistent_body,
                     two_block, one_round_variance=bool(variance))


def _loads_before_a_reduction(lines: list[str]) -> int:
    first = next((i for i, ln in enumerate(lines) if _reduces(ln.strip())), len(lines))
    return sum("tl.load(" in ln for ln in lines[:first])


def _reduces(code: str) -> bool:
    """Whether a statement or expression calls a tl reduction (of a block header such as
    `if VAR1:` or `else:`, its condition)."""
    if code.endswith(":"):
        code = code[3:-1] if code.startswith("if ") else "None"
    return any(isinstance(n, ast.Attribute) and n.attr in _REDUCTIONS
               for n in ast.walk(ast.parse(code)))


_ASSIGN = re.compile(r"^    ([A-Za-z_]\w*) = (.+)$")  # a statement at the kernel's top level
_REDUCTIONS = {"sum", "max", "min", "reduce"}  # tl.* calls: a statement using one stays put


_TARGETS = re.compile(r"^\s*([A-Za-z_]\w*(?:, [A-Za-z_]\w*)*) = ")  # `a = ` or `a, b = `


def _assignments(lines: list[str]) -> list[str]:
    """The names each assignment among `lines` binds, at any indentation, with repeats."""
    return [n for ln in lines if (m := _TARGETS.match(ln)) for n in m.group(1).split(", ")]


def split_invariant(lines: list[str], variant: set[str]) -> tuple[list[str], list[str]]:
    """(movable, rest), each in order: a top-level statement is movable when it calls no
    reduction and uses none of `variant` nor anything computed from them. Only names assigned
    once move, so moving the first list ahead of the second computes the same values."""
    assigned = Counter(_assignments(lines))
    variant = set(variant)
    movable: list[str] = []
    rest: list[str] = []
    for ln in lines:
        m = _ASSIGN.match(ln)
        if m and assigned[m.group(1)] == 1:
            names = {n.id for n in ast.walk(ast.parse(m.group(2))) if isinstance(n, ast.Name)}
            if not _reduces(m.group(2)) and not names & variant:
                movable.append(ln)
                continue
        if (t := _TARGETS.match(ln)):
            variant.update(t.group(1).split(", "))
        rest.append(ln)
    return movable, rest


def hoist_reduction_free(lines: list[str]) -> list[str]:
    """Move each top-level statement that depends on no reduction (loads of weights, biases,
    targets and what indexes them) to the start of the body, in order.

    Triton issues loads where they are written and does not move them across a reduction (a
    barrier), so a weight load written after the reductions adds a memory round trip to each
    row. Whether that pays is measured, not assumed (config knob HOIST): it made rmsnorm at
    4097x1537 9% faster on an H100 and layernorm at width 5120 16-32% slower (the weights stay
    live across both reductions; bench/NOTES.md items 9 and 20).
    """
    movable, rest = split_invariant(lines, set())
    return movable + rest


def _lanes_as_identity(em: Emitter, v: str, kind: str) -> str:
    """`v` with its masked lanes set to the identity of a `kind` reduction: `v` itself where
    they already hold it (its load's fill), else a select."""
    if em.masked_value(v) == IDENTITY_VALUE[kind]:
        return v
    return f"tl.where(mask, {v}, {IDENTITY[kind]})"


def _masked_lanes_hold_identity(em: Emitter, r: Node, v: str, pairs: dict[int, Node],
                                 full: tuple[Coord, ...]) -> bool:
    """Can reduction `r` (its argument emitted as `v`) skip the select of the masked lanes?

    Yes when the masked lanes already hold its identity, and for the sum of an online-softmax
    pair, sum(exp(g - max g)), when g's masked lanes hold -inf: there exp(-inf - m) = 0 for
    every m except -inf, inf or NaN, and each of those makes a real lane NaN as well (m is the
    max of the real lanes), so the row's sum is NaN either way."""
    kind = r.attrs["kind"]
    if em.masked_value(v) == IDENTITY_VALUE[kind]:
        return True
    paired = next((m for m, s in pairs.items() if s is r), None)
    if paired is None:
        return False
    g = r.args[0].args[0].args[0]  # sum(exp(sub(g, max)))
    return em.masked_value(em.eval(g, full)) == float("-inf")


def _trial(em: Emitter, fills: dict[int, float]) -> Emitter:
    em.fills = fills
    em.args = copy.deepcopy(em.args)  # a trial emission registers no kernel arguments
    return em


def _choose_fills(g: Graph, plan: RowPlan, count_selects: Any) -> dict[int, float]:
    """What full-row loads of each float input put in masked lanes: the fills (0, or the
    identity of a max or min in the plan) that leave the fewest selects in the single pass,
    0 everywhere on a tie. Loading a max's input with -inf, as Liger's softmax does, drops
    both of softmax's selects: 368 -> 336 SASS instructions (bench/NOTES.md item 18)."""
    kinds = {r.attrs["kind"] for r in plan.main}
    options = [0.0] + [IDENTITY_VALUE[k] for k in ("max", "min") if k in kinds]
    inputs = [n.attrs["index"] for n in g.nodes if n.op == "input" and value_class(n.dtype) == "f"]
    if len(options) == 1 or not inputs:
        return {}
    best: tuple[int, dict[int, float]] | None = None
    for choice in itertools.product(options, repeat=len(inputs)):
        fills = {k: f for k, f in zip(inputs, choice, strict=True) if f != 0.0}
        n = count_selects(fills)
        if best is None or n < best[0]:
            best = (n, fills)
    return best[1]


def size_exprs(plan: RowPlan) -> tuple[Any, Any]:
    """(n_rows, n_cols) as sympy expressions."""
    return sympy.Mul(*plan.row_shape), plan.space[plan.dim] if plan.space else sympy.Integer(1)
