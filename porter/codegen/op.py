"""`GeneratedOp`: the product of `generate` — sources, configs, variants, fusion report."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import ClassVar

import sympy
import torch

from porter.codegen import dtypes
from porter.codegen import heuristics
from porter.codegen import rowwise
from porter.codegen import variants
from porter.codegen.fusion import FusionReport
from porter.codegen.ir import Graph
from porter.codegen.plan import RowPlan
from porter.codegen.spellings import TRITON_DTYPE
from porter.codegen.templates import TEMPLATES  # noqa: F401 - importable from here as before

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from targets.base import KernelRef

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KernelInfo:
    """One @triton.jit kernel of the module, and how to build its cross-compile signature.

    params: runtime parameter names in order; kinds: "ptr:in<k>"/"ptr:out<j>", "ptr:words" and
    "stamp" (a fold's words and the call's stamp), "ptr:ws" and "ptr:cnt" (a split row's fp32
    workspace, split_coop's int32 counters), "i64", "i32", "cstride:<in k|out j>:<dim>"
    (a unit-stride constexpr), "cflat:<in k|out j>" (a constexpr: whether it is contiguous),
    "cdiv" (a constexpr size that index math divides by), and for the TMA matmul
    "desc:in<k>:<row dim>:<col dim>:<block constexpr>:<block constexpr>" (a tensor descriptor;
    for tma_ws the operand's pointer), "rstride:in<k>:<row dim>:<col dim>" (the row stride of
    its TMA view) and "ctma:in<k>:<row dim>:<col dim>" (whether it is described transposed);
    constexprs: the constexpr parameter names, filled from a config; align: the parameters
    whose values the kernel's ALIGN divides, its length first (`heuristics.rowwise_align`);
    when: "split_k" for a kernel launched only where a tiled matmul config splits K (the
    split-K reduce kernel), else "" (whenever its strategy runs); shift: the launcher
    expressions of the tensors whose rows the looped kernel's SHIFT body addresses
    (`heuristics.row_shift`).
    """

    name: str
    params: tuple[str, ...]
    kinds: tuple[str, ...]
    constexprs: tuple[str, ...]
    strategies: tuple[str, ...]  # configs whose "strategy" runs this kernel
    launch: tuple[str, ...] = ()  # launcher expression per runtime param (to type int hints)
    align: tuple[str, ...] = ()
    when: str = ""
    shift: tuple[str, ...] = ()


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
            sizes = {k: int(sympy.sympify(v).subs(subs)) for k, v in self._mm["mnk"].items()}
            if "batch" in self._mm:  # a batched matmul: B programs' worth of each tile
                sizes["B"] = int(sympy.sympify(self._mm["batch"]).subs(subs))
            return sizes
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

    def mm_operands(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        """`inputs` with the matmul's operands as its kernels read them: the launcher's views
        (`_operand` in triton_matmul.py.j2) where an operand is not a 2-D input or its
        transpose (leading dims merged into M, a batch), else as they are.

        Raises:
            ValueError: an operand's merged dims are not contiguous with each other (the
                launcher raises so too).
        """
        views = self._mm.get("views")
        if not views:
            return tuple(inputs)
        subs = self._subs(inputs)
        ops = list(inputs)
        for k, groups, full in views.values():
            ops[k] = _operand_view(inputs[k], groups,
                                   [int(sympy.sympify(s).subs(subs)) for s in full])
        return tuple(ops)

    def tma_layout_ok(self, inputs: Sequence[Any], elem_bytes: int) -> bool:
        """Whether a TMA descriptor can describe both matmul operands of `inputs` (one unit
        stride, the other a multiple of 16 bytes) at an element size of `elem_bytes`; never
        for a batched matmul (its tiled kernel's grid axis 2)."""
        if self.family != "matmul_epilogue" or "a" not in self._mm or "batch" in self._mm:
            return False
        try:
            inputs = self.mm_operands(inputs)
        except ValueError:
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

    def _tiled_launch(self, inputs: Sequence[Any], config: dict[str, Any],
                      sms: int | None = None) -> tuple[Sequence[Any], dict[str, Any]]:
        """(operands, knobs): `inputs` as the tiled matmul kernel receives them, and the values
        the template's launcher derives for it, in its order: PAD_K's zero-padded K-contiguous
        copies of A and B (`heuristics.pad_k`, K rounded up to BLOCK_K), SWAP_AB
        (`heuristics.swap_ab`, not where the config asks for B_KMAJOR), B's K-contiguous copy
        (`heuristics.b_kmajor_copy`; not where swapped), then split-K (`heuristics.split_k`
        with `sms`, REFERENCE_DEVICE's where None: k_per, splits, PARTIAL) and ACC_CHUNK over
        one split's K range. The kernel is compiled for the operands' strides."""
        if self.family != "matmul_epilogue" or "b" not in self._mm or "BLOCK_K" not in config:
            return inputs, {}
        (ka, am, ak), (kb, bk, bn) = self._mm["a"], self._mm["b"]
        sizes = self.problem_sizes(inputs)
        m, n, k = sizes["M"], sizes["N"], sizes["K"]
        batched = "B" in sizes  # no PAD_K, B_KMAJOR or split-K (2-D only)
        inputs = self.mm_operands(inputs)
        a, b = inputs[ka], inputs[kb]
        block_k = int(config["BLOCK_K"])
        # the knobs of a module whose tiled kernel takes TF32X3 (fp32 examples), for a tf32x3 run
        knobbed = any("TF32X3" in ki.constexprs for ki in self.kernels)
        tf32x3 = bool(config.get("tf32x3")) and not config.get("ieee", b.dtype == torch.float32)
        padded = swap = False
        pad = knobbed and not batched and ka != kb and m and n and k and config.get(
            "PAD_K", tf32x3 and heuristics.pad_k(m, n, k, (a.stride(am), a.stride(ak)),
                                                 (b.stride(bk), b.stride(bn))))
        if pad:
            k, padded = -(-k // block_k) * block_k, True
            a, b = _kmajor_meta(a, am, ak, m, k), _kmajor_meta(b, bn, bk, n, k)
        if knobbed:
            swap = bool(config.get("SWAP_AB", tf32x3 and not config.get("B_KMAJOR", False)
                                   and heuristics.swap_ab(0 if batched else m, a.stride(ak),
                                                          b.stride(bk))))
            if tf32x3 and not swap and not batched and b.stride(bk) != 1 and b.numel() and \
                    config.get("B_KMAJOR", heuristics.b_kmajor_copy(m, b.stride(bk))):
                b = _kmajor_meta(b, bn, bk, n, k)
        split = 1 if batched else config.get("SPLIT_K")
        if split is None:
            if sms is None:
                sms = int(variants._reference().compute_units.value)
            split = heuristics.split_k(m, n, k, int(config["BLOCK_M"]), int(config["BLOCK_N"]),
                                       block_k, sms)
        k_per, splits = heuristics.split_k_range(k, int(split), block_k)
        first = next(x for x in inputs if isinstance(x, torch.Tensor))
        knobs = {"K": k, "k_per": k_per, "splits": splits, "stride_ws": m * n,
                 "PARTIAL": splits > 1, "SWAP_AB": swap,
                 "EVEN_K": padded or (bool(config.get("EVEN_K", False)) and k % block_k == 0),
                 "ACC_CHUNK": int(config.get("ACC_CHUNK", heuristics.acc_chunk(
                     min(k, k_per), block_k, first.element_size()))),
                 "REDUCE_M": int(config.get("REDUCE_M", 64)),
                 "REDUCE_N": int(config.get("REDUCE_N", 64))}
        if batched:
            knobs.update(stride_ab=int(a.stride(0)), stride_bb=int(b.stride(0)))
        ops = list(inputs)
        ops[ka], ops[kb] = a, b  # where A is B (ka == kb), B's copy serves both
        return tuple(ops), knobs

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
                if kind in ("i32", "i64", "cdiv") and expr:
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
        # sizes and the epilogue's arguments from the inputs; the matmul's operands as the
        # launcher passes them (its views, PAD_K's and B_KMAJOR's copies)
        specs = self.output_spec(inputs)
        ints = self._int_args(inputs, specs)
        inputs, knobs = self._tiled_launch(inputs, config)
        ints.update({p: v for p, v in knobs.items()
                     if p in ("K", "k_per", "splits", "stride_ws", "stride_ab", "stride_bb")})
        if "SPLIT" in config and "n_cols" in ints:
            # the split kernels' chunking, as their launchers compute it: a chunk_cols that is
            # a multiple of 16 is specialized so by the JIT (16-byte loads), and must be here
            ints["chunk_cols"], ints["n_chunks"] = heuristics.split_chunks(
                int(ints["n_cols"]), config["SPLIT"], config["BLOCK_N"])
        out: list[KernelRef] = []
        for k in self.kernels:
            if config.get("strategy") not in k.strategies and "*" not in k.strategies:
                continue
            if k.when == "split_k" and not knobs.get("PARTIAL"):
                continue
            sig: dict[str, str] = {}
            aligned = [int(ints[p]) for p in k.align]
            if k.shift:  # as the launcher sets it (outputs contiguous)
                outs = [torch.empty(s, dtype=d, device="meta") for s, d in specs]
                knobs["SHIFT"] = heuristics.row_shift(
                    config.get("ROWS", 1), heuristics.rowwise_align(aligned[0], aligned[1:]),
                    [_eval_launch(e, inputs, outs) for e in k.shift])
            consts = {c: knobs[c] if c in knobs else _const_value(
                c, config, inputs, ints, self._mm.get("last_dim", True), aligned)
                for c in k.constexprs}
            for p, kind in zip(k.params, k.kinds, strict=True):
                if kind.startswith("cstride:"):
                    _, who, d = kind.split(":")
                    if who.startswith("in"):
                        consts[p] = int(inputs[int(who[2:])].stride(int(d)))
                    else:
                        shape = specs[int(who[3:])][0]
                        consts[p] = int(math.prod(shape[int(d) + 1:]))
                elif kind == "cdiv":  # a size index math divides by
                    consts[p] = int(ints[p])
                elif kind.startswith("cflat:"):  # outputs are allocated contiguous
                    who = kind.split(":")[1]
                    consts[p] = (bool(inputs[int(who[2:])].is_contiguous())
                                 if who.startswith("in") else True)
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
                elif kind == "ptr:cnt":  # split_coop's per-row counters
                    sig[p] = "*i32"
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


def _kmajor_meta(t: Any, dim_n: int, dim_k: int, n: int, k_pad: int) -> torch.Tensor:
    """The launcher's K-contiguous copy of operand `t` (`_kmajor` in the matmul template):
    dim_n of n, dim_k of k_pad elements at stride 1, as a meta tensor."""
    shape, strides = [0, 0], [0, 0]
    shape[dim_n], shape[dim_k] = n, k_pad
    strides[dim_n], strides[dim_k] = k_pad, 1
    return torch.empty_strided(tuple(shape), tuple(strides), dtype=t.dtype, device="meta")


def _eval_launch(expr: str, inputs: Sequence[Any], outs: list[torch.Tensor]) -> Any:
    # ops: the matmul launcher's operands (its views or copies of inputs; their strides
    # appear only where they are the inputs' own dims)
    return eval(expr, {"inputs": inputs, "ops": inputs, "outs": outs,  # noqa: S307 - our text
                       "tmps": []})


def _operand_view(t: Any, groups: Sequence[Sequence[int]], full: Sequence[int]) -> Any:
    """The matmul launcher's view of operand `t` (`_operand` in triton_matmul.py.j2): dim i
    merges t's dims groups[i], outer first, expanded to `full` where a dim is broadcast.

    Raises:
        ValueError: the merged dims are not contiguous with each other.
    """
    used = [d for g in groups for d in g]
    perm = [d for d in range(t.dim()) if d not in used] + used
    shape = [math.prod(t.shape[d] for d in g) for g in groups]
    try:
        v = t.permute(perm).view(shape)
    except RuntimeError as exc:
        raise ValueError(f"a matmul operand of shape {tuple(t.shape)} and strides "
                         f"{tuple(t.stride())} cannot be read as a {len(groups)}-D matrix "
                         "without a copy") from exc
    return v.expand(list(full)) if shape != list(full) else v


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
                 ints: dict[str, int], last_dim: bool = True,
                 aligned: Sequence[int] = ()) -> Any:
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
    if name == "PHASE":  # split_coop's one launch on a GPU (1 and 2: the interpreter's two)
        return 0
    if name == "SPLIT":  # the split row's partials per row, as its launcher sizes them
        _, chunks = heuristics.split_chunks(int(ints["n_cols"]), config["SPLIT"],
                                            config["BLOCK_N"])
        return heuristics._next_pow2(chunks)
    if name == "EVEN":  # as the rowwise launcher sets it
        return heuristics.rowwise_full_blocks(config["strategy"], int(ints["n_rows"]),
                                              int(ints["n_cols"]), config)
    if name == "ALIGN":  # as the rowwise launcher sets it, from the length and the strides
        return heuristics.rowwise_align(aligned[0], aligned[1:])
    if name in ("LANES", "VEC"):  # as the rowwise launcher sets them
        first = next(x for x in inputs if isinstance(x, torch.Tensor))
        lanes = config.get("LANES") or heuristics.looped_lanes(
            config["BLOCK_N"], config["num_warps"], first.element_size())
        vec = heuristics.looped_vec(lanes, first.element_size())
        if config["strategy"] in ("single_pass", "persistent", "split_coop"):
            lanes, vec = heuristics.thread_lanes(
                lanes, first.element_size(), last_dim,
                heuristics.rowwise_align(aligned[0], aligned[1:]), first.data_ptr())
        return lanes if name == "LANES" else vec
    if name == "UPCAST":
        return False  # only the CPU interpreter upcasts
    if name == "BLOCK" and "BLOCK" not in config:  # the post kernel's, as its launcher sizes it
        # the fold beside the grid (sm_90+'s launch); elsewhere the launcher's block is wider
        # but each thread holds as many words (warps grow with the block)
        return heuristics.fold_config(int(ints["n_rows"]))["BLOCK"]
    return config[name]
