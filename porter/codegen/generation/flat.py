"""The elementwise family as one flat kernel over the output's elements."""

from __future__ import annotations

from typing import Any

import sympy

from porter.codegen import heuristics
from porter.codegen.emit import Coord
from porter.codegen.emit import Emitter
from porter.codegen.fusion import report
from porter.codegen.generation.common import common_ctx
from porter.codegen.generation.common import heuristics_source
from porter.codegen.ir import Graph
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.op import GeneratedOp
from porter.codegen.op import KernelInfo
from porter.codegen.templates import ENV


def flat_ok(g: Graph) -> bool:
    out = g.outputs[0]
    for n in g.live():
        if n.op not in ("input", "scalar", "pw"):
            return False
        if n.op == "input" and n.shape != out.shape and any(s != 1 for s in n.shape):
            return False
    return all(o.shape == out.shape for o in g.outputs)


def gen_flat(name: str, g: Graph, ex: tuple[Any, ...], args: KernelArgs,
              subs: dict[sympy.Symbol, int]) -> GeneratedOp:
    em = Emitter(g, args)
    em.flat = True
    coords = tuple(Coord("offs", True) for _ in g.outputs[0].shape)
    for j, o in enumerate(g.outputs):
        val = em.eval(o, coords)
        ptr = args.output_ptr(j)
        em.emit(f"tl.store({ptr} + offs, ({val}).to({ptr}.dtype.element_ty), mask=mask)")
    fusion = report(g, subs, 1, 0, "elementwise")
    ctx = common_ctx(name, "elementwise", g, fusion, args)
    src = ENV.get_template("triton_elementwise.py.j2").render(
        **ctx, body=em.lines, heuristics=heuristics_source(heuristics.flat_default))
    kinfo = KernelInfo(ctx["kname"] + "_flat_kernel", (*args.params, "n_elements"),
                       (*args.kinds, "i64"), ("BLOCK",), ("flat",), tuple(args.launch_exprs))
    return GeneratedOp(name, "elementwise", g, ex, None, fusion, [kinfo], src)
