"""The matmul_epilogue family: the tiled and persistent TMA matmul kernels with the fused
elementwise epilogue."""

from __future__ import annotations

from typing import Any

import sympy
import torch

from porter.codegen import heuristics
from porter.codegen.emit import ZERO
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


def _same(a: Any, b: Any) -> bool:
    return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


def _blocks(src: tuple[Any, ...], dst: tuple[Any, ...], what: str
            ) -> list[tuple[list[int], list[int]]]:
    """A reshape's dims matched in order: (source dims, destination dims) blocks of equal size,
    size-1 dims left out. Raises where the sizes do not line up (a reshape that mixes dims)."""
    a = [i for i, s in enumerate(src) if s != 1]
    b = [i for i, s in enumerate(dst) if s != 1]
    out: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        xs, ys = [a[i]], [b[j]]
        px, py = sympy.sympify(src[a[i]]), sympy.sympify(dst[b[j]])
        i, j = i + 1, j + 1
        while not _same(px, py):
            # grow the side whose product is the smaller: the destination where the source's
            # is a multiple of it (sizes are symbolic: a ratio without a denominator)
            if sympy.fraction(sympy.simplify(px / py))[1] == 1 and j < len(b):
                py *= dst[b[j]]
                ys.append(b[j])
                j += 1
            elif i < len(a):
                px *= src[a[i]]
                xs.append(a[i])
                i += 1
            else:
                break
        if not _same(px, py) or (len(xs) > 1 and len(ys) > 1):
            raise UnsupportedOpError(what, "a reshape that regroups dims of a matmul's operand "
                                     "or result is not covered")
        out.append((xs, ys))
    if i < len(a) or j < len(b):
        raise UnsupportedOpError(what, "a reshape of a matmul's operand or result that does "
                                 "not line up")
    return out


def resolve(n: Any) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """A matmul operand resolved through free views (permute, reshape, unsqueeze, squeeze,
    expand) to (input index, groups): per operand dim, the input dims it merges, outer first;
    () for a dim of size 1 or broadcast (stride 0). The launcher views the input so
    (`_operand` in triton_matmul.py.j2), which holds where each group's dims are mergeable."""
    if not isinstance(n, Node):
        raise UnsupportedOpError("mm", "a matmul operand that is not a tensor")
    if n.op == "input":
        return n.attrs["index"], tuple((d,) if s != 1 else () for d, s in enumerate(n.shape))
    if n.op not in ("permute", "reshape", "unsqueeze", "squeeze", "expand"):
        raise UnsupportedOpError(n.origin or n.op, "matmul operands must be inputs read "
                                 "through views (permute, reshape, expand)")
    x = n.args[0]
    k, groups = resolve(x)
    if n.op == "permute":
        return k, tuple(groups[p] for p in n.attrs["perm"])
    if n.op == "unsqueeze":
        d = n.attrs["dim"]
        return k, groups[:d] + ((),) + groups[d:]
    if n.op == "squeeze":
        return k, tuple(g for d, g in enumerate(groups) if d not in n.attrs["dims"])
    if n.op == "expand":
        off = n.rank - x.rank
        return k, tuple(() if d < off or x.shape[d - off] == 1 else groups[d - off]
                        for d in range(n.rank))
    out: list[tuple[int, ...]] = [()] * n.rank
    for xs, ys in _blocks(x.shape, n.shape, n.origin or "reshape"):
        if len(ys) > 1:
            raise UnsupportedOpError(n.origin or "reshape", "a matmul operand's dim split by "
                                     "a reshape is not covered")
        if len(xs) > 1 and any(not groups[i] for i in xs):
            raise UnsupportedOpError(n.origin or "reshape", "a broadcast dim merged into a "
                                     "matmul operand's rows is not covered")
        out[ys[0]] = tuple(d for i in xs for d in groups[i])
    return k, tuple(out)


