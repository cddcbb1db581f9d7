"""The split_coop kernel's body (`templates/_triton_rowwise_long.py.j2`): a long row split over
co-resident programs, each holding one chunk of one BLOCK_N block in registers, as the one-block
kernels hold a whole row; the row's reductions combine across its programs through the split
row's workspace (`split_row`: the same records and the same combine).

Per row, two parts, which the template separates by its barrier across the row's programs:

1. `partials`: the chunk's loads (each once), its partial reductions, reduced as the one-block
   kernels reduce a block (`reduce_blocks`; the online softmax's per-thread (max, sum) pairs,
   `one_block.thread_exps`; the robust 2-norm's max and scaled sum of squares; layernorm's mean
   and M2, from sums shifted by the chunk's first element), and their stores to the workspace;
2. `apply`: the row's records combined (`split_row.combine`, its loads past L1: the other
   programs stored them, and this SM's L1 is not coherent with theirs), then the chunk's
   outputs from the values still in registers: no second load of the row's inputs (per-column
   weights load here); chunk 0 stores the per-row outputs.

On an H100 (bench/NOTES.md item 58) this form ran softmax at 78-91% of copy bandwidth in fp32
(4096 x 50,257-393,216) and 80% in bf16 (151,936), where the same split re-reading its chunk
after the barrier reached 65-72% (item 52) and the looped kernel 63%.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from dataclasses import replace

from porter.codegen.emit import Emitter
from porter.codegen.ir import Node
from porter.codegen.rowwise.analysis import full_coords
from porter.codegen.rowwise.one_block import ThreadExps
from porter.codegen.rowwise.one_block import rescale_thread_exps
from porter.codegen.rowwise.one_block import thread_exps
from porter.codegen.rowwise.rowgen import RowGen
from porter.codegen.rowwise.rowgen import lanes_as_identity
from porter.codegen.rowwise.rowgen import reduce_blocks
from porter.codegen.rowwise.rowgen import store_outputs
from porter.codegen.rowwise.split_row import combine
from porter.codegen.rowwise.split_row import partials_of
from porter.codegen.rowwise.split_row import slot
from porter.codegen.rowwise.split_row import why_not


@dataclass
class CoopBodies:
    """The split_coop kernel's per-row body, before and after its barrier."""

    partials: list[str]
    apply: list[str]
    record: int  # fp32 values per (row, chunk) in the workspace, as the split row's


def coop(rg: RowGen) -> CoopBodies | None:
    """The body, or None where the op does not fit: where the split row does not
    (`split_row.why_not`) or the op writes no full row (a reduction-only op is read once by
    the looped kernel already).

    Emitted on a copy of the kernel arguments, and must need none the other kernels do not
    take (every kernel of the module shares one parameter list)."""
    if why_not(rg) is not None or "full" not in rg.plan.out_kind:
        return None
    own = replace(rg, args=copy.deepcopy(rg.args))
    parts = partials_of(own)
    record = sum(p.width for p in parts)
    em = own.emitter()
    rescale: list[tuple[Node, Node, ThreadExps]] = []
    for p in parts:
        r = p.nodes[0]
        if p.kind == "online":
            t = thread_exps(own, em, r)
            m_c, s_c = em.tmps(f"tl.reduce(({t.m_t}, {t.sums}), 1, _max_sum_exp)", "m_c", "s_c")
            values = [f"{m_c}[:, None]", f"{s_c}[:, None]"]
            rescale.append((r, p.nodes[1], t))
        elif p.kind == "ssq":
            values = _chunk_ssq(own, em, r)
        elif p.kind == "moments":
            values = _chunk_moments(own, em, r)
        else:
            reduce_blocks(own, em, r, ((own.full, "mask"),))
            values = [em.reduced[r.id]]
        for j, v in enumerate(values):
            em.emit(f"tl.store({slot(record, p.slot + j, 'chunk')}, {v}, mask=row_mask)")
    barrier = len(em.lines)
    em.emit("parts = tl.arange(0, SPLIT)[None, :]  # the row's chunks")
    em.emit("part_mask = row_mask & (parts < n_chunks)")
    for p in parts:
        combine(own, em, p, record, cache=".cg", chunk_cols="BLOCK_N")
    for r, s, t in rescale:
        rescale_thread_exps(own, em, r, s, t)
    store_outputs(own, em, ("full",))
    if "row" in own.plan.out_kind:
        # one program stores the row's values (a tensor compare: the interpreter's scalar
        # one is no mask)
        em.emit("row_mask = row_mask & (rows * 0 + chunk == 0)")
        store_outputs(own, em, ("row",))
    if own.args.params != rg.args.params:
        raise AssertionError("coop: the split_coop kernel would take arguments "
                             f"{own.args.params[len(rg.args.params):]} the others do not")
    return CoopBodies(em.lines[:barrier], em.lines[barrier:], record)


def _chunk_ssq(rg: RowGen, em: Emitter, r: Node) -> list[str]:
    """The chunk's max |x| (r's argument) and sum of (|x| / max)^2."""
    a = em.tmp(lanes_as_identity(em, em.eval(r.args[0], rg.full), "sum"), "a")
    m = em.tmp(f"tl.max({a}, axis=1)[:, None]", "m_c")
    q = em.tmp(f"tl.where({m} > 0, {a} / {m}, 0.0)", "q")
    return [m, em.tmp(f"tl.sum({q} * {q}, axis=1)[:, None]", "s_c")]


def _chunk_moments(rg: RowGen, em: Emitter, r: Node) -> list[str]:
    """The chunk's mean and M2 (sum of squared deviations from it) of r's argument, from one
    reduction of the sums of d = x - k and d^2, k the chunk's first element (the one-block
    kernels' VAR1 form, `variance.py`: a constant chunk's mean is k, exactly); a chunk where k
    sits more than 4 spreads from the mean takes the exact M2 from the values in registers."""
    x = r.args[0]
    # column `lo` as a column coordinate under the row's mask: the chunk is never empty
    em.full_mask = "row_mask"
    k = em.tmp(f"({em.eval(x, full_coords(rg.plan, rg.rc, 'lo'))}).to(tl.float32)", "k")
    em.full_mask = "mask"
    xv = em.tmp(f"({em.eval(x, rg.full)}).to(tl.float32)", "x")
    d = em.tmp(f"tl.where(mask, {xv} - {k}, 0.0)", "d")
    s1, s2 = em.tmps(f"tl.reduce(({d}, {d} * {d}), 1, _add_pairs)", "s1_", "s2_")
    s1, s2 = em.tmp(f"{s1}[:, None]", "s1"), em.tmp(f"{s2}[:, None]", "s2")
    n = em.tmp("tl.minimum(n_cols - lo, BLOCK_N).to(tl.float32)", "n_chunk")
    mean = em.tmp(f"{k} + {s1} / {n}", "mean_c")
    m2 = em.tmp(f"tl.maximum({s2} - {s1} * {s1} / {n}, 0.0)", "m2_c")
    em.emit(f"if tl.max(({s1} * {s1} / {n} > 16.0 * {m2}).to(tl.int32)) > 0:")
    dev = f"tl.where(mask, {xv} - {mean}, 0.0)"
    em.emit(f"    {m2} = tl.sum({dev} * {dev}, axis=1)[:, None]")
    return [mean, m2]
