"""`GeneratedOp`: the product of `generate` — sources, configs, variants, fusion report."""

from __future__ import annotations

import inspect
import math
import logging
from collections.abc import Callable
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
from porter.codegen import heuristics
from porter.codegen import matmul_rowwise
from porter.codegen import rowwise
from porter.codegen import variants
from porter.codegen.emit import TRITON_DTYPE
from porter.codegen.emit import Coord
from porter.codegen.emit import Emitter
from porter.codegen.emit import KernelArgs
from porter.codegen.emit import sym_to_python
from porter.codegen.errors import UnsupportedOpError
from porter.codegen.fusion import FusionReport
from porter.codegen.fusion import report
from porter.codegen.ir import Graph
from porter.codegen.ir import Node
from porter.codegen.plan import RowPlan
from porter.codegen.plan import classify
from porter.codegen.plan import row_plan
from porter.codegen.templates import ENV as _ENV
from porter.codegen.templates import TEMPLATES  # noqa: F401 - importable from here as before
from porter.codegen.templates import safe_name as _safe
from porter.codegen.trace import trace

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from targets.base import KernelRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KernelInfo:
    """One @triton.jit kernel of the module, and how to build its cross-compile signature.

    params: runtime parameter names in order; kinds: "ptr:in<k>"/"ptr:out<j>", "ptr:words" and
    "stamp" (a fold's words and the call's stamp), "i64", "i32", "cstride:<in k|out j>:<dim>"
    (a unit-stride constexpr), and for the TMA matmul
    "desc:in<k>:<row dim>:<col dim>:<block constexpr>:<block constexpr>" (a tensor descriptor;
    for tma_ws the operand's pointer), "rstride:in<k>:<row dim>:<col dim>" (the row stride of
    its TMA view) and "ctma:in<k>:<row dim>:<col dim>" (whether it is described transposed);
    constexprs: the constexpr parameter names, filled from a config.
    """

    name: str
    params: tuple[str, ...]
    kinds: tuple[str, ...]
    constexprs: tuple[str, ...]
    strategies: tuple[str, ...]  # configs whose "strategy" runs this kernel
    launch: tuple[str, ...] = ()  # launcher expression per runtime param (to type int hints)


