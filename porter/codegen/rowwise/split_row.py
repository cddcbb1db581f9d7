"""The split-row kernels: a row too long for one program, in a grid with too few rows to fill
the device (layernorm over (64, 256, 256): 16 rows of 4,194,304 elements, 16 programs for 132
SMs), is split into chunks of `chunk_cols` columns, one program each, in two launches:

1. partials: each program reduces its chunk to a few fp32 values per reduction in a small
   workspace, [row, chunk, value]: a sum, max or min as itself; an online softmax's max and
   sum of exp(g - max); the robust 2-norm's max |x| and sum of (|x| / max)^2; layernorm's
   mean and sum of squared deviations (M2) of the chunk, from sums shifted by the chunk's
   first element (an exact second loop over the chunk where that shift sits far out).
2. apply: each program reads its row's partials, combines them (a rescaled sum of exps, Chan's
   formula for the mean and M2), then stores its chunk's full-row outputs (re-reading the
   chunk); the row's chunk 0 stores the per-row outputs.

No program waits on another (programs are not guaranteed to be resident together): the launch
boundary orders the phases. The apply grid runs in the reverse order of the partials grid, so
that the chunks read last, still in L2, are read again first; the launcher may also run the
two launches per group of rows (GROUP_ROWS) so that a group's chunks stay in L2 between them.

The family is offered where every reduction of the row combines from its chunks' partials:
`why_not` names what does not (a fold into a scalar, a reduction over another reduction).

The split_coop kernel (`coop.py`) stores the same workspace records (`partials_of`, `slot`) and
combines them the same way (`combine`), from a chunk of one block that it keeps in registers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from dataclasses import replace

from porter.codegen.emit import Emitter
from porter.codegen.ir import Node
from porter.codegen.rowwise.analysis import IDENTITY
from porter.codegen.rowwise.analysis import REDUCE
from porter.codegen.rowwise.analysis import full_coords
from porter.codegen.rowwise.looped import close_loop
from porter.codegen.rowwise.looped import exp_below
from porter.codegen.rowwise.looped import looped_reduce
from porter.codegen.rowwise.looped import online_max_sum
from porter.codegen.rowwise.looped import open_loop
from porter.codegen.rowwise.looped import robust_norm
from porter.codegen.rowwise.rowgen import RowGen
from porter.codegen.rowwise.rowgen import store_outputs

# The program's chunk: columns lo .. hi - 1 (bound by the template's skeleton).
CHUNK = ("lo", "hi")


@dataclass(frozen=True)
class Partial:
    """What a chunk leaves in the workspace for one reduction (or a pair reduced together).

    kind: "sum" | "max" | "min" (one value), "online" (max, sum of exp(g - max)), "ssq"
        (max |x|, sum of (|x| / max)^2) or "moments" (mean, M2);
    nodes: the reductions whose row values the combine binds (first, second);
    slot: the first of its values in a (row, chunk)'s record.
    """

    kind: str
    nodes: tuple[Node, ...]
    slot: int

    @property
    def width(self) -> int:
        return 1 if self.kind in REDUCE else 2


@dataclass
class SplitBodies:
    """The two kernels' bodies and the workspace record they share."""

    partials: list[str]
    apply: list[str]
    record: int  # fp32 values per (row, chunk) in the workspace


def why_not(rg: RowGen) -> str | None:
    """Why the split-row family does not fit this op (None: it does)."""
    plan = rg.plan
    if not plan.main:
        return "no reduction along the row to split"
    if plan.post:
        return ("a fold of per-row values into a scalar: the fold reads words the main grid "
                "stamps, which the split kernels do not write")
    if plan.dim != len(plan.space) - 1:
        return "the reduced dim is not the innermost: a chunk of a row would be strided"
    arg = next((r for r in plan.main if r.attrs["kind"] in ("argmax", "argmin")), None)
    if arg is not None:
        return (f"{arg.attrs['kind']} returns an index, which the fp32 workspace of partials "
                "does not carry")
    ids = {r.id for r in plan.main}
    partner = {s.id: m for m, s in (*rg.pairs.items(), *rg.ssq.items(), *rg.variance.items())}
    for r in plan.main:
        deps = _reductions_under(r.args[0], ids) - {partner.get(r.id)}
        if deps:
            return (f"the reduction from {r.origin} reduces a value of another reduction of the "
                    "row, which its chunks cannot combine without one more pass")
    return None