def forward(n: Node, coords: tuple[Coord, ...], args: KernelArgs) -> tuple[Coord, ...]:
    """The coordinates of view `n` of a value known at `coords` (the matmul's result viewed
    back to the reference's shape): a merge adds its dims, a split divides (by constexprs)."""
    x = n.args[0]
    if n.op == "permute":
        return tuple(coords[p] for p in n.attrs["perm"])
    if n.op == "unsqueeze":
        d = n.attrs["dim"]
        return coords[:d] + (ZERO,) + coords[d:]
    if n.op == "squeeze":
        return tuple(c for d, c in enumerate(coords) if d not in n.attrs["dims"])
    out = [ZERO] * n.rank
    for xs, ys in _blocks(x.shape, n.shape, n.origin or "reshape"):
        if len(xs) == 1 and len(ys) == 1:
            out[ys[0]] = coords[xs[0]]
        elif len(ys) == 1:
            terms = [f"{coords[i].expr} * {args.size(sympy.Mul(*[x.shape[j] for j in xs[p + 1:]]))}"
                     for p, i in enumerate(xs) if coords[i].expr != "0"]
            out[ys[0]] = Coord("(" + " + ".join(terms or ["0"]) + ")", True)
        else:
            c = coords[xs[0]].expr
            for p, y in enumerate(ys):
                inner = sympy.Mul(*[n.shape[j] for j in ys[p + 1:]])
                e = c if inner == 1 else f"({c} // {args.divisor(inner)})"
                if p > 0:
                    e = f"({e} % {args.divisor(n.shape[y])})"
                out[y] = Coord(e, True)
    return tuple(out)


def frames(g: Graph, mm: Node, base: tuple[Coord, ...], args: KernelArgs
           ) -> dict[int, tuple[Coord, ...]]:
    """The matmul's result and its views (reshape, permute, squeeze, unsqueeze), each with the
    coordinates at which it is the accumulator."""
    out = {mm.id: base}
    for n in g.live():
        if n.op in ("permute", "reshape", "unsqueeze", "squeeze") and \
                isinstance(n.args[0], Node) and n.args[0].id in out:
            out[n.id] = forward(n, out[n.args[0].id], args)
    return out


def _ancestors(n: Node) -> list[Node]:
    seen: dict[int, Node] = {}
    stack = [n]
    while stack:
        x = stack.pop()
        if x.id not in seen:
            seen[x.id] = x
            stack.extend(x.inputs())
    return list(seen.values())


def _operands(mm: Node, g: Graph) -> tuple[dict[str, Any], bool]:
    """(operands, batched): per operand "a"/"b" its input index, the (row, col) dims the
    kernel reads and, where the launcher views the input first (`_operand` in the template),
    "groups" and "full" (the viewed shape). A 2-D input or its transpose is read as it is;
    otherwise the input is viewed as [rows, cols] ([batch, rows, cols] for a batched matmul),
    each dim merging the input dims of its group (KernelBench's 3-D and 4-D @ 2-D: the
    leading dims flattened into M)."""
    if mm.rank not in (2, 3):
        raise UnsupportedOpError(mm.origin or "mm", f"a {mm.rank}-D matmul is not covered")
    lead = mm.rank - 2
    batched = lead == 1 and mm.shape[0] != 1
    found = {key: resolve(x) for key, x in zip("ab", mm.args, strict=True)}
    if all(mm.rank == 2 and g.inputs[k] is not None and g.inputs[k].rank == 2 and
           all(len(d) == 1 for d in groups) for k, groups in found.values()):
        return {key: {"index": k, "dims": (groups[0][0], groups[1][0])}
                for key, (k, groups) in found.items()}, False
    if found["a"][0] == found["b"][0]:
        raise UnsupportedOpError(mm.origin or "mm", "one input as both operands of a "
                                 "reshaped or batched matmul is not covered")
    keep = 0 if batched else lead  # a batch of 1 (einsum's bmm) is dropped: a 2-D matmul
    out = {}
    for key, x in zip("ab", mm.args, strict=True):
        k, groups = found[key]
        out[key] = {"index": k, "dims": (1, 2) if batched else (0, 1),
                    "groups": groups[keep:], "full": tuple(x.shape[keep:])}
    return out, batched


