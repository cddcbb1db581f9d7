"""argmax / argmin along the row: reductions that return an index (KernelBench 51, 52).

Each keeps a (best value, its index) pair, as torch does:
- the FIRST index of the best value (a strict comparison as the loop walks the row; lower index
  on a tie where two partial results meet);
- NaN beats every number (torch returns the index of the first NaN);
- a row of -inf (argmax) or +inf (argmin) only gives index 0.

The pairs combine with the template's `_argmax_pairs` / `_argmin_pairs` (a two-value
tl.reduce). Values compare in fp32 (exact for every float input); indices are int32 inside
the kernel (the reduced dim is below 2**31) and stored as the output's int64.

The one-block kernels reduce each block's (value, index) pairs; the looped kernel, and so the
column kernel, keeps one running pair per lane of the [ROWS, BLOCK_N] tile, updated in place
(each lane sees its columns in increasing order, so a strict comparison keeps the first), and
combines the lanes once after the loop.
"""

from __future__ import annotations

from porter.codegen.emit import Coord
from porter.codegen.emit import Emitter
from porter.codegen.ir import Node
from porter.codegen.rowwise.analysis import IDENTITY

ARG_KINDS = ("argmax", "argmin")
# the template's combine of two (value, index) pairs, per kind
COMBINE_PAIRS = {"argmax": "_argmax_pairs", "argmin": "_argmin_pairs"}
# a value that replaces the running one in a lane, in the looped kernel
BETTER = {"argmax": ">", "argmin": "<"}


def is_arg(r: Node) -> bool:
    return r.op == "reduce" and r.attrs.get("kind") in ARG_KINDS


def block_pairs(em: Emitter, r: Node, v: str, cols: Coord) -> tuple[str, str]:
    """(best value, its index) of each row of one block, as [ROWS] tensors; `v`: r's argument
    over the block, its masked lanes already holding the identity; `cols`: the block's column
    coordinate (a [1, BLOCK] range)."""
    vb, ib = em.tmps(f"tl.broadcast(({v}).to(tl.float32), ({cols.expr}).to(tl.int32))",
                     "av", "ai")
    return tuple(em.tmps(f"tl.reduce(({vb}, {ib}), 1, {COMBINE_PAIRS[r.attrs['kind']]})",
                         "bv", "bi"))


def combine_blocks(em: Emitter, r: Node, parts: list[tuple[str, str]]) -> str:
    """The row's index from its blocks' (value, index) pairs, as a [ROWS, 1] tensor."""
    best_v, best_i = parts[0]
    for v, i in parts[1:]:
        best_v, best_i = em.tmps(f"{COMBINE_PAIRS[r.attrs['kind']]}({best_v}, {best_i}, {v}, {i})",
                                 "bv", "bi")
    return em.tmp(f"{best_i}[:, None]", "red")


def looped_init(em: Emitter, r: Node) -> None:
    """The running pair per lane: the identity at index 0 (a lane that sees only the identity
    keeps index 0, which is the answer when the whole row is the identity)."""
    em.emit(f"acc = tl.full([ROWS, BLOCK_N], {IDENTITY[r.attrs['kind']]}, tl.float32)")
    em.emit("acc_i = tl.zeros([ROWS, BLOCK_N], tl.int32)")


def looped_step(em: Emitter, r: Node, v: str) -> None:
    """One chunk into the running pairs: a better value, or the lane's first NaN, replaces."""
    em.emit(f"a = ({v}).to(tl.float32)")
    em.emit(f"take = (a {BETTER[r.attrs['kind']]} acc) | ((a != a) & (acc == acc))")
    em.emit("acc_i = tl.where(take, cols.to(tl.int32), acc_i)")
    em.emit("acc = tl.where(take, a, acc)")


def looped_result(em: Emitter, r: Node) -> str:
    """The row's index from the lanes' running pairs, as a [ROWS, 1] tensor."""
    _, best_i = em.tmps(f"tl.reduce((acc, acc_i), 1, {COMBINE_PAIRS[r.attrs['kind']]})",
                        "bv", "bi")
    return em.tmp(f"{best_i}[:, None]", "red")