@dataclass
class GeneratedOp:
    """A traced, classified op with its generated sources. Build it with `generate`."""

    name: str
    family: str
    graph: Graph
    example_inputs: tuple[Any, ...]
    plan: RowPlan | None
    fusion: FusionReport
    kernels: list[KernelInfo] = field(default_factory=list)
    _source: str = ""
    _mm: dict[str, Any] = field(default_factory=dict)
    # The code languages this op is emitted in (a backend's `capabilities().language`); a
    # target whose language is not here gets no kernel, with that reason.
    languages: ClassVar[tuple[str, ...]] = ("triton", "metal")

    # -- sources ------------------------------------------------------------------------------
    def triton_module_source(self, config: dict[str, Any] | None = None) -> str:
        """One importable module: the @triton.jit kernels and `launch(*inputs, out, config)`.

        Args:
            config: accepted for symmetry with variants; the module takes its config at launch
                time (`launch(..., config=...)`), choosing a default per shape when None.
        """
        return self._source

    def metal_source(self, config: dict[str, Any] | None = None) -> str | None:
        """Metal Shading Language for elementwise, rowwise and matmul-with-epilogue ops (never
        compiled here by a Metal compiler; checked on the CPU Metal executor)."""
        from porter.codegen import metal

        return metal.render(self, config or {})

    # -- shapes and configs --------------------------------------------------------------------
    def output_spec(self, inputs: Sequence[Any]) -> list[tuple[tuple[int, ...], torch.dtype]]:
        """(shape, dtype) of each output for these inputs (from the symbolic sizes)."""
        subs = self._subs(inputs)
        out_dtypes = dtypes.resolve_out_dtypes(inputs, self.graph.out_dtype_table,
                                                self.graph.out_dtype_rules)
        specs = []
        for o, dt in zip(self.graph.outputs, out_dtypes, strict=True):
            shape = tuple(int(sympy.sympify(s).subs(subs)) for s in o.shape)
            specs.append((shape, dt))
        return specs

    def _subs(self, inputs: Sequence[Any]) -> dict[sympy.Symbol, int]:
        return {s: int(inputs[k].shape[d]) for s, (k, d) in self.graph.symbols.items()}

    def problem_sizes(self, inputs: Sequence[Any]) -> dict[str, int]:
        """The sizes the configs depend on: n_rows/n_cols (rowwise), numel, or M/N/K."""
        subs = self._subs(inputs)
        if self.family == "matmul_epilogue":
            return {k: int(sympy.sympify(v).subs(subs)) for k, v in self._mm["mnk"].items()}
        if self.plan is not None:
            n_rows, n_cols = rowwise.size_exprs(self.plan)
            return {"n_rows": int(sympy.sympify(n_rows).subs(subs)),
                    "n_cols": int(sympy.sympify(n_cols).subs(subs))}
        out = self.graph.outputs[0]
        return {"numel": int(sympy.Mul(*out.shape).subs(subs))}

    def default_config(self, hw: HardwareModel | None, shape: Sequence[Any] | None = None,
                       dtype: torch.dtype | None = None) -> dict[str, Any]:
        """The config the generated launcher picks by itself for these inputs.

        Args:
            hw: the device (warp width and thread limits); None: the hardware model of
                `variants.REFERENCE_DEVICE` (h100: a 32-wide warp, 1024 threads).
            shape: the example inputs to size for (a sequence of tensors), or None for the
                traced examples.
            dtype: I/O dtype override (carried in the config as "dtype").
        """
        return variants.default_config(self, hw, self._inputs_for(shape), dtype)

    def variant_space(self, hw: HardwareModel, shape: Sequence[Any] | None = None,
                      dtype: torch.dtype | None = None) -> list[dict[str, Any]]:
        """Configs worth trying on `hw`, pruned by its limits (see `porter.codegen.variants`)."""
        return variants.space(self, hw, self._inputs_for(shape), dtype)

    def _inputs_for(self, shape: Sequence[Any] | None) -> tuple[Any, ...]:
        if shape is None:
            return self.example_inputs
        if all(isinstance(s, int) for s in shape):
            raise TypeError("pass the inputs (tensors) for the shape, not a bare shape tuple")
        return tuple(shape)

    def tma_layout_ok(self, inputs: Sequence[Any], elem_bytes: int) -> bool:
        """Whether a TMA descriptor can describe both matmul operands of `inputs` (one unit
        stride, the other a multiple of 16 bytes) at an element size of `elem_bytes`."""
        if self.family != "matmul_epilogue" or "a" not in self._mm:
            return False
        for key in ("a", "b"):
            index, dim_r, dim_c = self._mm[key]
            t = inputs[index]
            if heuristics.tma_transposed(t.stride(dim_r), t.stride(dim_c), elem_bytes) is None:
                return False
        return True

    def tma_applies(self, inputs: Sequence[Any]) -> bool:
        """Whether a "tma_persistent" config runs its TMA kernel at these inputs: bf16/fp16
        operands of one dtype, K > 0, and a layout TMA can describe (`tma_layout_ok`).
        Elsewhere (odd K, fp32) the generated launcher runs the same tiles through the
        pointer-load kernel."""
        if self.family != "matmul_epilogue" or "a" not in self._mm:
            return False
        a, b = (inputs[self._mm[key][0]] for key in ("a", "b"))
        if a.dtype not in (torch.float16, torch.bfloat16) or b.dtype != a.dtype:
            return False
        return self.problem_sizes(inputs)["K"] > 0 and self.tma_layout_ok(inputs, a.element_size())

    # -- cross-compilation ---------------------------------------------------------------------
    def _int_args(self, inputs: Sequence[Any], specs: list[Any]) -> dict[str, int]:
        """Values of the integer runtime arguments for these inputs (outputs contiguous)."""
        outs = [torch.empty(s, dtype=d, device="meta") for s, d in specs]
        values: dict[str, int] = {}
        sizes = self.problem_sizes(inputs)
        values.update({k: v for k, v in sizes.items()})
        if "numel" in sizes:
            values["n_elements"] = sizes["numel"]
        for k in self.kernels:
            for p, kind, expr in zip(k.params, k.kinds, k.launch, strict=False):
                if kind in ("i32", "i64") and expr:
                    values[p] = int(_eval_launch(expr, inputs, outs))
        return values

    def kernel_refs(self, inputs: Sequence[Any], config: dict[str, Any] | None = None,
                    source_path: str | None = None) -> list[KernelRef]:
        """KernelRefs for the kernels `config` launches, typed from the actual inputs.

        Args:
            inputs: the inputs (their dtypes type the pointer arguments).
            config: a config from `variant_space` (default: `default_config`).
            source_path: a file holding `triton_module_source()`; when given, `fn` is loaded
                from it with `targets.load_kernel` (no interpreter), else left None.
        """
        from targets.base import KernelRef

        config = config or self.default_config(None, inputs)
        if config.get("strategy") in ("tma_persistent", "tma_ws") and not self.tma_applies(inputs):
            config = {**config, "strategy": "tiled"}  # what the launcher runs at these inputs
        specs = self.output_spec(inputs)
        ints = self._int_args(inputs, specs)
        out: list[KernelRef] = []
        for k in self.kernels:
            if config.get("strategy") not in k.strategies and "*" not in k.strategies:
                continue
            sig: dict[str, str] = {}
            consts = {c: _const_value(c, config, inputs, ints, self._mm.get("last_dim", True))
                      for c in k.constexprs}
            for p, kind in zip(k.params, k.kinds, strict=True):
                if kind.startswith("cstride:"):
                    _, who, d = kind.split(":")
                    if who.startswith("in"):
                        consts[p] = int(inputs[int(who[2:])].stride(int(d)))
                    else:
                        shape = specs[int(who[3:])][0]
                        consts[p] = int(math.prod(shape[int(d) + 1:]))
                elif kind.startswith("ctma:"):
                    _, who, r, c = kind.split(":")
                    consts[p] = _tma_operand(inputs[int(who[2:])], int(r), int(c))
                elif kind.startswith("rstride:"):
                    # the row stride of the operand's TMA view (the launcher's a/b_stride)
                    _, who, r, c = kind.split(":")
                    t = inputs[int(who[2:])]
                    value = t.stride(int(c) if _tma_operand(t, int(r), int(c)) else int(r))
                    sig[p] = "i32:16" if value % 16 == 0 else "i32"
                elif kind.startswith("desc:"):
                    _, who, r, c, br, bc = kind.split(":")
                    t = inputs[int(who[2:])]
                    if t.element_size() != 2:
                        raise ValueError(f"tma_persistent takes bf16/fp16 operands, got {t.dtype}")
                    if config.get("strategy") == "tma_ws":
                        sig[p] = "*" + TRITON_DTYPE[t.dtype]  # the operand: descriptor in-kernel
                        continue
                    block = [int(config[br]), int(config[bc])]
                    if _tma_operand(t, int(r), int(c)):
                        block.reverse()
                    sig[p] = f"tensordesc<{TRITON_DTYPE[t.dtype]}[{block[0]}, {block[1]}]>"
                elif kind.startswith("ptr:in"):
                    sig[p] = "*" + TRITON_DTYPE[inputs[int(kind[6:])].dtype]
                elif kind.startswith("ptr:out"):
                    sig[p] = "*" + TRITON_DTYPE[specs[int(kind[7:])][1]]
                elif kind == "ptr:words":
                    sig[p] = "*i64"
                elif kind == "ptr:ws":  # the split row's partials
                    sig[p] = "*fp32"
                elif kind == "stamp":
                    sig[p] = "i64:16"  # an epoch << 32: the JIT sees a multiple of 16
                else:
                    # The JIT specializes ints divisible by 16 at launch; say so here too, or
                    # the cross-compiled kernel is not the one that runs (no vector loads).
                    value = ints.get(p)
                    sig[p] = f"{kind}:16" if value is not None and value % 16 == 0 else kind
            fn = None
            if source_path is not None:
                import targets

                fn = targets.load_kernel(source_path, k.name)
            out.append(KernelRef(name=k.name, fn=fn, source=self._source, signature=sig,
                                 constexprs=consts))
        return out


