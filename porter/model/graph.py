"""A model as torch.fx sees it: traced at example inputs (each node's shape and dtype), each node's
op and kind (pointwise, reduction, matmul, layout, meta, opaque), and what it moves and computes.

The op vocabulary below is what `porter.model.groups` fuses and what it reports the porter
cannot take.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from torch import nn

# Pointwise functions and tensor methods, by name (call_function targets' __name__, call_method
# names). Casts are pointwise too: Inductor fuses them.
POINTWISE = frozenset({
    "add", "sub", "mul", "truediv", "div", "neg", "pow", "rsqrt", "sqrt", "exp", "log", "tanh",
    "sigmoid", "silu", "gelu", "relu", "leaky_relu", "elu", "selu", "softplus", "mish",
    "hardswish", "hardsigmoid", "erf", "abs", "clamp", "clamp_min", "clamp_max", "where",
    "maximum", "minimum", "reciprocal", "to", "float", "half", "bfloat16", "type_as", "square",
    "sin", "cos", "iadd", "imul", "radd", "rmul", "rsub", "floordiv", "dropout",
})
REDUCTIONS = frozenset({
    "mean", "sum", "amax", "amin", "max", "min", "softmax", "log_softmax", "rms_norm",
    "layer_norm", "norm", "var", "std", "logsumexp",
})
# Ops the porter has no template for, with the reason a user reads in the table.
NOT_PORTABLE = {
    "scaled_dot_product_attention": "attention: no attention template (batched matmuls with a "
                                    "softmax between them); cuDNN/flash kernels already fuse it",
    "multi_head_attention_forward": "attention: no attention template",
    "conv1d": "convolution: not covered by the generator",
    "conv2d": "convolution: not covered by the generator",
    "conv3d": "convolution: not covered by the generator",
    "embedding": "embedding gather: data movement, no template",
    "bmm": "batched (3-D) matmul: not covered by the generator",
    "baddbmm": "batched (3-D) matmul: not covered by the generator",
    "cumsum": "cumulative op: not covered by the generator",
}
LAYOUT = frozenset({
    "view", "reshape", "transpose", "permute", "contiguous", "expand", "unsqueeze", "squeeze",
    "flatten", "unflatten", "cat", "stack", "split", "chunk", "narrow", "repeat", "getitem",
    "t", "clone", "index_select", "gather", "masked_fill",
})
_META_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda"})
_META_METHODS = frozenset({"size", "dim", "numel"})
# Activation modules (leaf modules of nn) and the function each one is.
ACTIVATION_MODULES: dict[type[nn.Module], str] = {
    nn.SiLU: "silu", nn.GELU: "gelu", nn.ReLU: "relu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid",
}
_LEAF_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Embedding, nn.MultiheadAttention)


class ModelTraceError(Exception):
    """torch.fx could not trace the model; the message says why."""


@dataclass
class TracedModel:
    """A model traced to an fx graph at given example inputs (each node's shape in `meta`)."""

    module: fx.GraphModule
    inputs: tuple[Any, ...]


class _Tracer(fx.Tracer):
    """Traces through every module except the ones that are one kernel (Linear, conv, ...)
    and the activation modules (kept as nodes, read as their function)."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, _LEAF_TYPES) or type(m) in ACTIVATION_MODULES


def trace_model(model: nn.Module, inputs: Sequence[Any]) -> TracedModel:
    """Trace `model` with torch.fx and record each node's shape and dtype at `inputs`.

    Raises:
        ModelTraceError: the model does not trace (data-dependent control flow, ...).
    """
    from torch.fx.passes.shape_prop import ShapeProp

    try:
        graph = _Tracer().trace(model)
    except Exception as exc:  # noqa: BLE001 - any tracing failure is reported in one line
        raise ModelTraceError(f"torch.fx cannot trace {type(model).__name__}: "
                              f"{type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    gm = fx.GraphModule(model, graph)
    with torch.no_grad():
        ShapeProp(gm).propagate(*inputs)
    return TracedModel(gm, tuple(inputs))


def op_name(gm: fx.GraphModule, n: fx.Node) -> str:
    """The op a node runs: "add", "mean", "linear", "scaled_dot_product_attention", ..."""
    if n.op == "call_module":
        m = gm.get_submodule(str(n.target))
        if type(m) in ACTIVATION_MODULES:
            return ACTIVATION_MODULES[type(m)]
        if isinstance(m, nn.Linear):
            return "linear"
        return type(m).__name__.lower()
    if n.op == "call_method":
        return str(n.target)
    if n.op == "call_function":
        name = getattr(n.target, "__name__", str(n.target))
        return name.lstrip("_") if name.startswith("__") else name
    return n.op


def _is_meta(gm: fx.GraphModule, n: fx.Node) -> bool:
    """A node whose value is a shape, dtype or size, not a tensor (computed for free)."""
    if n.op == "call_function" and n.target is getattr and n.args[1] in _META_ATTRS:
        return True
    if n.op == "call_method" and n.target in _META_METHODS:
        return True
    tm = n.meta.get("tensor_meta")
    if n.op in ("call_function", "call_method") and tm is None and "tensor_meta" in n.meta:
        return True
    if n.op == "call_function" and n.target in (operator.getitem, operator.mul,
                                                operator.floordiv, operator.add):
        ins = [a for a in n.all_input_nodes]
        return bool(ins) and all(_is_meta(gm, a) for a in ins)
    return False


def classify(gm: fx.GraphModule, n: fx.Node) -> str:
    """"pointwise" | "reduction" | "matmul" | "layout" | "meta" | "opaque" | "io"."""
    if n.op in ("placeholder", "get_attr", "output"):
        return "io"
    if _is_meta(gm, n):
        return "meta"
    name = op_name(gm, n)
    if not isinstance(n.meta.get("tensor_meta"), torch.fx.passes.shape_prop.TensorMetadata):
        return "opaque"  # tuples (split, chunk) and non-tensor values
    if name in ("linear", "matmul", "mm", "addmm"):
        return "matmul"
    if name in REDUCTIONS:
        return "reduction"
    if name in POINTWISE:
        return "pointwise"
    if name in LAYOUT:
        return "layout"
    return "opaque"


def node_bytes(n: fx.Node) -> int:
    """Bytes of a node's tensor value (0 for non-tensors)."""
    tm = n.meta.get("tensor_meta")
    if not isinstance(tm, torch.fx.passes.shape_prop.TensorMetadata):
        return 0
    return math.prod(tm.shape) * tm.dtype.itemsize


def node_flops(gm: fx.GraphModule, n: fx.Node) -> int:
    """FLOPs of a matmul or attention node (0 for the memory-bound rest)."""
    name = op_name(gm, n)
    tm = n.meta.get("tensor_meta")
    if name == "linear" and tm is not None:
        k = n.all_input_nodes[0].meta["tensor_meta"].shape[-1]
        return 2 * math.prod(tm.shape) * int(k)
    if name == "scaled_dot_product_attention" and tm is not None:
        q = n.all_input_nodes[0].meta["tensor_meta"].shape
        kv = n.all_input_nodes[1].meta["tensor_meta"].shape
        causal = 0.5 if n.kwargs.get("is_causal") else 1.0
        return int(4 * math.prod(q[:-1]) * kv[-2] * q[-1] * causal)
    if name in ("matmul", "mm", "bmm") and tm is not None:
        k = n.all_input_nodes[0].meta["tensor_meta"].shape[-1]
        return 2 * math.prod(tm.shape) * int(k)
    return 0


def rows(n: fx.Node) -> int:
    """Rows of a node's value (all but its last size): the grid of a one-row-per-program kernel."""
    tm = n.meta.get("tensor_meta")
    if not isinstance(tm, torch.fx.passes.shape_prop.TensorMetadata) or not tm.shape:
        return 1
    return max(1, math.prod(tm.shape[:-1]))