def _reductions_under(node: object, ids: set[int]) -> set[int]:
    """The row reductions (ids among `ids`) that `node`'s value depends on."""
    found: set[int] = set()
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if not isinstance(n, Node) or n.id in seen:
            continue
        seen.add(n.id)
        if n.id in ids:
            found.add(n.id)
            continue
        stack.extend(n.args)
    return found


def split_row(rg: RowGen) -> SplitBodies | None:
    """Both kernels' bodies, or None where `why_not` says the family does not fit.

    The bodies are emitted on a copy of the kernel arguments, and must need none the other
    kernels do not take (every kernel of the module shares one parameter list)."""
    if why_not(rg) is not None:
        return None
    own = replace(rg, args=copy.deepcopy(rg.args))
    parts = partials_of(own)
    record = sum(p.width for p in parts)
    bodies = SplitBodies(_partials_body(own, parts, record).lines,
                         _apply_body(own, parts, record).lines, record)
    if own.args.params != rg.args.params:
        raise AssertionError("split_row: the split kernels would take arguments "
                             f"{own.args.params[len(rg.args.params):]} the others do not")
    return bodies


def partials_of(rg: RowGen) -> list[Partial]:
    """The row's reductions as workspace records, in plan order; pairs take one record."""
    seconds = rg.paired_sums | rg.variance_second | {s.id for s in rg.ssq.values()}
    out: list[Partial] = []
    slot = 0
    for r in rg.plan.main:
        if r.id in seconds:
            continue
        if r.id in rg.ssq:
            p = Partial("ssq", (r, rg.ssq[r.id]), slot)
        elif r.id in rg.pairs:
            p = Partial("online", (r, rg.pairs[r.id]), slot)
        elif r.id in rg.variance:
            p = Partial("moments", (r, rg.variance[r.id]), slot)
        else:
            p = Partial(r.attrs["kind"], (r,), slot)
        out.append(p)
        slot += p.width
    return out


def slot(record: int, j: int, chunk: str) -> str:
    """The workspace address of value j of the records of `rows` and chunk(s) `chunk`."""
    return f"ws_ptr + (rows * n_chunks + {chunk}) * {record} + {j}"


# -- phase 1: each chunk's partials ---------------------------------------------------------
def _partials_body(rg: RowGen, parts: list[Partial], record: int) -> Emitter:
    em = rg.emitter()
    for p in parts:
        r = p.nodes[0]
        if p.kind == "ssq":
            robust_norm(rg, em, r, p.nodes[1], CHUNK)
            values = [em.reduced[r.id], em.reduced[p.nodes[1].id]]
        elif p.kind == "online":
            online_max_sum(rg, em, r, p.nodes[1], CHUNK)
            values = [em.reduced[r.id], em.reduced[p.nodes[1].id]]
        elif p.kind == "moments":
            values = list(_chunk_moments(rg, em, r))
        else:
            looped_reduce(rg, em, r, CHUNK)
            values = [em.reduced[r.id]]
        for j, v in enumerate(values):
            em.emit(f"tl.store({slot(record, p.slot + j, 'chunk')}, {v}, mask=row_mask)")
    return em