def _eval_launch(expr: str, inputs: Sequence[Any], outs: list[torch.Tensor]) -> Any:
    return eval(expr, {"inputs": inputs, "outs": outs, "tmps": []})  # noqa: S307 - our own text


def _tma_operand(t: Any, dim_r: int, dim_c: int) -> bool:
    """Whether a TMA descriptor describes operand `t` ([R, C] = dims (dim_r, dim_c)) transposed.

    Raises:
        ValueError: TMA cannot describe `t` (no unit stride, or the other stride is not a
            multiple of 16 bytes), as the generated launcher would at launch.
    """
    transposed = heuristics.tma_transposed(t.stride(dim_r), t.stride(dim_c), t.element_size())
    if transposed is None:
        raise ValueError(f"tma_persistent: an operand of shape {tuple(t.shape)} and strides "
                         f"{tuple(t.stride())} has no TMA layout (one unit stride, the other a "
                         "multiple of 16 bytes)")
    return transposed


def _const_value(name: str, config: dict[str, Any], inputs: Sequence[Any],
                 ints: dict[str, int], last_dim: bool = True) -> Any:
    if name == "FLATTEN":
        return bool(config.get("FLATTEN", True))  # the launcher's defaults too
    if name == "SUBTILE":
        return bool(config.get("SUBTILE", False))
    if name == "WS":
        return config.get("strategy") == "tma_ws"
    if name == "IEEE":
        return bool(config.get("ieee", inputs[0].dtype == torch.float32))
    if name == "TF32X3":
        return bool(config.get("tf32x3", False))
    if name == "ACC_CHUNK":  # the launcher's own rule where the config names none
        return int(config.get("ACC_CHUNK", heuristics.acc_chunk(
            ints["K"], config["BLOCK_K"], inputs[0].element_size())))
    if name == "STAGES":  # the persistent row kernel's loop stages
        return int(config.get("num_stages", 1))
    if name == "HOIST":
        return bool(config.get("HOIST", False))
    if name == "VAR1":
        return bool(config.get("VAR1", False))
    if name == "MAX_SPINS":  # as the rowwise launcher sets it
        return heuristics.fold_config(int(ints["n_rows"]))["MAX_SPINS"]
    if name == "GRID_WAIT":  # the fold under CUDA-graph capture only
        return False
    if name == "PDL":
        # the fold's programmatic dependent launch (sm_90+ at run time): the compile check
        # builds without its two grid-dependency instructions, which take no registers
        return False
    if name == "EVEN" and config["strategy"] == "columns":  # as its launcher sets it
        return heuristics.columns_full_blocks(int(ints["n_inner"]), int(ints["n_cols"]), config)
    if name == "SPLIT":  # the split row's partials per row, as its launcher sizes them
        _, chunks = heuristics.split_chunks(int(ints["n_cols"]), config["SPLIT"],
                                            config["BLOCK_N"])
        return heuristics._next_pow2(chunks)
    if name == "EVEN":  # as the rowwise launcher sets it
        return heuristics.rowwise_full_blocks(config["strategy"], int(ints["n_rows"]),
                                              int(ints["n_cols"]), config)
    if name in ("LANES", "VEC"):  # as the rowwise launcher sets them
        first = next(x for x in inputs if isinstance(x, torch.Tensor))
        lanes = config.get("LANES") or heuristics.looped_lanes(
            config["BLOCK_N"], config["num_warps"], first.element_size())
        vec = heuristics.looped_vec(lanes, first.element_size())
        if config["strategy"] in ("single_pass", "persistent"):
            lanes, vec = heuristics.thread_lanes(lanes, first.element_size(), last_dim,
                                                 int(ints["n_cols"]), first.data_ptr())
        return lanes if name == "LANES" else vec
    if name == "UPCAST":
        return False  # only the CPU interpreter upcasts
    if name == "BLOCK" and "BLOCK" not in config:  # the post kernel's, as its launcher sizes it
        # the fold beside the grid (sm_90+'s launch); elsewhere the launcher's block is wider
        # but each thread holds as many words (warps grow with the block)
        return heuristics.fold_config(int(ints["n_rows"]))["BLOCK"]
    return config[name]


