"""The scan family: an inclusive prefix sum or product along one dim (torch.cumsum,
torch.cumprod), with the elementwise ops before it (x * mask) and after it fused, in one kernel
per config (`templates/triton_scan.py.j2`).

    y[r, i] = x[r, 0] + x[r, 1] + ... + x[r, i]        (cumprod: the product)

A program takes ROWS rows. `single_pass` holds each row in one [ROWS, BLOCK_N] block and scans
it with `tl.cumsum` (or `tl.cumprod`, an associative scan with a multiply); `looped` walks the
row in BLOCK_N-wide chunks, scanning each and carrying the running total (product) from one
chunk to the next. Values are held in fp32 whatever the I/O dtype (int64 for integer scans), and the
masked lanes of a partial block hold the identity (0 or 1).

Reversed scans (`torch.cumsum(x.flip(d), d).flip(d)`) are never materialised: the kernel's
column index is the output's position, the flip after the scan makes the scan's own position
`n - 1 - cols`, and the flip before it reads `x` at `n - 1 - (n - 1 - cols)` = `cols` again
(`emit.flip_coord`), so loads and stores stay contiguous; the row is then scanned from its end
(`reverse=True`, the looped kernel taking its chunks last to first). A flip on one side only
reads (or writes) at `n - 1 - cols`.

An exclusive scan written as `cat([zeros, cumsum(x[:, :n-1])])` (the identity before an
inclusive scan of the row but its last element) is the inclusive scan of `cat([zeros,
x[:, :n-1]])`: `rewrite_exclusive` turns the one into the other, and the cat becomes a select
in the load (`x` at `cols - 1`, 0 at column 0).

A scan over a dim that is not the last reads its rows strided (correct; no column kernel as
the row-wise family has). One scan per op; a scan beside a reduction or a matmul is not covered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar

import sympy
import torch

from porter.codegen import heuristics
from porter.codegen.emit import Coord
from porter.codegen.emit import Emitter
from porter.codegen.errors import UnsupportedOpError
from porter.codegen.fusion import report
from porter.codegen.generation.common import common_ctx
from porter.codegen.generation.common import heuristics_source
from porter.codegen.ir import Graph
from porter.codegen.ir import Node
from porter.codegen.ir import value_class
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.kernel_args import sym_to_python
from porter.codegen.op import GeneratedOp
from porter.codegen.op import KernelInfo
from porter.codegen.plan import RowPlan
from porter.codegen.rowwise import RowGen
from porter.codegen.rowwise import size_exprs
from porter.codegen.rowwise.rowgen import store_outputs
from porter.codegen.templates import ENV

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

IDENTITY = {"sum": 0, "prod": 1}
# one chunk's scan (`{x}` a [ROWS, BLOCK_N] tile, `{rev}` the direction; tl.cumprod is
# tl.associative_scan with a multiply, which the CPU interpreter runs as numpy's cumprod, not
# element by element) and the carry's combine with it
SCAN = {"sum": "tl.cumsum({x}, axis=1, reverse={rev})",
        "prod": "tl.cumprod({x}, axis=1, reverse={rev})"}
WITH_CARRY = {"sum": "{s} + carry", "prod": "{s} * carry"}


# -- reading the graph --------------------------------------------------------------------------
def _constant(n: Any) -> Any:
    """The value of a constant node (a scalar, or one expanded to a shape), else None."""
    while isinstance(n, Node) and (n.op == "expand" or (n.op == "pw" and n.attrs["fn"] == "cast")):
        n = n.args[0]
    return n.attrs["value"] if isinstance(n, Node) and n.op == "scalar" else None


def rewrite_exclusive(g: Graph) -> None:
    """cat([identity, scan(a)]) along the scan's dim -> scan(cat([identity, a])), in place: the
    two are equal (0, a0, a0 + a1, ...), and the second is one scan of the output's shape."""
    for n in list(g.live()):
        if n.op != "cat" or not isinstance(n.args[-1], Node) or n.args[-1].op != "scan":
            continue
        scan = n.args[-1]
        kind, dim = scan.attrs["kind"], scan.attrs["dim"]
        if n.attrs["dim"] != dim or any(_constant(p) != IDENTITY[kind] for p in n.args[:-1]):
            continue
        a = scan.args[0]
        inner = g.add("cat", (*n.args[:-1], a), n.shape, a.dtype, n.origin, dim=dim)
        g.nodes.remove(inner)
        g.nodes.insert(g.nodes.index(n), inner)
        n.op, n.args, n.origin = "scan", (inner,), scan.origin
        n.attrs = {"kind": kind, "dim": dim}


