"""`generate`: trace a reference, classify its family and run that family's generator
(one module per family beside this one)."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import torch

from porter.codegen import dtypes
from porter.codegen.errors import UnsupportedOpError
from porter.codegen.generation.flat import flat_ok
from porter.codegen.generation.flat import gen_flat
from porter.codegen.generation.matmul import gen_matmul
from porter.codegen.generation.matmul_rowwise import gen_matmul_rowwise
from porter.codegen.generation.rowwise import gen_rowwise
from porter.codegen.generation.scan import gen_scan
from porter.codegen.ir import Graph
from porter.codegen.ir import Node
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.op import GeneratedOp
from porter.codegen.plan import classify
from porter.codegen.trace import trace


def _dtype_source(o: Node, g: Graph) -> int | None:
    """The first input whose traced dtype a floating output had (the trace-only guess)."""
    for inp in g.inputs:
        if inp is not None and inp.dtype == o.dtype and o.dtype.is_floating_point:
            return inp.attrs["index"]
    return None


def _out_dtypes(reference: Callable[..., Any], g: Graph, ex: Sequence[Any]
                ) -> tuple[dict[tuple[Any, ...], tuple[torch.dtype, ...]], list[tuple[Any, ...]]]:
    """(table, rules) for the launcher's output dtypes; see porter.codegen.dtypes."""
    table = {k: v for k, v in dtypes.probe(reference, ex).items() if len(v) == len(g.outputs)}
    traced = [o.dtype for o in g.outputs]
    return table, dtypes.rules(table, ex, traced, [_dtype_source(o, g) for o in g.outputs])


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
        return gen_matmul(name, g, example_inputs, args, subs)
    if family == "matmul_rowwise":
        return gen_matmul_rowwise(name, g, example_inputs, subs)
    if family == "scan":
        return gen_scan(name, g, example_inputs, args, subs)
    if family == "elementwise" and flat_ok(g):
        return gen_flat(name, g, example_inputs, args, subs)
    return gen_rowwise(name, g, example_inputs, args, subs, family)