def _dtype_source(o: Node, g: Graph) -> int | None:
    """The first input whose traced dtype a floating output had (the trace-only guess)."""
    for inp in g.inputs:
        if inp is not None and inp.dtype == o.dtype and o.dtype.is_floating_point:
            return inp.attrs["index"]
    return None


# ---------------------------------------------------------------------------------------------
def _out_dtypes(reference: Callable[..., Any], g: Graph, ex: Sequence[Any]
                ) -> tuple[dict[tuple[Any, ...], tuple[torch.dtype, ...]], list[tuple[Any, ...]]]:
    """(table, rules) for the launcher's output dtypes; see porter.codegen.dtypes."""
    table = {k: v for k, v in dtypes.probe(reference, ex).items() if len(v) == len(g.outputs)}
    traced = [o.dtype for o in g.outputs]
    return table, dtypes.rules(table, ex, traced, [_dtype_source(o, g) for o in g.outputs])


def _common_ctx(name: str, family: str, g: Graph, fusion: FusionReport, args: KernelArgs
                ) -> dict[str, Any]:
    specs = []
    for j, o in enumerate(g.outputs):
        shape = [sym_to_python(s, g.symbols) for s in o.shape]
        specs.append((shape, f"out_dtypes[{j}]"))
    table, rules = g.out_dtype_table, g.out_dtype_rules
    first = next(i for i, x in enumerate(g.inputs) if x is not None)
    op = {"name": name, "family": family, "fused_ops": list(fusion.ops) or ["(none)"],
          "n_args": len(g.inputs), "tuple_output": g.tuple_output, "first_tensor": first,
          "scalar_args": sorted((i, repr(v)) for i, v in g.scalar_args.items()),
          "out_specs": specs, "dtype_table": dtypes.table_source(table),
          "dtype_rules": dtypes.rules_source(rules),
          "resolve_source": inspect.getsource(dtypes.resolve_out_dtypes),
          "fastmath_source": fastmath.triton_source() if any(
              n.op == "pw" and n.attrs.get("fn") == "erf" for n in g.live()) else ""}
    return {"op": op, "kname": "_" + _safe(name), "params": args.declared(),
            "launch_exprs": args.launch_exprs}


