"""The matmul_rowwise family: a matmul stage per matmul and the row-wise stage last,
composed into one module (`MatmulRowwiseOp`)."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar

import sympy
import torch

from porter.codegen import dtypes
from porter.codegen import fastmath
from porter.codegen import matmul_rowwise
from porter.codegen import rowwise
from porter.codegen.fusion import report
from porter.codegen.generation.common import common_ctx
from porter.codegen.generation.matmul import gen_matmul
from porter.codegen.generation.matmul import operand
from porter.codegen.generation.rowwise import gen_rowwise
from porter.codegen.ir import Graph
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.kernel_args import sym_to_python
from porter.codegen.op import GeneratedOp
from porter.codegen.templates import ENV

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel


@dataclass
class MatmulRowwiseOp(GeneratedOp):
    """A matmul_rowwise op (porter.codegen.matmul_rowwise): the generated ops of its stages,
    one per matmul (each with its epilogue, writing an [M, N] intermediate) and the row-wise
    one last, composed into one module; each stage takes the one before's intermediate as its
    input 0. Sizes, configs, variants and kernel refs are the stages', an op config holding
    each stage's knobs under its prefix (`matmul_rowwise.split_config`)."""

    stages: list[GeneratedOp] = field(default_factory=list)
    prefixes: tuple[str, ...] = ()
    a_indices: tuple[int, ...] = ()  # per matmul stage: its A operand among the stage's inputs
    # the Metal emitter writes one kernel per op; this family is several
    languages: ClassVar[tuple[str, ...]] = ("triton",)

    def stage_inputs(self, inputs: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Each stage's inputs for the op's `inputs`: the intermediates as meta tensors (sizes,
        dtypes and strides are what the stages read off them), then the inputs before."""
        out, args = [], tuple(inputs)
        for i, stage in enumerate(self.stages):
            out.append(args)
            if i < len(self.a_indices):
                sizes = stage.problem_sizes(args)
                t = torch.empty((sizes["M"], sizes["N"]), dtype=args[self.a_indices[i]].dtype,
                                device="meta")
                args = (t, *args)
        return out

    def metal_source(self, config: dict[str, Any] | None = None) -> str | None:
        """None: the Metal emitter writes one kernel per op, and this family is several (the
        writer then declines the Metal target, naming the family)."""
        return None

    def problem_sizes(self, inputs: Sequence[Any]) -> dict[str, int]:
        """M, N, K of the first matmul ("mm2_M", ... of a second), n_rows, n_cols of the rows."""
        out: dict[str, int] = {}
        for prefix, stage, args in zip(self.prefixes, self.stages, self.stage_inputs(inputs),
                                       strict=True):
            tag = "" if prefix == matmul_rowwise.ROW_PREFIX else prefix
            out.update({tag + k: v for k, v in stage.problem_sizes(args).items()})
        return out

    def default_config(self, hw: HardwareModel | None, shape: Sequence[Any] | None = None,
                       dtype: torch.dtype | None = None) -> dict[str, Any]:
        """Each stage's default config for these inputs, as one config."""
        per_stage = self.stage_inputs(self._inputs_for(shape))
        return matmul_rowwise.join_config(
            [st.default_config(hw, args, dtype) for st, args in zip(self.stages, per_stage,
                                                                    strict=True)],
            self.prefixes)

    def variant_space(self, hw: HardwareModel, shape: Sequence[Any] | None = None,
                      dtype: torch.dtype | None = None) -> list[dict[str, Any]]:
        """Each stage's space, pruned by `hw`, combined (`matmul_rowwise.combined_space`)."""
        per_stage = self.stage_inputs(self._inputs_for(shape))
        # a matmul stage's fp32 tf32x3 configs come with its own space (variants.space)
        spaces = [stage.variant_space(hw, args, dtype)
                  for stage, args in zip(self.stages, per_stage, strict=True)]
        return matmul_rowwise.combined_space(spaces, self.prefixes)

    def tma_layout_ok(self, inputs: Sequence[Any], elem_bytes: int) -> bool:
        return self.stages[0].tma_layout_ok(inputs, elem_bytes)

    def tma_applies(self, inputs: Sequence[Any]) -> bool:
        return self.stages[0].tma_applies(inputs)

    def kernel_refs(self, inputs: Sequence[Any], config: dict[str, Any] | None = None,
                    source_path: str | None = None) -> list[Any]:
        """(KernelRef, LaunchConfig) per kernel the config launches: the stages run with
        their own warps and stages, so each ref comes with its stage's launch knobs."""
        from dataclasses import replace

        from targets.base import LaunchConfig

        config = config or self.default_config(None, inputs)
        configs = matmul_rowwise.split_config(config, self.prefixes)
        out: list[Any] = []
        for stage, args, cfg in zip(self.stages, self.stage_inputs(inputs), configs,
                                    strict=True):
            extra = {k: cfg[k] for k in ("waves_per_eu", "matrix_instr_nonkdim", "maxnreg")
                     if k in cfg}
            lc = LaunchConfig(num_warps=int(cfg.get("num_warps", 4)),
                              num_stages=int(cfg.get("num_stages", 2)), extra=extra)
            for ref in stage.kernel_refs(args, cfg, source_path):
                out.append((replace(ref, source=self._source), lc))
        return out


def gen_matmul_rowwise(name: str, g: Graph, ex: tuple[Any, ...],
                        subs: dict[sympy.Symbol, int]) -> GeneratedOp:
    """The matmul_epilogue generator on each matmul stage, the rowwise one on the last stage,
    and the sources composed into one module (see porter.codegen.matmul_rowwise)."""
    cuts = matmul_rowwise.stages(g, lambda mm: operand(mm.args[0], (0, 1))[0])
    prefixes = matmul_rowwise.stage_prefixes(len(cuts))
    fm = fastmath.triton_source()
    resolve = inspect.getsource(dtypes.resolve_out_dtypes)
    ops: list[GeneratedOp] = []
    stages: list[dict[str, Any]] = []
    args_ex, scratch, bodies = tuple(ex), 0, ""
    for i, cut in enumerate(cuts + [None]):
        last = cut is None
        tag = "row" if last else "mm" if i == 0 else f"mm{i + 1}"
        launcher = "_launch_row" if last else "_launch_matmul" + ("" if i == 0 else str(i + 1))
        graph = cuts[-1].tail if last else cut.head
        if last:
            op_i = gen_rowwise(f"{name}_{tag}", graph, args_ex, KernelArgs(graph.symbols), subs,
                                "rowwise")
        else:
            op_i = gen_matmul(f"{name}_{tag}", graph, args_ex, KernelArgs(graph.symbols), subs,
                               tf32x3=True)
        body = matmul_rowwise.part_body(op_i._source, resolve, fm, f"_S{i + 1}_", launcher)
        body = matmul_rowwise.drop_repeats(body, bodies, f"_s{i + 1}") if bodies else body
        bodies += body
        info = {"what": "the row-wise kernels over the last intermediate" if last else
                f"matmul {i + 1} with its elementwise epilogue, storing its [M, N] output",
                "globals": f"_S{i + 1}_", "body": body, "launcher": launcher,
                "dtype_table": dtypes.table_source(graph.out_dtype_table),
                "dtype_rules": dtypes.rules_source(graph.out_dtype_rules)}
        if last:
            # the row length in the stage's own inputs, which the op's launcher calls `args`
            n_cols = sym_to_python(rowwise.size_exprs(op_i.plan)[1], graph.symbols)
            info["n_cols"] = n_cols.replace("inputs[", "args[")
        else:
            mm = next(n for n in graph.live() if n.op == "mm")
            m, n = (int(sympy.sympify(s).subs(subs)) for s in mm.shape)
            a = args_ex[cut.a_index]
            info.update(m=sym_to_python(mm.shape[0], g.symbols),
                        n=sym_to_python(mm.shape[1], g.symbols), a_index=cut.a_index)
            scratch += 2 * m * n * a.element_size()  # written once, read once
            args_ex = (torch.empty((m, n), dtype=a.dtype), *args_ex)
        ops.append(op_i)
        stages.append(info)
    n_kernels = len(cuts) + ops[-1].fusion.kernels
    fusion = report(g, subs, n_kernels, scratch, "matmul_rowwise")
    ctx = common_ctx(name, "matmul_rowwise", g, fusion, KernelArgs(g.symbols))
    summary = ("the matmul kernel, then the row-wise kernel(s) over its output" if len(cuts) == 1
               else f"{len(cuts)} matmul kernels (each reading the one before's output), then "
               "the row-wise kernel(s) over the last")
    src = ENV.get_template("triton_matmul_rowwise.py.j2").render(
        **ctx, stages=stages, prefixes=repr(prefixes), summary=summary)
    op = MatmulRowwiseOp(name, "matmul_rowwise", g, ex, None, fusion,
                         [k for o in ops for k in o.kernels], src, stages=ops,
                         prefixes=prefixes, a_indices=tuple(c.a_index for c in cuts))
    op._mm = dict(ops[0]._mm)
    return op
