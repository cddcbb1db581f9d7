"""The rowwise family (and elementwise ops that are not flat): the row kernels of
`porter.codegen.rowwise` rendered into one module, with their long-row kernels."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from porter.codegen import heuristics
from porter.codegen import rowwise
from porter.codegen.fusion import report
from porter.codegen.generation.common import common_ctx
from porter.codegen.generation.common import heuristics_source
from porter.codegen.ir import Graph
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.kernel_args import sym_to_python
from porter.codegen.op import GeneratedOp
from porter.codegen.op import KernelInfo
from porter.codegen.plan import RowPlan
from porter.codegen.plan import row_plan
from porter.codegen.rowwise import argreduce
from porter.codegen.templates import ENV


def gen_rowwise(name: str, g: Graph, ex: tuple[Any, ...], args: KernelArgs,
                 subs: dict[sympy.Symbol, int], family: str) -> GeneratedOp:
    plan = row_plan(g)
    bodies = rowwise.build(g, plan, args)
    n_rows, n_cols = rowwise.size_exprs(plan)
    n_rows_val = int(sympy.sympify(n_rows).subs(subs))
    n_kernels = 2 if bodies.post else 1
    fusion = report(g, subs, n_kernels, 4 * n_rows_val * len(plan.post) * 2, family)
    ctx = common_ctx(name, family, g, fusion, args)
    last_dim = plan.dim == len(plan.space) - 1
    column = bodies.columns
    n_cols_val = int(sympy.sympify(n_cols).subs(subs))
    row_align = _align("n_cols", args,
                       skip=_scalar_strides(args, ex, n_rows_val, n_cols_val, last_dim))
    # the (value, index) combines of the argmax / argmin reductions (rowwise.argreduce)
    arg_kinds = sorted({r.attrs["kind"] for r in plan.main} & set(argreduce.ARG_KINDS))
    column_ctx = {"columns": column is not None,
                  "arg_combines": [(k, argreduce.BETTER[k]) for k in arg_kinds],
                  "fold_args": ", words, stamp" if bodies.post else ""}
    if column is not None:
        column_align = _align("n_inner", column.args, "\n".join(column.coord_lines + column.body))
        column_ctx.update(column_align_lines=column_align.lines,
                          column_align_exprs=column_align.exprs)
        column_ctx.update(column_params=column.args.declared(),
                          column_launch_exprs=column.args.launch_exprs,
                          column_coord_lines=column.coord_lines, column_body=column.body,
                          n_inner=sym_to_python(column.n_inner, g.symbols))
    column_heuristics = (heuristics.columns_default, heuristics.columns_full_blocks) \
        if column is not None else ()
    src = ENV.get_template("triton_rowwise.py.j2").render(**column_ctx,
        **ctx, single=bodies.single, single_hoisted=bodies.single_hoisted,
        persistent_pre=bodies.persistent_pre, persistent_body=bodies.persistent_body,
        two_block=bodies.two_block, one_round_variance=bodies.one_round_variance,
        looped=bodies.looped, looped_shift=bodies.looped_shift,
        shift_tensors=bodies.shift_tensors, post=bodies.post,
        row_coord_lines=bodies.row_coord_lines, post_count=len(plan.post),
        n_rows=sym_to_python(n_rows, g.symbols), n_cols=sym_to_python(n_cols, g.symbols),
        last_dim=last_dim, full_output="full" in plan.out_kind,
        looped_lanes=bool(bodies.online_pairs) or bodies.one_round_variance,
        thread_pairs=bool(bodies.online_pairs),
        lane_strategies=_lane_strategies(bodies, plan), **_long_row_ctx(bodies, plan),
        align_lines=row_align.lines, align_exprs=row_align.exprs,
        heuristics=heuristics_source(heuristics.rowwise_default, heuristics._rowwise_tile,
                                      heuristics.coop_tile, heuristics._coop_config,
                                      heuristics.fold_config,
                                      heuristics.rowwise_full_blocks, heuristics.rowwise_align,
                                      heuristics.looped_lanes,
                                      heuristics.looped_vec, heuristics.thread_lanes,
                                      *((heuristics.row_shift,) if bodies.looped_shift else ()),
                                      *((heuristics.split_chunks,) if bodies.split else ()),
                                      *((heuristics.coop_groups,)
                                        if _split_coop(bodies, plan) else ()),
                                      *column_heuristics))
    params = (*args.params, "n_rows")
    kinds = (*args.kinds, "i32")
    var1 = ("VAR1",) if bodies.one_round_variance else ()
    pdl = ("PDL",) if bodies.post else ()
    # the looped kernel's lane constexprs: an online softmax's LANES, a one-pass variance's
    # LANES, VEC and VAR1; the one-block kernels' per-thread (max, sum) pairs take LANES and VEC
    lanes = (("LANES",) if bodies.online_pairs or bodies.one_round_variance else ()) + (
        ("VEC", "VAR1") if bodies.one_round_variance else ())
    thread = ("LANES", "VEC") if bodies.online_pairs else ()
    kernels = [
        KernelInfo(ctx["kname"] + "_single_pass_kernel", (*params, "n_cols"), (*kinds, "i32"),
                   ("ROWS", "BLOCK_N", "EVEN", "ALIGN", *var1, *thread, "HOIST", *pdl)
                   if bodies.single_hoisted
                   else ("ROWS", "BLOCK_N", "EVEN", "ALIGN", *var1, *thread, *pdl),
                   ("single_pass",), tuple(args.launch_exprs), row_align.params),
        KernelInfo(ctx["kname"] + "_looped_kernel", (*params, "n_cols"), (*kinds, "i32"),
                   ("ROWS", "BLOCK_N", "EVEN", "ALIGN", *lanes,
                    *(("SHIFT",) if bodies.looped_shift else ()), *pdl), ("looped",),
                   tuple(args.launch_exprs), row_align.params,
                   shift=tuple(bodies.shift_tensors)),
        KernelInfo(ctx["kname"] + "_persistent_kernel", (*params, "n_cols"), (*kinds, "i32"),
                   ("ROWS", "BLOCK_N", "STAGES", "EVEN", "ALIGN", *var1, *thread, *pdl),
                   ("persistent",), tuple(args.launch_exprs), row_align.params),
        KernelInfo(ctx["kname"] + "_two_block_kernel", (*params, "n_cols"), (*kinds, "i32"),
                   ("ROWS", "BLOCK_N", "BLOCK_TAIL", "EVEN", "ALIGN", *var1, *pdl),
                   ("two_block",), tuple(args.launch_exprs), row_align.params),
    ]
    if column is not None:
        # its own arguments (the others' and its constexpr strides); n_inner's launch
        # expression types it (a multiple of 16 or not) in the compile check
        kernels.append(KernelInfo(
            ctx["kname"] + "_columns_kernel",
            (*column.args.params, "n_rows", "n_cols", "n_inner"),
            (*column.args.kinds, "i32", "i32", "i32"),
            ("BLOCK_I", "BLOCK_R", "EVEN", "ALIGN", *var1, *pdl), ("columns",),
            (*column.args.launch_exprs, "", "", sym_to_python(column.n_inner, g.symbols)),
            column_align.params))
    kernels += _long_row_kernels(ctx["kname"], bodies, plan, params, kinds, lanes,
                                 tuple(args.launch_exprs), row_align.params)
    if bodies.post:
        kernels.append(KernelInfo(ctx["kname"] + "_post_kernel", params, kinds,
                                  ("BLOCK", "MAX_SPINS", "GRID_WAIT"), ("*",),
                                  tuple(args.launch_exprs)))
    op = GeneratedOp(name, family, g, ex, plan, fusion, kernels, src)
    op._mm = {"online": bodies.online_pairs, "last_dim": last_dim,
              "hoist": bodies.single_hoisted is not None,
              "one_round_variance": bodies.one_round_variance, "columns": column is not None,
              "looped_l2": _looped_l2(bodies, plan), "split_row": bodies.split is not None,
              "split_why_not": bodies.split_why_not, "split_coop": _split_coop(bodies, plan),
              "arg_reduction": bool(arg_kinds)}
    return op


def _lane_strategies(bodies: rowwise.RowBodies, plan: RowPlan) -> tuple[str, ...]:
    """Strategies whose kernel takes LANES: the looped kernel for an online softmax or a
    one-pass variance; the single pass and the persistent kernel for an online softmax's
    per-thread (max, sum) pairs (which take VEC too, `heuristics.thread_lanes`); the split
    row's partials kernel for an online softmax; the split_coop kernel for an online softmax's
    per-thread pairs, as the one-block kernels."""
    one_block = ("single_pass", "persistent") if bodies.online_pairs else ()
    looped = _looped_strategies(bodies, plan) if bodies.online_pairs or \
        bodies.one_round_variance else ()
    split = ("split_row",) if bodies.split and bodies.online_pairs else ()
    coop = ("split_coop",) if _split_coop(bodies, plan) and bodies.online_pairs else ()
    return looped + one_block + split + coop


def _looped_l2(bodies: rowwise.RowBodies, plan: RowPlan) -> bool:
    """Whether the module has the L2-resident looped kernel: where the looped kernel reads each
    row twice (reductions, then full-row outputs) and has no fold (its early launch)."""
    return bool(plan.main) and "full" in plan.out_kind and not bodies.post


def _split_coop(bodies: rowwise.RowBodies, plan: RowPlan) -> bool:
    """Whether the module has the split_coop kernel: where the split row fits and the op
    writes full rows (a reduction-only op reads each row once already, looped)."""
    return bodies.coop is not None


def _looped_strategies(bodies: rowwise.RowBodies, plan: RowPlan) -> tuple[str, ...]:
    """The strategies that run the looped body."""
    return ("looped", "looped_l2") if _looped_l2(bodies, plan) else ("looped",)


@dataclass(frozen=True)
class Align:
    """A kernel's ALIGN (heuristics.rowwise_align): the largest power of two (<= 16) dividing
    its length (n_cols, or the column kernel's n_inner) and its runtime strides ("i64"). Each
    kernel restates them as multiples of ALIGN at its top (`lines`): the values are unchanged,
    but Triton's axis analysis then knows each row starts and ends on an ALIGN boundary and
    emits 16-byte vector loads at widths such as 3000, which the JIT's own
    divisibility-by-16 specialization misses (issue 31). `tl.multiple_of` on a scalar argument
    compiles but does not reach the analysis (triton 3.9: still 2-byte loads).

    Attributes:
        params: the length's parameter, then the strides'.
        exprs: the launcher's expressions for the strides (the length is its own variable).
    """

    params: tuple[str, ...]
    exprs: tuple[str, ...]

    @property
    def lines(self) -> list[str]:
        return ["# multiples of ALIGN (it divides them): vector loads at any such width",
                *(f"{p} = {p} // ALIGN * ALIGN" for p in self.params)]


def _align(length: str, args: KernelArgs, uses: str | None = None,
           skip: frozenset[str] = frozenset()) -> Align:
    """The Align of a kernel of `args` whose length parameter is `length`; `uses`: the
    kernel's text, where it takes only some of `args`' strides (the column kernel leaves the
    last dim's runtime stride to its constexpr one, a 1 that would make ALIGN 1); `skip`: the
    launcher expressions of strides no vector load depends on (`_scalar_strides`)."""
    strides = [(p, e) for p, e, k in zip(args.params, args.launch_exprs, args.kinds, strict=True)
               if k == "i64" and (uses is None or re.search(rf"\b{p}\b", uses))
               and e not in skip]
    return Align((length, *(p for p, _ in strides)), tuple(e for _, e in strides))


def _scalar_strides(args: KernelArgs, ex: tuple[Any, ...], n_rows: int, n_cols: int,
                    last_dim: bool) -> frozenset[str]:
    """The runtime strides that only scalar loads use: those of an input holding one value per
    row (cross-entropy's target index) and, where the reduced dim is last, each input's last-dim
    stride (the row's vector loads take its constexpr unit stride; the runtime one serves
    gathers, x[row, target[row]]). Their unit values made ALIGN 1, and cross-entropy's rows lost
    their 16-byte loads: 10000x4096 bf16 ran 8.6x slower on the H100 (issue 31)."""
    out = set()
    for e in args.launch_exprs:
        m = re.fullmatch(r"inputs\[(\d+)\]\.stride\((\d+)\)", e)
        if m is None:
            continue
        t = ex[int(m.group(1))]
        if not isinstance(t, torch.Tensor):
            continue
        per_row = t.numel() == n_rows and n_cols > 1
        if per_row or (last_dim and int(m.group(2)) == t.dim() - 1):
            out.add(e)
    return frozenset(out)


def _long_row_ctx(bodies: rowwise.RowBodies, plan: RowPlan) -> dict[str, Any]:
    """The template's context for the long-row kernels (`_triton_rowwise_long.py.j2`)."""
    l2 = _looped_l2(bodies, plan)
    return {"looped_l2": l2, "split": bodies.split, "coop": bodies.coop}


def _long_row_kernels(kname: str, bodies: rowwise.RowBodies, plan: RowPlan,
                      params: tuple[str, ...], kinds: tuple[str, ...], lanes: tuple[str, ...],
                      launch: tuple[str, ...], align: tuple[str, ...]) -> list[KernelInfo]:
    """The L2-resident looped kernel, the split row's two kernels and the split_coop kernel,
    where the op has them."""
    out = []
    if _looped_l2(bodies, plan):
        out.append(KernelInfo(kname + "_looped_l2_kernel", (*params, "n_cols"), (*kinds, "i32"),
                              ("ROWS", "BLOCK_N", "EVEN", "ALIGN", *lanes), ("looped_l2",),
                              launch, align))
    if bodies.split is not None:
        ws = ("n_cols", "ws_ptr", "chunk_cols", "n_chunks")
        ws_kinds = ("i32", "ptr:ws", "i32", "i32")
        online = ("LANES",) if bodies.online_pairs else ()
        out.append(KernelInfo(kname + "_split_partials_kernel", (*params, *ws, "row0"),
                              (*kinds, *ws_kinds, "i32"),
                              ("ROWS", "BLOCK_N", "EVEN", "ALIGN", *online),
                              ("split_row",), launch, align))
        out.append(KernelInfo(kname + "_split_apply_kernel", (*params, *ws, "n_apply", "row0"),
                              (*kinds, *ws_kinds, "i32", "i32"),
                              ("ROWS", "BLOCK_N", "EVEN", "ALIGN", "SPLIT"), ("split_row",),
                              launch, align))
        if _split_coop(bodies, plan):
            coop = (*params, "n_cols", "ws_ptr", "cnt_ptr", "n_chunks")
            coop_kinds = (*kinds, "i32", "ptr:ws", "ptr:cnt", "i32")
            # an online softmax's per-thread pairs take LANES and VEC, as the one-block kernels
            thread = ("LANES", "VEC") if bodies.online_pairs else ()
            out.append(KernelInfo(kname + "_split_coop_kernel", coop, coop_kinds,
                                  ("ROWS", "BLOCK_N", "EVEN", "ALIGN", *thread, "SPLIT", "PHASE"),
                                  ("split_coop",), launch, align))
    return out
