"""The one-block row-wise kernels, whose whole row sits in registers: the single pass, its
persistent form (a loop over row blocks) and the two-block single pass (a head and a tail
block for a row that is not a power of two wide). Each body is the row's reductions, then the
stores of the outputs and of the fold's words."""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass

from porter.codegen.emit import Emitter
from porter.codegen.ir import Node
from porter.codegen.ir import value_class
from porter.codegen.rowwise.analysis import IDENTITY_VALUE
from porter.codegen.rowwise.analysis import full_coords
from porter.codegen.rowwise.hoist import assignments
from porter.codegen.rowwise.hoist import split_invariant
from porter.codegen.rowwise.looped import exp_below
from porter.codegen.rowwise.rowgen import Blocks
from porter.codegen.rowwise.rowgen import RowGen
from porter.codegen.rowwise.rowgen import lanes_as_identity
from porter.codegen.rowwise.rowgen import reduce_blocks
from porter.codegen.rowwise.rowgen import store_outputs
from porter.codegen.rowwise.rowgen import store_post_inputs
from porter.codegen.rowwise.variance import mean_and_variance


def single_pass(rg: RowGen) -> list[str]:
    """The single pass: every row lives in registers; each load happens once."""
    em = rg.emitter()
    reduce_single(rg, em)
    store_outputs(rg, em, ("full", "row"))
    store_post_inputs(rg, em)
    return em.lines


def two_block(rg: RowGen) -> list[str]:
    """The single pass over a head block (BLOCK_N) and a tail block (BLOCK_TAIL) of a row that
    is not a power of two wide (5120 = 4096 + 1024), so that no registers hold masked lanes
    (an 8192-wide block would keep 37.5% of them); each reduction combines its two partial
    reductions."""
    em = rg.emitter()
    blocks = ((rg.full, "mask"), (full_coords(rg.plan, rg.rc, "cols_t"), "mask_t"))
    for r in rg.plan.main:
        if r.id in rg.variance_second:
            continue
        if r.id in rg.variance:
            mean_and_variance(rg, em, r, blocks)
        else:
            reduce_blocks(rg, em, r, blocks)
    for block_coords, block_mask in blocks:
        em.full_mask = block_mask
        store_outputs(rg, em, ("full",), block_coords)
    em.full_mask = "mask"
    store_outputs(rg, em, ("row",))
    store_post_inputs(rg, em)
    return em.lines


def persistent(rg: RowGen) -> tuple[list[str], list[str]]:
    """The single pass in a loop over row blocks: (what goes before the row loop, its body).

    What depends on no row (weights, biases) goes before the row loop, loaded once per
    program: at width 32768 a layernorm's weight and bias, pipelined with every row, took two
    thirds of the shared memory, and 3 stages did not fit (bench/NOTES.md item 16)."""
    em = rg.emitter()
    em.col_mask = "col_mask"
    reduce_single(rg, em)
    store_outputs(rg, em, ("full", "row"))
    store_post_inputs(rg, em)
    row_names = {"rows", "row_mask", "mask", "block"} | set(assignments(rg.coord_lines))
    return split_invariant(em.lines, row_names)


def reduce_single(rg: RowGen, em: Emitter) -> int:
    """Emit the reductions of a whole-row tile; returns how many needed a select of the masked
    lanes."""
    selects = 0
    whole: Blocks = ((rg.full, em.full_mask),)
    for r in rg.plan.main:
        if r.id in rg.variance_second or r.id in rg.paired_sums:
            continue
        if r.id in rg.variance:
            selects += mean_and_variance(rg, em, r, whole)
        elif r.id in rg.pairs:
            selects += max_and_sum_per_thread(rg, em, r, rg.pairs[r.id])
        else:
            selects += reduce_blocks(rg, em, r, whole)
    return selects


def max_and_sum_per_thread(rg: RowGen, em: Emitter, r: Node, s: Node) -> int:
    """r, the row's max of g, and s, its sum of exp(g - max), from one block-wide reduction
    of each thread's (max, sum) pair (`thread_exps`), where reducing the max across the block
    and then the sum takes two rounds (bench/NOTES.md item 47); exp(g - max) itself, where the
    code after uses it, from the thread's exps (`rescale_thread_exps`). Returns how many
    selects of the masked lanes it needed."""
    t = thread_exps(rg, em, r)
    m_row, s_row = em.tmps(f"tl.reduce(({t.m_t}, {t.sums}), 1, _max_sum_exp)", "m_row",
                           "s_row")
    em.reduced[r.id] = em.tmp(f"{m_row}[:, None]", "red")
    em.reduced[s.id] = em.tmp(f"{s_row}[:, None]", "red")
    rescale_thread_exps(rg, em, r, s, t)
    return t.selects