def generate(reference: Callable[..., Any], example_inputs: Sequence[Any], *,
             name: str) -> GeneratedOp:
    """Trace `reference(*example_inputs)`, fuse it, classify its family and emit the sources.

    Args:
        reference: a plain function of tensors and python scalars (parameters already lifted to
            trailing inputs). Python scalars are baked into the kernel; the launcher rejects
            other values.
        example_inputs: one set of arguments; sizes are traced symbolically, so the module
            serves other shapes of the same rank and broadcasting structure.
        name: the op name (module and kernel names derive from it).

    Returns:
        The generated op.

    Raises:
        UnsupportedOpError: an op or pattern no template covers (names the aten op).
    """
    example_inputs = tuple(example_inputs)
    if not any(isinstance(x, torch.Tensor) for x in example_inputs):
        raise UnsupportedOpError("inputs", "the reference takes no tensor")
    g = trace(reference, example_inputs)
    g.out_dtype_table, g.out_dtype_rules = _out_dtypes(reference, g, example_inputs)
    family = classify(g)
    subs = {s: int(example_inputs[k].shape[d]) for s, (k, d) in g.symbols.items()}
    args = KernelArgs(g.symbols)
    if family == "matmul_epilogue":
        return _gen_matmul(name, g, example_inputs, args, subs)
    if family == "matmul_rowwise":
        return _gen_matmul_rowwise(name, g, example_inputs, subs)
    if family == "elementwise" and _flat_ok(g):
        return _gen_flat(name, g, example_inputs, args, subs)
    return _gen_rowwise(name, g, example_inputs, args, subs, family)


def _flat_ok(g: Graph) -> bool:
    out = g.outputs[0]
    for n in g.live():
        if n.op not in ("input", "scalar", "pw"):
            return False
        if n.op == "input" and n.shape != out.shape and any(s != 1 for s in n.shape):
            return False
    return all(o.shape == out.shape for o in g.outputs)


def _heuristics_source(*fns: Callable[..., Any]) -> str:
    return "\n\n".join([inspect.getsource(heuristics._next_pow2)] +
                       [inspect.getsource(f) for f in fns])


def _gen_flat(name: str, g: Graph, ex: tuple[Any, ...], args: KernelArgs,
              subs: dict[sympy.Symbol, int]) -> GeneratedOp:
    em = Emitter(g, args)
    em.flat = True
    coords = tuple(Coord("offs", True) for _ in g.outputs[0].shape)
    for j, o in enumerate(g.outputs):
        val = em.eval(o, coords)
        ptr = args.output_ptr(j)
        em.emit(f"tl.store({ptr} + offs, ({val}).to({ptr}.dtype.element_ty), mask=mask)")
    fusion = report(g, subs, 1, 0, "elementwise")
    ctx = _common_ctx(name, "elementwise", g, fusion, args)
    src = _ENV.get_template("triton_elementwise.py.j2").render(
        **ctx, body=em.lines, heuristics=_heuristics_source(heuristics.flat_default))
    kinfo = KernelInfo(ctx["kname"] + "_flat_kernel", (*args.params, "n_elements"),
                       (*args.kinds, "i64"), ("BLOCK",), ("flat",), tuple(args.launch_exprs))
    return GeneratedOp(name, "elementwise", g, ex, None, fusion, [kinfo], src)