def gen_matmul(name: str, g: Graph, ex: tuple[Any, ...], args: KernelArgs,
                subs: dict[sympy.Symbol, int], tf32x3: bool = False) -> GeneratedOp:
    """The matmul_epilogue family. tf32x3: the tiled kernel also takes a TF32X3 constexpr (fp32
    operands as three tf32 products, `variants.tf32x3_offered`); always where the example
    operands are fp32, so a 16-bit module's source stays as it was.

    A batched matmul (bmm, or matmul broadcast over a batch) runs the same tiles with the
    batch along grid axis 2 (split-K, PAD_K, B's K-major copy and TMA are 2-D only: a batched
    op runs the tiled kernel without them)."""
    mm = next(n for n in g.live() if n.op == "mm")
    opnds, batched = _operands(mm, g)
    ka, (am, ak) = opnds["a"]["index"], opnds["a"]["dims"]
    kb, (bk, bn) = opnds["b"]["index"], opnds["b"]["dims"]
    viewed = "groups" in opnds["a"]
    tf32x3 = tf32x3 or all(isinstance(ex[i], torch.Tensor) and ex[i].dtype == torch.float32
                           for i in (ka, kb))
    a_ptr, b_ptr = args.input_ptr(ka), args.input_ptr(kb)
    em = Emitter(g, args, full_mask="mask", row_mask="mask")
    coords = (Coord("offs_m", True), Coord("offs_n", True))
    if mm.rank == 3:
        coords = (Coord("pid_b") if batched else ZERO,) + coords
    views = frames(g, mm, coords, args)
    for i, c in views.items():
        em.fixed[i] = (c, "acc")
    for j, o in enumerate(g.outputs):
        at = views.get(o.id) or next(
            (views[x.id] for x in sorted(_ancestors(o), key=lambda x: -x.id)
             if x.id in views and len(x.shape) == o.rank and all(
                 _same(p, q) for p, q in zip(x.shape, o.shape, strict=True))), None)
        if at is None:
            raise UnsupportedOpError("output", "matmul outputs must have the matmul's shape "
                                     "(or a view of it)")
        val = em.eval(o, at)
        ptr = args.output_ptr(j)
        terms = [f"{c.expr} * {args.output_stride(j, d, d == o.rank - 1)}"
                 for d, (c, size) in enumerate(zip(at, o.shape, strict=True))
                 if size != 1 and c.expr != "0"]
        em.emit(f"tl.store({ptr} + {' + '.join(terms) or '0'}, "
                f"({val}).to({ptr}.dtype.element_ty), mask=mask)")
    if viewed and any(p.startswith((f"in{k}_s", f"in{k}_cs", f"in{k}_flat"))
                      for p in args.params for k in (ka, kb)):
        raise UnsupportedOpError(mm.origin or "mm", "an epilogue that reads a matmul operand "
                                 "the matmul reads through a reshape is not covered")
    # the matmul operands' pointers (and a plain operand's strides) come from `ops`: the
    # launcher's views of them, or PAD_K's / B_KMAJOR's copies
    launch_exprs = []
    for e in args.launch_exprs:
        for k in (ka, kb):
            if e == f"inputs[{k}]" or e.startswith(f"inputs[{k}].stride("):
                e = "ops" + e[len("inputs"):]
        launch_exprs.append(e)
    fusion = report(g, subs, 1, 0, "matmul_epilogue")
    ctx = common_ctx(name, "matmul_epilogue", g, fusion, args)
    if viewed:
        mnk = {"M": mm.shape[-2], "N": mm.shape[-1], "K": mm.args[0].shape[-1]}
    else:
        a_in, b_in = g.inputs[ka], g.inputs[kb]
        assert a_in is not None and b_in is not None
        mnk = {"M": a_in.shape[am], "N": b_in.shape[bn], "K": a_in.shape[ak]}
    py = {key: sym_to_python(v, g.symbols) for key, v in mnk.items()}
    # the launcher's views of the operands (`_operand`): groups and the viewed shape
    operand_views = [(o["index"], o["groups"], [sym_to_python(s, g.symbols) for s in o["full"]],
                      f"operand {key.upper()} (input {o['index']})")
                     for key, o in opnds.items() if viewed]
    src = ENV.get_template("triton_matmul.py.j2").render(
        **{**ctx, "launch_exprs": launch_exprs}, body=em.lines, a_ptr=a_ptr, b_ptr=b_ptr,
        m=py["M"], n=py["N"], k=py["K"], batched=batched,
        batch=sym_to_python(mm.shape[0], g.symbols) if batched else "1",
        operand_views=operand_views,
        a_strides=[f"ops[{ka}].stride({am})", f"ops[{ka}].stride({ak})"],
        b_strides=[f"ops[{kb}].stride({bk})", f"ops[{kb}].stride({bn})"],
        a_index=ka, b_index=kb, a_dims=(am, ak), b_dims=(bk, bn), tf32x3=tf32x3,
        heuristics=heuristics_source(
            heuristics.tma_transposed, heuristics.matmul_default, heuristics.split_k,
            heuristics.split_k_range,
            *((heuristics.acc_chunk, heuristics.b_kmajor_copy, heuristics.swap_ab,
               heuristics.pad_k) if tf32x3 else ())))
    # k_per, ws and stride_ws: split-K's K range per program, fp32 partials and their plane
    # (`GeneratedOp._tiled_launch` gives their values, as the launcher computes them)
    kinfo = KernelInfo(ctx["kname"] + "_matmul_kernel",
                       (*args.params, "M", "N", "K", "k_per", "ws", "stride_ws",
                        *(("stride_ab", "stride_bb") if batched else ()), "stride_am",
                        "stride_ak", "stride_bk", "stride_bn"),
                       (*args.kinds, "i32", "i32", "i32", "i32", "ptr:ws", "i32",
                        *(("i32", "i32") if batched else ()), f"cstride:in{ka}:{am}",
                        f"cstride:in{ka}:{ak}", f"cstride:in{kb}:{bk}", f"cstride:in{kb}:{bn}"),
                       ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "IEEE",
                        *(("TF32X3", "ACC_CHUNK", "SWAP_AB", "EVEN_K") if tf32x3 else ()),
                        "PARTIAL", "UPCAST"),
                       ("tiled",), tuple(launch_exprs))
    # split-K's second pass: the splits' sum and the epilogue (launched where a tiled config
    # splits K: `when`)
    reduce = KernelInfo(ctx["kname"] + "_splitk_reduce_kernel",
                        (*args.params, "ws", "M", "N", "splits", "stride_ws"),
                        (*args.kinds, "ptr:ws", "i32", "i32", "i32", "i32"),
                        ("REDUCE_M", "REDUCE_N"), ("tiled",), tuple(launch_exprs),
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
                     ("tma_persistent", "tma_ws"), tuple(launch_exprs))
    op = GeneratedOp(name, "matmul_epilogue", g, ex, None, fusion, [kinfo, reduce, tma], src)
    # operands as (input index, row dim, col dim): A is [M, K], B is [K, N]
    op._mm = {"mnk": mnk, "a": (ka, am, ak), "b": (kb, bk, bn)}
    if viewed:
        # the inputs viewed as the kernel reads them (`GeneratedOp.mm_operands`)
        op._mm["views"] = {key: (o["index"], o["groups"], o["full"]) for key, o in opnds.items()}
    if batched:
        op._mm["batch"] = mm.shape[0]
    return op
