"""Trace a reference function with make_fx (symbolic sizes) and lower the aten graph to the IR.

Ops that core decompositions leave whole (softmax, log-softmax, layer norm, gelu, vector norm)
are expanded (porter.codegen.expansions) into the IR's pointwise and reduction nodes, so every
template sees the same small vocabulary; porter.codegen.lowering walks the aten graph.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx.experimental._config as fx_config
from torch._decomp import core_aten_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from porter.codegen.errors import UnsupportedOpError
from porter.codegen.ir import Graph
from porter.codegen.lowering import Lowering

log = logging.getLogger(__name__)
aten = torch.ops.aten


def trace(reference: Callable[..., Any], example_inputs: Sequence[Any]) -> Graph:
    """Trace `reference(*example_inputs)` with symbolic sizes and lower it to the IR.

    Args:
        reference: a plain function of tensors and python scalars.
        example_inputs: one set of arguments (python scalars are baked into the kernel).

    Returns:
        The IR graph, its sizes symbolic in the input sizes.

    Raises:
        UnsupportedOpError: an aten op (or pattern) no template covers.
    """
    decomps = core_aten_decompositions()
    # Keep these whole: the lowering expands them itself into reductions the templates fuse.
    for op in (aten.gelu.default, aten._softmax.default, aten._log_softmax.default,
               aten.native_layer_norm.default, aten.linalg_vector_norm.default,
               aten.addmm.default, aten.var_mean.correction, aten.var.correction):
        decomps.pop(op, None)
    # Distinct symbols for equal example sizes: a square example must not make the kernel
    # assume M == N for every later shape.
    with fx_config.patch(use_duck_shape=False):
        try:
            gm = make_fx(reference, decomposition_table=decomps, tracing_mode="symbolic")(
                *example_inputs)
        except UnsupportedOpError:
            raise
        except Exception as exc:  # make_fx failures come from deep inside torch; name them
            raise UnsupportedOpError(getattr(reference, "__name__", "reference"),
                                     f"tracing with make_fx failed: {exc}") from exc
    return Lowering().run(gm, example_inputs)