def _gen_rowwise(name: str, g: Graph, ex: tuple[Any, ...], args: KernelArgs,
                 subs: dict[sympy.Symbol, int], family: str) -> GeneratedOp:
    plan = row_plan(g)
    bodies = rowwise.build(g, plan, args)
    n_rows, n_cols = rowwise.size_exprs(plan)
    n_rows_val = int(sympy.sympify(n_rows).subs(subs))
    n_kernels = 2 if bodies.post else 1
    fusion = report(g, subs, n_kernels, 4 * n_rows_val * len(plan.post) * 2, family)
    ctx = _common_ctx(name, family, g, fusion, args)
    last_dim = plan.dim == len(plan.space) - 1
    column = bodies.columns
    column_ctx = {"columns": column is not None, "fold_args": ", words, stamp" if bodies.post else ""}
    if column is not None:
        column_ctx.update(column_params=column.args.declared(),
                          column_launch_exprs=column.args.launch_exprs,
                          column_coord_lines=column.coord_lines, column_body=column.body,
                          n_inner=sym_to_python(column.n_inner, g.symbols))
    column_heuristics = (heuristics.columns_default, heuristics.columns_full_blocks) \
        if column is not None else ()
    src = _ENV.get_template("triton_rowwise.py.j2").render(**column_ctx,
        **ctx, single=bodies.single, single_hoisted=bodies.single_hoisted,
        persistent_pre=bodies.persistent_pre, persistent_body=bodies.persistent_body,
        two_block=bodies.two_block, one_round_variance=bodies.one_round_variance,
        looped=bodies.looped, post=bodies.post,
        row_coord_lines=bodies.row_coord_lines, post_count=len(plan.post),
        n_rows=sym_to_python(n_rows, g.symbols), n_cols=sym_to_python(n_cols, g.symbols),
        last_dim=last_dim, full_output="full" in plan.out_kind,
        looped_lanes=bool(bodies.online_pairs) or bodies.one_round_variance,
        thread_pairs=bool(bodies.online_pairs),
        lane_strategies=_lane_strategies(bodies, plan), **_long_row_ctx(bodies, plan),
        heuristics=_heuristics_source(heuristics.rowwise_default, heuristics._rowwise_tile,
                                      heuristics.fold_config,
                                      heuristics.rowwise_full_blocks, heuristics.looped_lanes,
                                      heuristics.looped_vec, heuristics.thread_lanes,
                                      *((heuristics.split_chunks,) if bodies.split else ()),
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
                   ("ROWS", "BLOCK_N", "EVEN", *var1, *thread, "HOIST", *pdl)
                   if bodies.single_hoisted
                   else ("ROWS", "BLOCK_N", "EVEN", *var1, *thread, *pdl), ("single_pass",),
                   tuple(args.launch_exprs)),
        KernelInfo(ctx["kname"] + "_looped_kernel", (*params, "n_cols"), (*kinds, "i32"),
                   ("ROWS", "BLOCK_N", "EVEN", *lanes, *pdl), ("looped",),
                   tuple(args.launch_exprs)),
        KernelInfo(ctx["kname"] + "_persistent_kernel", (*params, "n_cols"), (*kinds, "i32"),
                   ("ROWS", "BLOCK_N", "STAGES", "EVEN", *var1, *thread, *pdl), ("persistent",),
                   tuple(args.launch_exprs)),
        KernelInfo(ctx["kname"] + "_two_block_kernel", (*params, "n_cols"), (*kinds, "i32"),
                   ("ROWS", "BLOCK_N", "BLOCK_TAIL", "EVEN", *var1, *pdl), ("two_block",),
                   tuple(args.launch_exprs)),
    ]
    if column is not None:
        # its own arguments (the others' and its constexpr strides); n_inner's launch
        # expression types it (a multiple of 16 or not) in the compile check
        kernels.append(KernelInfo(
            ctx["kname"] + "_columns_kernel",
            (*column.args.params, "n_rows", "n_cols", "n_inner"),
            (*column.args.kinds, "i32", "i32", "i32"),
            ("BLOCK_I", "BLOCK_R", "EVEN", *var1, *pdl), ("columns",),
            (*column.args.launch_exprs, "", "", sym_to_python(column.n_inner, g.symbols))))
    kernels += _long_row_kernels(ctx["kname"], bodies, plan, params, kinds, lanes,
                                 tuple(args.launch_exprs))
    if bodies.post:
        kernels.append(KernelInfo(ctx["kname"] + "_post_kernel", params, kinds,
                                  ("BLOCK", "MAX_SPINS", "GRID_WAIT"), ("*",),
                                  tuple(args.launch_exprs)))
    op = GeneratedOp(name, family, g, ex, plan, fusion, kernels, src)
    op._mm = {"online": bodies.online_pairs, "last_dim": last_dim,
              "hoist": bodies.single_hoisted is not None,
              "one_round_variance": bodies.one_round_variance, "columns": column is not None,
              "looped_l2": _looped_l2(bodies, plan), "split_row": bodies.split is not None,
              "split_why_not": bodies.split_why_not}
    return op


def _lane_strategies(bodies: rowwise.RowBodies, plan: RowPlan) -> tuple[str, ...]:
    """Strategies whose kernel takes LANES: the looped kernel for an online softmax or a
    one-pass variance; the single pass and the persistent kernel for an online softmax's
    per-thread (max, sum) pairs (which take VEC too, `heuristics.thread_lanes`); the split
    row's partials kernel for an online softmax."""
    one_block = ("single_pass", "persistent") if bodies.online_pairs else ()
    looped = _looped_strategies(bodies, plan) if bodies.online_pairs or \
        bodies.one_round_variance else ()
    split = ("split_row",) if bodies.split and bodies.online_pairs else ()
    return looped + one_block + split


