"""What fusion saved: bytes an op-by-op execution would move versus the fused kernels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy

from porter.codegen.ir import Graph
from porter.codegen.ir import Node

_NO_TRAFFIC = ("scalar",)


@dataclass(frozen=True)
class FusionReport:
    """ops: the aten ops fused; kernels: how many kernels run them; bytes at the traced shapes.

    bytes_unfused counts each traced op reading its tensor operands and writing its result
    through memory (views and index ops count as copies, as eager would mostly materialize
    them); bytes_fused counts the generated kernels: inputs read once, outputs written once,
    plus any per-row scratch of a two-stage reduction.
    """

    ops: tuple[str, ...]
    kernels: int
    bytes_unfused: int
    bytes_fused: int
    bytes_saved: int
    text: str


def _numel(shape: tuple[Any, ...], subs: dict[sympy.Symbol, int]) -> int:
    n = 1
    for s in shape:
        n *= int(sympy.sympify(s).subs(subs))
    return n


def report(g: Graph, subs: dict[sympy.Symbol, int], kernels: int, scratch_bytes: int,
           family: str) -> FusionReport:
    """Build the report for graph `g` at the concrete sizes `subs`."""
    live = [n for n in g.live() if n.op not in _NO_TRAFFIC]
    size = {n.id: _numel(n.shape, subs) * n.dtype.itemsize for n in live}
    unfused = 0
    computed = [n for n in live if n.op != "input"]
    for n in computed:
        unfused += size[n.id] + sum(size.get(a.id, 0) for a in n.inputs())
    used_inputs = {n.id for n in live if n.op == "input"}
    fused = sum(size[i] for i in used_inputs) + sum(size[o.id] for o in g.outputs)
    fused += scratch_bytes
    ops = tuple(dict.fromkeys(_origin(n) for n in computed))
    saved = max(unfused - fused, 0)
    text = (f"{len(computed)} traced ops ({', '.join(ops)}) fused into {kernels} "
            f"{family} kernel{'s' if kernels != 1 else ''}: {unfused} bytes op-by-op -> "
            f"{fused} bytes fused ({saved} saved, {unfused / max(fused, 1):.2f}x less traffic)")
    return FusionReport(ops, kernels, unfused, fused, saved, text)


def _origin(n: Node) -> str:
    o = n.origin or n.op
    return o.replace("aten.", "").split(".default")[0]
