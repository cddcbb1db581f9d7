"""The state every row-wise emitter shares (`RowGen`) and the pieces every kernel body uses:
its loads' identity fills, the block reductions, and the stores of outputs and fold words."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from porter.codegen.emit import Coord
from porter.codegen.emit import Emitter
from porter.codegen.ir import Graph
from porter.codegen.ir import Node
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.plan import RowPlan
from porter.codegen.plan import unflattens
from porter.codegen.rowwise import argreduce
from porter.codegen.rowwise.analysis import COMBINE
from porter.codegen.rowwise.analysis import IDENTITY
from porter.codegen.rowwise.analysis import IDENTITY_VALUE
from porter.codegen.rowwise.analysis import REDUCE
from porter.codegen.rowwise.analysis import coords_for
from porter.codegen.rowwise.analysis import full_coords
from porter.codegen.rowwise.analysis import online_pairs
from porter.codegen.rowwise.analysis import row_coords
from porter.codegen.rowwise.analysis import ssq_pairs
from porter.codegen.rowwise.analysis import variance_pairs

# A row split into blocks for the one-block kernels: (the block's coordinates, its mask) each.
Blocks = tuple[tuple[tuple[Coord, ...], str], ...]


@dataclass
class RowGen:
    """One op's row-wise generation: the graph, its plan and kernel arguments, the row's
    coordinates and the reductions that pair up. Each kernel body gets its own `Emitter`
    (`emitter()`); this is what they share.

    Attributes:
        coord_lines: the statements binding each non-reduced dim's coordinate from `rows`.
        rc: those coordinates, one per non-reduced dim.
        full: the coordinates of a whole-row tile (`rc` with `cols` at the reduced dim).
        outs: each output with its kind ("full", "row" or "scalar").
        pairs: online softmax: the max's id -> the sum of exp(g - max).
        variance: layernorm: the sum(x) id -> sum((x - mean)^2).
        ssq: the robust 2-norm: the max|x| id -> the sum of (|x| / max)^2.
        fills: what full-row loads of each float input put in masked lanes (`choose_fills`).
    """

    g: Graph
    plan: RowPlan
    args: KernelArgs
    coord_lines: list[str]
    rc: tuple[Coord, ...]
    full: tuple[Coord, ...]
    outs: list[tuple[Node, str]]
    pairs: dict[int, Node]
    variance: dict[int, Node]
    ssq: dict[int, Node]
    fills: dict[int, float] = field(default_factory=dict)

    @classmethod
    def of(cls, g: Graph, plan: RowPlan, args: KernelArgs) -> RowGen:
        """Read the plan (registers the row coordinates' sizes in `args`)."""
        coord_lines, rc = row_coords(plan, args)
        return cls(g, plan, args, coord_lines, rc, full_coords(plan, rc),
                   list(zip(g.outputs, plan.out_kind, strict=True)), online_pairs(plan),
                   variance_pairs(plan), ssq_pairs(plan))

    @property
    def paired_sums(self) -> set[int]:
        """The online-softmax sums, reduced with their max."""
        return {s.id for s in self.pairs.values()}

    @property
    def variance_second(self) -> set[int]:
        """The variances, reduced with their mean's sum."""
        return {s.id for s in self.variance.values()}

    def emitter(self) -> Emitter:
        """A fresh emitter for one kernel body, at the row's coordinates."""
        em = Emitter(self.g, self.args)
        em.row_coords = self.rc
        em.row_sizes = self.plan.row_shape
        em.reduce_dim = self.plan.dim
        em.fills = dict(self.fills)
        return em

    def coords_for(self, node: Node) -> tuple[Coord, ...]:
        """Row coordinates for a row-level node."""
        return coords_for(self.plan, node, self.rc)


def store_outputs(rg: RowGen, em: Emitter, kinds: tuple[str, ...],
                  full: tuple[Coord, ...] | None = None) -> None:
    """Store each output of one of `kinds`; "full" ones at `full` (default: the whole row)."""
    plan, args = rg.plan, rg.args
    full = rg.full if full is None else full
    for j, (o, kind) in enumerate(rg.outs):
        if kind not in kinds:
            continue
        coords = full if kind == "full" else rg.coords_for(o)
        if kind == "full" and unflattens(o, plan.space):
            # Evaluate the row value at the row's own coordinates (shared with the
            # reductions, so nothing is loaded twice); split them only for the address.
            val = em.eval(o.args[0], coords)
            coords = em.reshape_coords(coords, plan.space, o.shape)
        else:
            val = em.eval(o, coords)
        ptr = args.output_ptr(j)
        shifted = em.row_address(f"outs[{j}]", ptr, coords, o.shape,
                                 lambda d, col, j=j: args.output_stride(j, d, col))
        if shifted is not None and kind == "full":
            store = f"tl.store({shifted}, ({val}).to({ptr}.dtype.element_ty){{}})"
            em.emit("if inner:")
            em.emit("    " + store.format(""))
            em.emit("else:")
            em.emit("    " + store.format(f", mask={em.full_mask}"))
            continue
        terms = [f"({c.expr} * {args.output_stride(j, d, c.col or c.unit)})"
                 for d, (c, s) in enumerate(zip(coords, o.shape, strict=True))
                 if s != 1 and c.expr != "0"]
        addr = " + ".join([ptr] + terms)
        flat = em.flat_terms(coords, o.shape, lambda d, c, j=j: args.output_stride(
            j, d, c.col or c.unit))
        if flat is not None:
            addr = f"({' + '.join([ptr] + flat)}) if {args.output_flat(j)} else ({addr})"
        mask = em.full_mask if kind == "full" else "row_mask"
        if kind == "full" and not any(c.col for c in coords if c.expr != "0"):
            mask = "row_mask"
        if val[0].isdigit() or val.startswith(("float", "-")):
            val = f"tl.full([ROWS, 1], {val}, tl.float32)"
        em.emit(f"tl.store({addr}, ({val}).to({ptr}.dtype.element_ty), mask={mask})")


def store_post_inputs(rg: RowGen, em: Emitter) -> None:
    """The fold's inputs: one 64-bit word per row and folded value, this call's stamp in the
    high half and the value's fp32 bits in the low half, in one store, so that the fold can
    wait on the word."""
    if not rg.plan.post:
        return
    words = rg.args.add("words_ptr", "words", "ptr:words")
    stamp = rg.args.add("stamp", "stamp", "stamp")
    for i, p in enumerate(rg.plan.post):
        x = p.args[0]
        val = em.eval(x, rg.coords_for(x))
        em.emit(f"tl.store({words} + {i} * n_rows + rows, {stamp} | ({val}).to(tl.float32)"
                ".to(tl.uint32, bitcast=True).to(tl.int64), mask=row_mask)")


def lanes_as_identity(em: Emitter, v: str, kind: str) -> str:
    """`v` with its masked lanes set to the identity of a `kind` reduction: `v` itself where
    they already hold it (its load's fill), else a select."""
    if em.masked_value(v) == IDENTITY_VALUE[kind]:
        return v
    return f"tl.where(mask, {v}, {IDENTITY[kind]})"


def masked_lanes_hold_identity(em: Emitter, r: Node, v: str, pairs: dict[int, Node],
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


def reduce_blocks(rg: RowGen, em: Emitter, r: Node, blocks: Blocks) -> int:
    """r reduced over each block of the row, the partial results combined; returns how many
    blocks needed a select of their masked lanes."""
    kind = r.attrs["kind"]
    parts, pairs, selects = [], [], 0
    for block_coords, block_mask in blocks:
        em.full_mask = block_mask
        v = em.eval(r.args[0], block_coords)
        if not masked_lanes_hold_identity(em, r, v, rg.pairs, block_coords):
            selects += 1
            v = f"tl.where({block_mask}, {v}, {IDENTITY[kind]})"
        if argreduce.is_arg(r):
            pairs.append(argreduce.block_pairs(em, r, v, block_coords[rg.plan.dim]))
            continue
        v = f"({v}).to(tl.float32)" if kind == "sum" else v
        parts.append(f"{REDUCE[kind]}({v}, axis=1)[:, None]")
    em.full_mask = blocks[0][1]
    if pairs:
        em.reduced[r.id] = argreduce.combine_blocks(em, r, pairs)
        return selects
    combined = parts[0] if len(parts) == 1 else COMBINE[kind].format(a=parts[0], b=parts[1])
    em.reduced[r.id] = em.tmp(combined, "red")
    return selects