def _looped_l2(bodies: rowwise.RowBodies, plan: RowPlan) -> bool:
    """Whether the module has the L2-resident looped kernel: where the looped kernel reads each
    row twice (reductions, then full-row outputs) and has no fold (its early launch)."""
    return bool(plan.main) and "full" in plan.out_kind and not bodies.post


def _looped_strategies(bodies: rowwise.RowBodies, plan: RowPlan) -> tuple[str, ...]:
    """The strategies that run the looped body."""
    return ("looped", "looped_l2") if _looped_l2(bodies, plan) else ("looped",)


def _long_row_ctx(bodies: rowwise.RowBodies, plan: RowPlan) -> dict[str, Any]:
    """The template's context for the long-row kernels (`_triton_rowwise_long.py.j2`)."""
    l2 = _looped_l2(bodies, plan)
    return {"looped_l2": l2, "split": bodies.split}


def _long_row_kernels(kname: str, bodies: rowwise.RowBodies, plan: RowPlan,
                      params: tuple[str, ...], kinds: tuple[str, ...], lanes: tuple[str, ...],
                      launch: tuple[str, ...]) -> list[KernelInfo]:
    """The L2-resident looped kernel and the split row's two kernels, where the op has them."""
    out = []
    if _looped_l2(bodies, plan):
        out.append(KernelInfo(kname + "_looped_l2_kernel", (*params, "n_cols"), (*kinds, "i32"),
                              ("ROWS", "BLOCK_N", "EVEN", *lanes), ("looped_l2",), launch))
    if bodies.split is not None:
        ws = ("n_cols", "ws_ptr", "chunk_cols", "n_chunks")
        ws_kinds = ("i32", "ptr:ws", "i32", "i32")
        online = ("LANES",) if bodies.online_pairs else ()
        out.append(KernelInfo(kname + "_split_partials_kernel", (*params, *ws, "row0"),
                              (*kinds, *ws_kinds, "i32"), ("ROWS", "BLOCK_N", "EVEN", *online),
                              ("split_row",), launch))
        out.append(KernelInfo(kname + "_split_apply_kernel", (*params, *ws, "n_apply", "row0"),
                              (*kinds, *ws_kinds, "i32", "i32"),
                              ("ROWS", "BLOCK_N", "EVEN", "SPLIT"), ("split_row",), launch))
    return out


