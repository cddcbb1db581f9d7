"""The matmul_epilogue family: the tiled and persistent TMA matmul kernels with the fused
elementwise epilogue."""

from __future__ import annotations

from typing import Any

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
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.kernel_args import sym_to_python
from porter.codegen.op import GeneratedOp
from porter.codegen.op import KernelInfo
from porter.codegen.templates import ENV


def operand(n: Any, want: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    """Resolve a matmul operand to (input index, (row dim, col dim)) through free views."""
    if isinstance(n, Node) and n.op == "input" and n.rank == 2:
        return n.attrs["index"], want
    if isinstance(n, Node) and n.op == "permute" and n.rank == 2:
        perm = n.attrs["perm"]
        return operand(n.args[0], (perm[want[0]], perm[want[1]]))
    raise UnsupportedOpError(getattr(n, "origin", "mm"),
                             "matmul operands must be 2-D inputs or their transposes")


def gen_matmul(name: str, g: Graph, ex: tuple[Any, ...], args: KernelArgs,
                subs: dict[sympy.Symbol, int], tf32x3: bool = False) -> GeneratedOp:
    """The matmul_epilogue family. tf32x3: the tiled kernel also takes a TF32X3 constexpr (fp32
    operands as three tf32 products, `variants.tf32x3_offered`); always where the example
    operands are fp32, so a 16-bit module's source stays as it was."""
    mm = next(n for n in g.live() if n.op == "mm")
    ka, (am, ak) = operand(mm.args[0], (0, 1))
    kb, (bk, bn) = operand(mm.args[1], (0, 1))
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
    ctx = common_ctx(name, "matmul_epilogue", g, fusion, args)
    a_in, b_in = g.inputs[ka], g.inputs[kb]
    assert a_in is not None and b_in is not None
    mnk = {"M": a_in.shape[am], "N": b_in.shape[bn], "K": a_in.shape[ak]}
    src = ENV.get_template("triton_matmul.py.j2").render(
        **ctx, body=em.lines, a_ptr=a_ptr, b_ptr=b_ptr,
        m=sym_to_python(mnk["M"], g.symbols), n=sym_to_python(mnk["N"], g.symbols),
        k=sym_to_python(mnk["K"], g.symbols),
        a_strides=[f"inputs[{ka}].stride({am})", f"inputs[{ka}].stride({ak})"],
        b_strides=[f"inputs[{kb}].stride({bk})", f"inputs[{kb}].stride({bn})"],
        a_index=ka, b_index=kb, a_dims=(am, ak), b_dims=(bk, bn), tf32x3=tf32x3,
        heuristics=heuristics_source(
            heuristics.tma_transposed, heuristics.matmul_default, heuristics.split_k,
            heuristics.split_k_range,
            *((heuristics.acc_chunk, heuristics.b_kmajor_copy, heuristics.swap_ab,
               heuristics.pad_k) if tf32x3 else ())))
    # k_per, ws and stride_ws: split-K's K range per program, fp32 partials and their plane
    # (`GeneratedOp._tiled_launch` gives their values, as the launcher computes them)
    kinfo = KernelInfo(ctx["kname"] + "_matmul_kernel",
                       (*args.params, "M", "N", "K", "k_per", "ws", "stride_ws", "stride_am",
                        "stride_ak", "stride_bk", "stride_bn"),
                       (*args.kinds, "i32", "i32", "i32", "i32", "ptr:ws", "i32",
                        f"cstride:in{ka}:{am}", f"cstride:in{ka}:{ak}", f"cstride:in{kb}:{bk}",
                        f"cstride:in{kb}:{bn}"),
                       ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "IEEE",
                        *(("TF32X3", "ACC_CHUNK", "SWAP_AB", "EVEN_K") if tf32x3 else ()),
                        "PARTIAL", "UPCAST"),
                       ("tiled",), tuple(args.launch_exprs))
    # split-K's second pass: the splits' sum and the epilogue (launched where a tiled config
    # splits K: `when`)
    reduce = KernelInfo(ctx["kname"] + "_splitk_reduce_kernel",
                        (*args.params, "ws", "M", "N", "splits", "stride_ws"),
                        (*args.kinds, "ptr:ws", "i32", "i32", "i32", "i32"),
                        ("REDUCE_M", "REDUCE_N"), ("tiled",), tuple(args.launch_exprs),
                        when="split_k")
    # The persistent TMA kernel: descriptors typed per config ("desc:"), and whether each
    # operand is described transposed decided from the actual strides ("ctma:", a constexpr).
    tma = KernelInfo(ctx["kname"] + "_matmul_tma_kernel",
                     (*args.params, "a_desc", "b_desc", "a_stride", "b_stride", "M", "N", "K",
                      "num_programs", "A_T", "B_T"),
                     (*args.kinds, f"desc:in{ka}:{am}:{ak}:BLOCK_M:BLOCK_K",
                      f"desc:in{kb}:{bk}:{bn}:BLOCK_K:BLOCK_N", f"rstride:in{ka}:{am}:{ak}",
                      f"rstride:in{kb}:{bk}:{bn}", "i32", "i32", "i32", "i32",
                      f"ctma:in{ka}:{am}:{ak}", f"ctma:in{kb}:{bk}:{bn}"),
                     ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "FLATTEN", "SUBTILE", "WS",
                      "UPCAST"),
                     ("tma_persistent", "tma_ws"), tuple(args.launch_exprs))
    op = GeneratedOp(name, "matmul_epilogue", g, ex, None, fusion, [kinfo, reduce, tma], src)
    # operands as (input index, row dim, col dim): A is [M, K], B is [K, N]
    op._mm = {"mnk": mnk, "a": (ka, am, ak), "b": (kb, bk, bn)}
    return op