@dataclass(frozen=True)
class ThreadExps:
    """A block's exps under each thread's own max (`thread_exps`).

    m_t: each thread's max of g, [ROWS, LANES // VEC]; shift_t: m_t, 0 where it is -inf;
    p: exp(g - shift_t), in the view [ROWS, BLOCK_N // LANES, LANES // VEC, VEC];
    sums: each thread's sum of p; selects: the selects of the masked lanes it needed."""

    m_t: str
    shift_t: str
    p: str
    sums: str
    selects: int


def thread_exps(rg: RowGen, em: Emitter, r: Node) -> ThreadExps:
    """Each thread's max of g (r's argument) and its exps under that max: the block is viewed as
    [ROWS, BLOCK_N / LANES, LANES / VEC, VEC] (LANES = threads x VEC, VEC the elements a
    thread loads at once: `heuristics.thread_lanes`), so that axes 1 and 3 hold what each
    thread owns, and nothing here leaves the thread."""
    gv = em.eval(r.args[0], rg.full)
    gl = lanes_as_identity(em, gv, "max")
    gt = em.tmp(f"tl.reshape({gl}, [ROWS, BLOCK_N // LANES, LANES // VEC, VEC])", "g")
    m_t = em.tmp(f"tl.max(tl.max({gt}, axis=3), axis=1)", "m_t")  # inside the thread
    # a thread that holds only padding (-inf) is shifted by 0: -inf - -inf is NaN
    sh_t = em.tmp(f"tl.where({m_t} > float('-inf'), {m_t}, 0.0)", "shift_t")
    p = em.tmp(exp_below(gt, f"{sh_t}[:, None, :, None]"), "p")
    return ThreadExps(m_t, sh_t, p, f"tl.sum(tl.sum({p}, axis=3), axis=1)", int(gl != gv))


def rescale_thread_exps(rg: RowGen, em: Emitter, r: Node, s: Node, t: ThreadExps) -> None:
    """exp(g - max), where the code after uses it (softmax's output), as each thread's exps
    `t` rescaled by one exp, once the row's max r and sum s are bound (`em.reduced`):
    memoized at the row's coordinates, with softmax's exp / sum as one multiply an element
    (the thread's scale and 1 / sum folded)."""
    g = rg.g
    e = s.args[0]
    users = [n for n in g.live() if e in n.args and n is not s]
    divs = [n for n in users if n.op == "pw" and n.attrs["fn"] == "div" and
            n.args[0] is e and n.args[1] is s]
    if not users and e not in g.outputs:
        return
    m_row = em.reduced[r.id]  # [ROWS, 1]
    sh_row = em.tmp(f"tl.where({m_row} > float('-inf'), {m_row}, 0.0)", "shift")
    # m_t <= the row's max, so the scale is at most 1; a padding-only thread's is 0, which
    # keeps exp(g - max) 0 in every masked lane
    scale = em.tmp(f"tl.where({t.m_t} > float('-inf'), {exp_below(t.shift_t, sh_row)}, 0.0)",
                   "scale")
    full = rg.full
    if divs:
        inv = em.tmp(em.fn("div").format("1.0", em.reduced[s.id]), "inv")
        dv = em.tmp(f"tl.reshape({t.p} * ({scale} * {inv})[:, None, :, None], [ROWS, BLOCK_N])")
        for d in divs:
            em.memo[(d.id, full, None)] = dv
    if len(divs) < len(users) or e in g.outputs:
        ev = em.tmp(f"tl.reshape({t.p} * {scale}[:, None, :, None], [ROWS, BLOCK_N])", "e")
        em.memo[(e.id, full, None)] = ev
        em.masked[ev] = 0.0


def _trial(em: Emitter, fills: dict[int, float]) -> Emitter:
    em.fills = fills
    em.args = copy.deepcopy(em.args)  # a trial emission registers no kernel arguments
    return em


def choose_fills(rg: RowGen) -> dict[int, float]:
    """What full-row loads of each float input put in masked lanes: the fills (0, or the
    identity of a max or min in the plan) that leave the fewest selects in the single pass,
    0 everywhere on a tie. Loading a max's input with -inf, as Liger's softmax does, drops
    both of softmax's selects: 368 -> 336 SASS instructions (bench/NOTES.md item 18)."""
    g, plan = rg.g, rg.plan
    kinds = {r.attrs["kind"] for r in plan.main}
    options = [0.0] + [IDENTITY_VALUE[k] for k in ("max", "min") if k in kinds]
    inputs = [n.attrs["index"] for n in g.nodes if n.op == "input" and value_class(n.dtype) == "f"]
    if len(options) == 1 or not inputs:
        return {}
    best: tuple[int, dict[int, float]] | None = None
    for choice in itertools.product(options, repeat=len(inputs)):
        fills = {k: f for k, f in zip(inputs, choice, strict=True) if f != 0.0}
        n = reduce_single(rg, _trial(rg.emitter(), fills))
        if best is None or n < best[0]:
            best = (n, fills)
    return best[1]

