"""Layernorm's mean and variance in the one-block kernels (single pass, persistent, two
blocks): from two reductions, or under the constexpr VAR1 from one reduction of shifted sums.

The VAR1 form (a search knob): the sums of d = x - k and d^2, k the row's first element, then
sum((x - mean)^2) = sum(d^2) - sum(d)^2 / n; tiles where k sits more than 4 spreads from the
mean take an exact second round. The shift keeps the cancellation small: the variance's
relative error is about eps * (mean - k)^2 / variance (E[x^2] - E[x]^2, no shift, has no such
bound). A knob, not the default form: on the H200 it took layernorm 4096x32768 from 164 to
149 us but made widths 4096-5120 3-15% slower (bench/NOTES.md items 36-37). Welford/Chan
triples (stable without a shift) cost 27% more instructions and lost the gain.
"""

from __future__ import annotations

from porter.codegen.emit import Emitter
from porter.codegen.ir import Node
from porter.codegen.rowwise.rowgen import Blocks
from porter.codegen.rowwise.rowgen import RowGen
from porter.codegen.rowwise.rowgen import reduce_blocks


def shift_point(rg: RowGen, em: Emitter, x: Node) -> str:
    """k, the row's first element: the shift of the VAR1 sums."""
    # an empty row has no column 0 (a tensor compare: the interpreter's scalar one is no mask)
    row_mask, em.row_mask = em.row_mask, f"({em.row_mask}) & (rows * 0 < n_cols)"
    k = em.tmp(f"({em.eval(x, rg.coords_for(x))}).to(tl.float32)", "k")
    em.row_mask = row_mask
    return k

def shifted_result(rg: RowGen, em: Emitter, r: Node, k: str, t1: str, t2: str
                   ) -> tuple[str, str, str]:
    """From the row's sums t1 of d = x - k and t2 of d^2: r's sum, the mean (memoized for
    the code after) and the variance partner's sum; returns (mean, variance, guard), the
    guard an `if` whose tiles need the exact second round."""
    em.reduced[r.id] = em.tmp(f"{t1} + {k} * n_cols", "red")
    # the mean as k + sum(d) / n: (sum(d) + k * n) / n would round k * n (at a mean of 1e4
    # and n = 700, to 0.5) and lose what the shift kept
    second = rg.variance[r.id]
    mean_node = second.args[0].args[0].args[1]
    mean = em.tmp(f"{k} + {t1} / n_cols", "mean")
    em.memo[(mean_node.id, rg.coords_for(mean_node), None)] = mean
    var = em.tmp(f"tl.maximum({t2} - {t1} * {t1} / n_cols, 0.0)", "red")
    em.reduced[second.id] = var
    # Where k sits far out in its row ((mean - k)^2 > 16 variances: an outlier in column 0)
    # the cancellation costs more than 16 roundings: those tiles take the exact second
    # round; a row drawn from one distribution does so with probability ~6e-5.
    return mean, var, f"if tl.max(({t1} * {t1} / n_cols > 16.0 * {var}).to(tl.int32)) > 0:"

def shifted_sums(rg: RowGen, em: Emitter, r: Node, blocks: Blocks) -> None:
    """r's sum and its variance partner's from one reduction of (x - k, (x - k)^2) per
    block of the row, k the row's first element (the VAR1 form)."""
    x = r.args[0]
    k = shift_point(rg, em, x)
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
    mean, var, guard = shifted_result(rg, em, r, k, t1, t2)
    em.emit(guard)
    parts = [f"tl.sum(tl.where({m}, ({xv} - {mean}) * ({xv} - {mean}), 0.0), axis=1)[:, None]"
             for xv, m in xs]
    em.emit(f"    {var} = {' + '.join(parts)}")


def mean_and_variance(rg: RowGen, em: Emitter, r: Node, blocks: Blocks) -> int:
    """r (a row's sum) and its variance partner: `if VAR1:` from one reduction of shifted
    sums, else in two rounds (the variance's reduction waits for the mean). Both branches
    bind the same names (the two reductions and the mean), which the code after uses."""
    second = rg.variance[r.id]
    mean_node = second.args[0].args[0].args[1]
    mean_key = (mean_node.id, rg.coords_for(mean_node), None)
    for block_coords, block_mask in blocks:  # x's loads before the branch: both use them
        em.full_mask = block_mask
        em.eval(r.args[0], block_coords)
    em.full_mask = blocks[0][1]
    before = dict(em.memo)
    em.emit("if VAR1:")
    em.indent += 1
    shifted_sums(rg, em, r, blocks)
    names = (em.reduced[r.id], em.reduced[second.id], em.memo[mean_key])
    em.indent -= 1
    em.emit("else:")
    em.indent += 1
    em.memo = dict(before)
    selects = reduce_blocks(rg, em, r, blocks) + reduce_blocks(rg, em, second, blocks)
    mean = em.eval(mean_node, rg.coords_for(mean_node))
    for name, value in zip(names, (em.reduced[r.id], em.reduced[second.id], mean),
                           strict=True):
        em.emit(f"{name} = {value}")
    em.indent -= 1
    em.memo = before  # what either branch computed besides the three names stays inside
    em.memo[mean_key] = names[2]
    em.reduced[r.id], em.reduced[second.id] = names[0], names[1]
    return selects