def _chunk_moments(rg: RowGen, em: Emitter, r: Node) -> tuple[str, str]:
    """The chunk's mean and M2 (sum of squared deviations from it) of r's argument.

    One pass of the sums of d = x - k and d^2, k the chunk's first element: M2 = sum(d^2) -
    sum(d)^2 / n, whose cancellation is about eps * (mean - k)^2 / variance (as the one-block
    kernels' VAR1 form, `variance.py`); a chunk where k sits more than 4 spreads from the mean
    takes an exact second loop (re-reading the chunk, from L1/L2)."""
    x = r.args[0]
    # column `lo` as a column coordinate (its stride the other kernels' constexpr one) under
    # the row's mask: the chunk is never empty
    em.full_mask = "row_mask"
    k = em.tmp(f"({em.eval(x, full_coords(rg.plan, rg.rc, 'lo'))}).to(tl.float32)", "k")
    em.full_mask = "mask"
    em.emit("acc1 = tl.zeros([ROWS, BLOCK_N], tl.float32)")
    em.emit("acc2 = tl.zeros([ROWS, BLOCK_N], tl.float32)")
    open_loop(em, CHUNK)
    d = em.tmp(f"tl.where(mask, ({em.eval(x, rg.full)}).to(tl.float32) - {k}, 0.0)", "d")
    em.emit(f"acc1 = acc1 + {d}")
    em.emit(f"acc2 = acc2 + {d} * {d}")
    close_loop(em)
    s1 = em.tmp("tl.sum(acc1, axis=1)[:, None]", "s1")
    s2 = em.tmp("tl.sum(acc2, axis=1)[:, None]", "s2")
    n = em.tmp("(hi - lo).to(tl.float32)", "n_chunk")
    mean = em.tmp(f"{k} + {s1} / {n}", "mean_c")
    m2 = em.tmp(f"tl.maximum({s2} - {s1} * {s1} / {n}, 0.0)", "m2_c")
    em.emit(f"if tl.max(({s1} * {s1} / {n} > 16.0 * {m2}).to(tl.int32)) > 0:")
    em.indent += 1
    em.emit("acc = tl.zeros([ROWS, BLOCK_N], tl.float32)")
    open_loop(em, CHUNK)
    xv = em.tmp(f"({em.eval(x, rg.full)}).to(tl.float32) - {mean}", "dev")
    em.emit(f"acc = acc + tl.where(mask, {xv} * {xv}, 0.0)")
    close_loop(em)
    em.emit(f"{m2} = tl.sum(acc, axis=1)[:, None]")
    em.indent -= 1
    return mean, m2


# -- phase 2: combine the partials, then the chunk's outputs --------------------------------
def _apply_body(rg: RowGen, parts: list[Partial], record: int) -> Emitter:
    em = rg.emitter()
    em.emit("parts = tl.arange(0, SPLIT)[None, :]  # the row's chunks")
    em.emit("part_mask = row_mask & (parts < n_chunks)")
    for p in parts:
        combine(rg, em, p, record)
    if "full" in rg.plan.out_kind:
        open_loop(em, CHUNK)
        store_outputs(rg, em, ("full",))
        close_loop(em)
    if "row" in rg.plan.out_kind:
        # one program stores the row's values (a tensor compare: the interpreter's scalar
        # one is no mask)
        em.emit("row_mask = row_mask & (rows * 0 + chunk == 0)")
        store_outputs(rg, em, ("row",))
    return em


def _load(em: Emitter, record: int, j: int, other: str, prefix: str, cache: str) -> str:
    modifier = f", cache_modifier=\"{cache}\"" if cache else ""
    return em.tmp(f"tl.load({slot(record, j, 'parts')}, mask=part_mask, other={other}"
                  f"{modifier})", prefix)