def _operand(n: Any, want: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    """Resolve a matmul operand to (input index, (row dim, col dim)) through free views."""
    if isinstance(n, Node) and n.op == "input" and n.rank == 2:
        return n.attrs["index"], want
    if isinstance(n, Node) and n.op == "permute" and n.rank == 2:
        perm = n.attrs["perm"]
        return _operand(n.args[0], (perm[want[0]], perm[want[1]]))
    raise UnsupportedOpError(getattr(n, "origin", "mm"),
                             "matmul operands must be 2-D inputs or their transposes")


def _gen_matmul(name: str, g: Graph, ex: tuple[Any, ...], args: KernelArgs,
                subs: dict[sympy.Symbol, int], tf32x3: bool = False) -> GeneratedOp:
    """The matmul_epilogue family. tf32x3: the tiled kernel also takes a TF32X3 constexpr (fp32
    operands as three tf32 products, `variants.tf32x3_offered`); always where the example
    operands are fp32, so a 16-bit module's source stays as it was."""
    mm = next(n for n in g.live() if n.op == "mm")
    ka, (am, ak) = _operand(mm.args[0], (0, 1))
    kb, (bk, bn) = _operand(mm.args[1], (0, 1))
    tf32x3 = tf32x3 or all(isinstance(ex[i], torch.Tensor) and ex[i].dtype == torch.float32
                           for i in (ka, kb))
    a_ptr, b_ptr = args.input_ptr(ka), args.input_ptr(kb)
    em = Emitter(g, args, full_mask="mask", row_mask="mask")
    coords = (Coord("offs_m", True), Coord("offs_n", True))
    em.fixed[mm.id] = (coords, "acc")
    for j, o in enumerate(g.outputs):
        if o.shape != mm.shape:
            raise UnsupportedOpError("output", "matmul outputs must have the matmul's shape")
        val = em.eval(o, coords)
        ptr = args.output_ptr(j)
        em.emit(f"tl.store({ptr} + offs_m * {args.output_stride(j, 0)} + offs_n * "
                f"{args.output_stride(j, 1, True)}, ({val}).to({ptr}.dtype.element_ty), mask=mask)")
    fusion = report(g, subs, 1, 0, "matmul_epilogue")
    ctx = _common_ctx(name, "matmul_epilogue", g, fusion, args)
    a_in, b_in = g.inputs[ka], g.inputs[kb]
    assert a_in is not None and b_in is not None
    mnk = {"M": a_in.shape[am], "N": b_in.shape[bn], "K": a_in.shape[ak]}
    src = _ENV.get_template("triton_matmul.py.j2").render(
        **ctx, body=em.lines, a_ptr=a_ptr, b_ptr=b_ptr,
        m=sym_to_python(mnk["M"], g.symbols), n=sym_to_python(mnk["N"], g.symbols),
        k=sym_to_python(mnk["K"], g.symbols),
        a_strides=[f"inputs[{ka}].stride({am})", f"inputs[{ka}].stride({ak})"],
        b_strides=[f"inputs[{kb}].stride({bk})", f"inputs[{kb}].stride({bn})"],
        a_index=ka, b_index=kb, a_dims=(am, ak), b_dims=(bk, bn), tf32x3=tf32x3,
        heuristics=_heuristics_source(heuristics.tma_transposed, heuristics.matmul_default,
                                      *((heuristics.acc_chunk,) if tf32x3 else ())))
    kinfo = KernelInfo(ctx["kname"] + "_matmul_kernel",
                       (*args.params, "M", "N", "K", "stride_am", "stride_ak", "stride_bk",
                        "stride_bn"),
                       (*args.kinds, "i32", "i32", "i32", f"cstride:in{ka}:{am}",
                        f"cstride:in{ka}:{ak}", f"cstride:in{kb}:{bk}", f"cstride:in{kb}:{bn}"),
                       ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "IEEE",
                        *(("TF32X3", "ACC_CHUNK") if tf32x3 else ()), "UPCAST"),
                       ("tiled",), tuple(args.launch_exprs))
    # The persistent TMA kernel: descriptors typed per config ("desc:"), and whether each
    # operand is described transposed decided from the actual strides ("ctma:", a constexpr).
    tma = KernelInfo(ctx["kname"] + "_matmul_tma_kernel",
                     (*args.params, "a_desc", "b_desc", "a_stride", "b_stride", "M", "N", "K",
                      "num_programs", "A_T", "B_T"),
                     (*args.kinds, f"desc:in{ka}:{am}:{ak}:BLOCK_M:BLOCK_K",
                      f"desc:in{kb}:{bk}:{bn}:BLOCK_K:BLOCK_N", f"rstride:in{ka}:{am}:{ak}",
                      f"rstride:in{kb}:{bk}:{bn}", "i32", "i32", "i32", "i32",
                      f"ctma:in{ka}:{am}:{ak}", f"ctma:in{kb}:{bk}:{bn}"),
                     ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "FLATTEN", "SUBTILE", "WS", "UPCAST"),
                     ("tma_persistent", "tma_ws"), tuple(args.launch_exprs))
    op = GeneratedOp(name, "matmul_epilogue", g, ex, None, fusion, [kinfo, tma], src)
    # operands as (input index, row dim, col dim): A is [M, K], B is [K, N]
    op._mm = {"mnk": mnk, "a": (ka, am, ak), "b": (kb, bk, bn)}
    return op



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


def _gen_matmul_rowwise(name: str, g: Graph, ex: tuple[Any, ...],
                        subs: dict[sympy.Symbol, int]) -> GeneratedOp:
    """The matmul_epilogue generator on each matmul stage, the rowwise one on the last stage,
    and the sources composed into one module (see porter.codegen.matmul_rowwise)."""
    cuts = matmul_rowwise.stages(g, lambda mm: _operand(mm.args[0], (0, 1))[0])
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
            op_i = _gen_rowwise(f"{name}_{tag}", graph, args_ex, KernelArgs(graph.symbols), subs,
                                "rowwise")
        else:
            op_i = _gen_matmul(f"{name}_{tag}", graph, args_ex, KernelArgs(graph.symbols), subs,
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
    ctx = _common_ctx(name, "matmul_rowwise", g, fusion, KernelArgs(g.symbols))
    summary = ("the matmul kernel, then the row-wise kernel(s) over its output" if len(cuts) == 1
               else f"{len(cuts)} matmul kernels (each reading the one before's output), then "
               "the row-wise kernel(s) over the last")
    src = _ENV.get_template("triton_matmul_rowwise.py.j2").render(
        **ctx, stages=stages, prefixes=repr(prefixes), summary=summary)
    op = MatmulRowwiseOp(name, "matmul_rowwise", g, ex, None, fusion,
                         [k for o in ops for k in o.kernels], src, stages=ops,
                         prefixes=prefixes, a_indices=tuple(c.a_index for c in cuts))
    op._mm = dict(ops[0]._mm)
    return op
