"""Row-wise kernels (also the tiled form of elementwise ops): the bodies of the single-pass,
two-block, persistent, looped and fold kernels of `templates/triton_rowwise.py.j2`, from a
`RowPlan`.

The template holds each kernel's skeleton (signature, row indices, masks, the persistent row
loop); `build` emits what goes inside, one body per kernel:

- `one_block`: the single pass (the whole row in registers), its persistent form and the
  two-block single pass (head and tail blocks for a row that is not a power of two wide);
- `looped`: a loop over the row's chunks per reduction, for rows longer than on-chip storage
  (also the body of the L2-resident looped kernel, which walks rows in a capped grid);
- `split_row`: a row split into chunks over several programs (partials, then apply), for
  grids with too few rows to fill the device;
- `coop`: the split_coop kernel's body: a row split into one-block chunks over co-resident
  programs, each chunk kept in registers while the row's partials combine (split_row's
  workspace records);
- `columns`: the looped body turned around for a reduced dim that is not the last (a program
  takes consecutive positions of the last dim, contiguous in memory, and walks the reduced dim);
- `post`: the fold of per-row values into scalar outputs (cross-entropy's mean);
- `variance`: layernorm's mean and variance (the VAR1 knob) in the one-block kernels;
- `rowgen`: the state they share (`RowGen`) and the loads' identity fills, block reductions
  and stores;
- `analysis`: what is read off the plan first (row coordinates, paired reductions);
- `hoist`: reordering a body's statements (the HOIST knob, the persistent kernel's preamble).
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field

from porter.codegen.ir import Graph
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.plan import RowPlan
from porter.codegen.rowwise.analysis import COMBINE
from porter.codegen.rowwise.analysis import IDENTITY
from porter.codegen.rowwise.analysis import IDENTITY_VALUE
from porter.codegen.rowwise.analysis import REDUCE
from porter.codegen.rowwise.analysis import coords_for
from porter.codegen.rowwise.analysis import full_coords
from porter.codegen.rowwise.analysis import online_pairs
from porter.codegen.rowwise.analysis import row_coords
from porter.codegen.rowwise.analysis import size_exprs
from porter.codegen.rowwise.analysis import ssq_pairs
from porter.codegen.rowwise.analysis import variance_pairs
from porter.codegen.rowwise.columns import ColumnBody
from porter.codegen.rowwise.columns import columns
from porter.codegen.rowwise.coop import CoopBodies
from porter.codegen.rowwise.coop import coop
from porter.codegen.rowwise.hoist import hoist_reduction_free
from porter.codegen.rowwise.hoist import loads_before_a_reduction
from porter.codegen.rowwise.hoist import split_invariant
from porter.codegen.rowwise.looped import looped
from porter.codegen.rowwise.looped import shifted
from porter.codegen.rowwise.one_block import choose_fills
from porter.codegen.rowwise.one_block import persistent
from porter.codegen.rowwise.one_block import single_pass
from porter.codegen.rowwise.one_block import two_block
from porter.codegen.rowwise.post import fold
from porter.codegen.rowwise.rowgen import RowGen
from porter.codegen.rowwise.split_row import SplitBodies
from porter.codegen.rowwise.split_row import split_row
from porter.codegen.rowwise.split_row import why_not as split_row_why_not

# The names this module had before it became a package (metal.py reads the first two).
_row_coords = row_coords
_coords_for = coords_for
_full = full_coords
_online_pairs = online_pairs
_ssq_pairs = ssq_pairs
_variance_pairs = variance_pairs
_loads_before_a_reduction = loads_before_a_reduction

__all__ = [
    "COMBINE", "IDENTITY", "IDENTITY_VALUE", "REDUCE", "RowBodies", "RowGen", "build",
    "coords_for", "full_coords", "hoist_reduction_free", "row_coords", "size_exprs",
    "split_invariant",
]


@dataclass
class RowBodies:
    """The kernel bodies `build` emits, as lines at the kernel's indentation."""

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
    # The split-row kernels (None where the op does not fit them, for `split_why_not`).
    split: SplitBodies | None = None
    split_why_not: str | None = None
    # The split_coop kernel (None where the split row does not fit or no full row is written).
    coop: CoopBodies | None = None
    # The column kernel, where the reduced dim is not the last (None elsewhere).
    columns: ColumnBody | None = None
    # The looped body under SHIFT > 1 (looped.shifted) and the tensors whose rows it loads and
    # stores at 16-byte-aligned addresses (None: the module's looped kernel has no SHIFT).
    looped_shift: list[str] | None = None
    shift_tensors: list[str] = field(default_factory=list)


def build(g: Graph, plan: RowPlan, args: KernelArgs) -> RowBodies:
    """Emit the kernel bodies; registers every argument they use in `args`.

    Args:
        g: the traced, fused graph.
        plan: its row-wise iteration space and reductions.
        args: the kernel's arguments; each body adds those it uses, in the order emitted.

    Returns:
        One body per kernel of the template.
    """
    rg = RowGen.of(g, plan, args)
    rg.fills = choose_fills(rg)
    single = single_pass(rg)
    two = two_block(rg)
    persistent_pre, persistent_body = persistent(rg)
    looped_body, online = looped(rg)
    shift = shifted(rg)
    post = fold(rg)
    hoisted = hoist_reduction_free(single)
    moves_a_load = loads_before_a_reduction(hoisted) > loads_before_a_reduction(single)
    # after the others: an argument only the split kernels used would come after theirs
    split = split_row(rg)
    coop_body = coop(rg)
    # last: its arguments start from a copy of everything the other bodies registered
    column = columns(rg)
    return RowBodies(single, looped_body, post, rg.coord_lines, online,
                     hoisted if moves_a_load else None, persistent_pre, persistent_body,
                     two, one_round_variance=bool(rg.variance), columns=column, split=split,
                     split_why_not=split_row_why_not(rg), coop=coop_body,
                     looped_shift=shift[0] if shift else None,
                     shift_tensors=shift[1] if shift else [])