def combine(rg: RowGen, em: Emitter, p: Partial, record: int, cache: str = "",
            chunk_cols: str = "chunk_cols") -> None:
    """Bind the row values of p's reductions from the row's chunk records (`parts`, under
    `part_mask`): workspace loads with the cache modifier `cache` ("" for none); `chunk_cols`,
    the code for a chunk's columns (each but the last)."""
    r = p.nodes[0]
    if p.kind in REDUCE:
        v = _load(em, record, p.slot, IDENTITY[p.kind], "p", cache)
        em.reduced[r.id] = em.tmp(f"{REDUCE[p.kind]}({v}, axis=1)[:, None]", "red")
    elif p.kind == "online":
        # each chunk's sum of exps is under its own max: rescaled to the row's by one exp2
        pm = _load(em, record, p.slot, "float('-inf')", "pm", cache)
        ps = _load(em, record, p.slot + 1, "0.0", "ps", cache)
        m = em.tmp(f"tl.max({pm}, axis=1)[:, None]", "red")
        # a row of -inf only is shifted by 0: -inf - -inf is NaN
        shift = em.tmp(f"tl.where({m} > float('-inf'), {m}, 0.0)", "shift")
        em.reduced[r.id] = m
        em.reduced[p.nodes[1].id] = em.tmp(
            f"tl.sum({ps} * {exp_below(pm, shift)}, axis=1)[:, None]", "red")
    elif p.kind == "ssq":
        pm = _load(em, record, p.slot, "0.0", "pm", cache)
        ps = _load(em, record, p.slot + 1, "0.0", "ps", cache)
        m = em.tmp(f"tl.max({pm}, axis=1)[:, None]", "red")
        ratio = em.tmp(f"tl.where({m} > 0, {pm} / {m}, 0.0)", "ratio")
        em.reduced[r.id] = m
        em.reduced[p.nodes[1].id] = em.tmp(f"tl.sum({ps} * {ratio} * {ratio}, axis=1)[:, None]",
                                           "red")
    else:
        _combine_moments(rg, em, p, record, cache, chunk_cols)


def _combine_moments(rg: RowGen, em: Emitter, p: Partial, record: int, cache: str,
                     chunk_cols: str) -> None:
    """Chan's combination of the chunks' (count, mean, M2): the row's mean, as chunk 0's mean
    plus the count-weighted mean of the others' offsets from it (a constant row's mean is then
    exact, so x - mean is 0), and M2 = sum(M2_c + n_c (mean_c - mean)^2).

    The row values are scalars (the split kernels take one row a program, ROWS = 1, which the
    kernel asserts): as [ROWS, 1] tensors, Triton 3.6 gave the chain reduce -> broadcast ->
    reduce -> the chunk's x - mean the [1, 1] tensors' layout (32 x 4 threads down the one
    row), loaded the row's SPLIT records again in it, every thread all of them, and broadcast
    the mean over the chunk in it. sm_90 cross-compiles with Triton 3.6 (instance norm over
    rows of 512 x 512 fp32): split_coop at 4096 x 4 warps (SPLIT 64) 243 registers and 86
    loads a thread, 2 programs an SM at most; as scalars 87 and 16. split_row's apply kernel
    (2048 x 16 warps) 90 -> 32 registers. Triton 3.9 gave 78 and 32 either way."""
    r, second = p.nodes
    em.emit("tl.static_assert(ROWS == 1, 'the moments combine reduces one row to scalars')")
    pm = _load(em, record, p.slot, "0.0", "pm", cache)
    pq = _load(em, record, p.slot + 1, "0.0", "pq", cache)
    n = em.tmp(f"tl.where(part_mask, tl.minimum({chunk_cols}, n_cols - parts * {chunk_cols}), 0)"
               ".to(tl.float32)", "n_part")
    m0 = em.tmp(f"tl.sum(tl.sum(tl.where(parts == 0, {pm}, 0.0), axis=1), axis=0)", "m0_")
    offset = em.tmp(f"tl.sum(tl.sum({n} * ({pm} - {m0}), axis=1), axis=0)", "off")
    # IEEE division, as the traced mean's (emit.TRITON_FN): `/` is approximate on NVIDIA
    mean = em.tmp(f"{m0} + tl.math.div_rn({offset}, tl.cast(n_cols, tl.float32))", "mean")
    dev = em.tmp(f"{pm} - {mean}", "dev")
    em.reduced[second.id] = em.tmp(
        f"tl.sum(tl.sum(tl.where(part_mask, {pq} + {n} * {dev} * {dev}, 0.0), axis=1), axis=0)",
        "red")
    em.reduced[r.id] = em.tmp(f"{mean} * n_cols", "red")
    mean_node = second.args[0].args[0].args[1]
    key = (mean_node.id, rg.coords_for(mean_node), None)
    em.memo[key] = em.kept[key] = mean  # the loops after use this mean, not sum / n again