def _same_shape(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(sympy.simplify(x - y) == 0 for x, y in zip(a, b, strict=True))


def _reads_reversed(o: Node, scan: Node, after: set[int]) -> bool:
    """Whether output `o` reads the scan backwards along its dim (an odd number of flips of
    that dim between them); `after` holds the ids of the nodes that depend on the scan.

    Raises:
        UnsupportedOpError: something between them other than elementwise ops and flips of the
            scanned dim (the kernel stores the scan where it computed it).
    """
    dim, reverse, n = scan.attrs["dim"], False, o
    while n is not scan:
        if n.op == "flip" and n.attrs["dims"] == (dim,):
            reverse, n = not reverse, n.args[0]
            continue
        on = {a.id: a for a in n.inputs() if a.id in after or a is scan}
        if n.op != "pw" or len(on) != 1:
            why = "reads the scan at two positions" if n.op == "pw" else \
                f"{n.op} of a scan's result (only elementwise ops and a flip of the scanned " \
                "dim may follow it)"
            raise UnsupportedOpError(n.origin or n.op, why)
        (n,) = on.values()
        if not _same_shape(n.shape, scan.shape):
            raise UnsupportedOpError(o.origin, "a scan's result broadcast to another shape")
    return reverse


@dataclass(frozen=True)
class ScanPlan:
    """What the kernels are built from: the scan, its rows (a RowPlan over the scan's shape,
    every output "full") and the direction its outputs read it in."""

    scan: Node
    rows: RowPlan
    reverse: bool


def scan_plan(g: Graph) -> ScanPlan:
    """Read the scan off the graph (after `rewrite_exclusive`).

    Raises:
        UnsupportedOpError: more than one scan, an output of another shape, or outputs reading
            the scan in both directions.
    """
    live = g.live()
    scans = [n for n in live if n.op == "scan"]
    if len(scans) > 1:  # (classify sends an op here for its one scan)
        raise UnsupportedOpError(scans[1].origin, "more than one scan in one op")
    scan = scans[0]
    after: set[int] = set()
    for n in live:
        if any(a is scan or a.id in after for a in n.inputs()):
            after.add(n.id)
    directions = set()
    for o in g.outputs:
        if not _same_shape(o.shape, scan.shape):
            raise UnsupportedOpError("output", f"output of shape {list(o.shape)} is not the "
                                     f"scan's {list(scan.shape)}")
        if o is scan or o.id in after:
            directions.add(_reads_reversed(o, scan, after))
    if len(directions) > 1:
        raise UnsupportedOpError(scan.origin, "outputs read the scan in both directions")
    rows = RowPlan(scan.shape, scan.attrs["dim"], out_kind=["full"] * len(g.outputs))
    return ScanPlan(scan, rows, reverse=directions.pop())


# -- the kernel bodies ---------------------------------------------------------------------------
def _body(rg: RowGen, sp: ScanPlan, looped: bool) -> list[str]:
    """One kernel's body after its masks: the scan's input at the scan's positions, the scan
    (with the carry, looped), then the outputs at the kernel's positions (`cols`)."""
    em: Emitter = rg.emitter()
    em.indent = 2 if looped else 1
    scan, kind = sp.scan, sp.scan.attrs["kind"]
    at = list(rg.full)
    if sp.reverse:
        # the output's position cols is the scan's n - 1 - cols (flip_coord unwraps it again)
        n = rg.args.size(sp.rows.space[sp.rows.dim])
        at[sp.rows.dim] = Coord(f"({n} - 1 - cols)", True)
    at_scan = tuple(at)
    x = em.eval(scan.args[0], at_scan)
    acc = "tl.float32" if value_class(scan.dtype) == "f" else "tl.int64"
    x = em.tmp(f"tl.where(mask, ({x}).to({acc}), {IDENTITY[kind]})", "x")  # identity lanes
    s = em.tmp(SCAN[kind].format(x=x, rev=sp.reverse), "scan")
    if looped:
        s = em.tmp(WITH_CARRY[kind].format(s=s), "scan")
        # the next chunk's carry is this chunk's last scanned value (its first column when the
        # row is scanned from its end), read out by a sum over one lane: the running value
        # passes on exactly as stored
        last = 0 if sp.reverse else "BLOCK_N - 1"
        em.emit(f"carry = tl.sum(tl.where(tl.arange(0, BLOCK_N)[None, :] == {last}, {s}, 0), "
                "axis=1)[:, None]")
    em.fixed[scan.id] = (at_scan, s)
    store_outputs(rg, em, ("full",))
    return em.lines


@dataclass
class ScanOp(GeneratedOp):
    """A scan op: its configs are the scan kernels' (`scan_space`), and it has no Metal form."""

    languages: ClassVar[tuple[str, ...]] = ("triton",)

    def metal_source(self, config: dict[str, Any] | None = None) -> str | None:
        """None: no Metal scan template (the writer then declines the Metal target)."""
        return None

    def default_config(self, hw: HardwareModel | None, shape: Any = None,
                       dtype: torch.dtype | None = None) -> dict[str, Any]:
        """The generated launcher's own choice (`heuristics.scan_default`) with `hw`'s warp
        width and thread limit, plus the I/O dtype."""
        from targets.dtypes import dtype_name

        hw = hw or _reference()
        inputs = self._inputs_for(shape)
        sizes = self.problem_sizes(inputs)
        first = next(x for x in inputs if isinstance(x, torch.Tensor))
        cfg = heuristics.scan_default(sizes["n_rows"], sizes["n_cols"], first.element_size(),
                                      hw.warp_size, int(hw.limits.max_threads_per_block.value))
        cfg["dtype"] = dtype_name(dtype or first.dtype)
        if hw.build.backend == "triton-hip":
            cfg["waves_per_eu"] = 0  # no occupancy hint (the compiler's choice)
        return cfg

    def variant_space(self, hw: HardwareModel, shape: Any = None,
                      dtype: torch.dtype | None = None) -> list[dict[str, Any]]:
        """The default first, then `scan_space`'s configs for `hw`."""
        default = self.default_config(hw, shape, dtype)
        if hw.build.backend == "metal":
            return []
        sizes = self.problem_sizes(self._inputs_for(shape))
        out = [{**c, "dtype": default["dtype"]}
               for c in scan_space(hw, sizes["n_rows"], sizes["n_cols"])]
        if hw.build.backend == "triton-hip":
            out = [{**c, "waves_per_eu": w} for c in out for w in (0, 1, 2)]
        return [default] + [c for c in out if c != default]


def _reference() -> HardwareModel:
    import hwmodels
    from porter.codegen.variants import REFERENCE_DEVICE

    return hwmodels.get(REFERENCE_DEVICE)


def scan_space(hw: HardwareModel, n_rows: int, n_cols: int) -> list[dict[str, Any]]:
    """The scan configs worth trying on `hw`: one block (BLOCK_N the row's next power of two,
    up to SCAN_ONE_BLOCK) over 1-128 rows, or chunks of 1024-8192 columns over one row; at most
    SCAN_MAX_THREADS threads, 1 to 32 values per thread, and registers within what a thread may
    hold at that size, estimated from sm_90 cross-compiles of the generated kernels (Triton
    3.9; cumsum, cumprod, reversed, masked): ~2 registers a value where no lane is masked
    (EVEN: 40-48 at 8 values, 54-80 at 16 and 32, 109-128 at 64 in one block, where the
    reversed scan spilled) and ~5 where lanes are masked and loads are one element wide
    (widths 16383 and 32767: 72-80 at 8 values, 95-106 at 16, 118-186 at 32), plus ~48."""
    warp = hw.warp_size
    threads_cap = min(int(hw.limits.max_threads_per_block.value), heuristics.SCAN_MAX_THREADS)
    regs = int(hw.limits.registers_per_unit.value)
    reg_cap = int(hw.limits.max_registers_per_thread.value)
    p2 = heuristics._next_pow2(max(n_cols, 1))
    out = []
    shapes = [("single_pass", p2, r) for r in (1, 2, 4, 8, 16, 32, 64, 128)
              if p2 <= heuristics.SCAN_ONE_BLOCK and r <= heuristics._next_pow2(max(n_rows, 1))]
    shapes += [("looped", b, 1) for b in (1024, 2048, 4096, 8192) if b < p2]
    for strategy, block, rows in shapes:
        for w in (1, 2, 4, 8, 16, 32):
            threads = w * warp
            per_thread = rows * block / threads
            if threads > threads_cap or not 1 <= per_thread <= 32:
                continue
            cfg = {"strategy": strategy, "ROWS": rows, "BLOCK_N": block, "num_warps": w,
                   "num_stages": 1}
            per_value = 2 if heuristics.rowwise_full_blocks(strategy, n_rows, n_cols, cfg) else 5
            if 48 + per_value * per_thread >= min(reg_cap, regs // threads):
                continue
            out.append(cfg)
    return out


# -- the generator -------------------------------------------------------------------------------
def gen_scan(name: str, g: Graph, ex: tuple[Any, ...], args: KernelArgs,
             subs: dict[sympy.Symbol, int]) -> GeneratedOp:
    """The scan module: the single-pass and looped kernels over the scan's rows and their
    launcher."""
    rewrite_exclusive(g)
    sp = scan_plan(g)
    rg = RowGen.of(g, sp.rows, args)
    single = _body(rg, sp, looped=False)
    looped = _body(rg, sp, looped=True)
    fusion = report(g, subs, 1, 0, "scan")
    ctx = common_ctx(name, "scan", g, fusion, args)
    n_rows, n_cols = size_exprs(sp.rows)
    kind = sp.scan.attrs["kind"]
    acc = "tl.float32" if value_class(sp.scan.dtype) == "f" else "tl.int64"
    src = ENV.get_template("triton_scan.py.j2").render(
        **ctx, single=single, looped=looped, row_coord_lines=rg.coord_lines,
        n_rows=sym_to_python(n_rows, g.symbols), n_cols=sym_to_python(n_cols, g.symbols),
        reverse=sp.reverse, prod=kind == "prod", identity=IDENTITY[kind], acc=acc,
        max_threads=heuristics.SCAN_MAX_THREADS, one_block=heuristics.SCAN_ONE_BLOCK,
        heuristics=heuristics_source(heuristics.scan_default, heuristics.rowwise_full_blocks))
    params, kinds = (*args.params, "n_rows", "n_cols"), (*args.kinds, "i32", "i32")
    kernels = [KernelInfo(ctx["kname"] + f"_{s}_kernel", params, kinds,
                          ("ROWS", "BLOCK_N", "EVEN"), (s,), tuple(args.launch_exprs))
               for s in ("single_pass", "looped")]
    op = ScanOp(name, "scan", g, ex, sp.rows, fusion, kernels, src)
    op._mm = {"last_dim": sp.rows.dim == len(sp.rows.space) - 1, "reverse": sp.reverse}
    return op
