"""A model as torch.fx sees it, cut into the fused groups Inductor would form around each op.

    traced = trace_model(model, example_inputs)   # fx GraphModule + shapes (ShapeProp)
    groups = find_groups(traced)                  # each: nodes, inputs, outputs, standalone code

The unit is the *fused group*, not the op: an elementwise or reduction op together with its
elementwise producers and consumers (residual adds, activations, casts, scales), as Inductor
fuses them. A custom op that replaces one op alone is a fusion barrier to Inductor (measured on
an H100: `op(relu(x) + 1, w) * 2` ran 2.6x slower than torch.compile fusing the whole chain; see
DESIGN.md), so the porter ports and patches whole groups.

Grouping, in the graph's order: a fusible node (pointwise or a reduction) joins the group of a
fusible producer unless one of its other inputs depends on that group (joining would make a
cycle: the group would have to run both before and after that input). Matmuls, attention,
convolutions and layout changes (view, transpose, cat, slicing) end groups; the shape and dtype
queries the model makes (`x.shape`, `x.dtype`) are copied into each group that reads them.

Each group's code is written standalone: its inputs (activations and parameters) become
arguments `a0, a1, ...`, its nodes renamed `v0, v1, ...` in order, and it returns the values the
rest of the model reads. Two groups with the same code (the residual add + RMSNorm of every
layer) share one `signature` and so one pack.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)

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
_LINEAR_REASON = ("plain matmul (cuBLAS/cuDNN): near its roofline already; the porter's matmul "
                  "template gains only with an epilogue to fuse")
LAYOUT = frozenset({
    "view", "reshape", "transpose", "permute", "contiguous", "expand", "unsqueeze", "squeeze",
    "flatten", "unflatten", "cat", "stack", "split", "chunk", "narrow", "repeat", "getitem",
    "t", "clone", "index_select", "gather", "masked_fill",
})
_META_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "is_cuda"})
_META_METHODS = frozenset({"size", "dim", "numel"})
# Activation modules (leaf modules of nn) and the function each one is.
_ACTIVATION_MODULES: dict[type[nn.Module], str] = {
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


@dataclass
class Group:
    """A fused group: the fx nodes it covers and its standalone code.

    Attributes:
        index: position among the model's groups, in graph order.
        nodes: the group's fx nodes (tensor-valued), in graph order.
        inputs: the fx nodes whose values the group reads (activations, parameters).
        outputs: the group's nodes read outside it, in graph order.
        ops: op names in order ("add", "to", "pow", ...).
        kind: "fused" (pointwise/reduction group), "matmul" or "opaque".
        label: a short name for people ("add_rmsnorm", "silu_mul").
        code: `def reference(a0, ...)` for fused groups ("" otherwise).
        signature: hash of code and input ranks; groups with one signature share one pack.
        reason: for a group the porter cannot take, why.
    """

    index: int
    nodes: list[fx.Node]
    inputs: list[fx.Node] = field(default_factory=list)
    outputs: list[fx.Node] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    kind: str = "fused"
    label: str = ""
    code: str = ""
    signature: str = ""
    reason: str = ""
    flat: list[bool] = field(default_factory=list)  # per input: passed as (rows, last) 2-D
    base: Group | None = None  # the elementwise group alone, when a matmul was absorbed

    def input_shapes(self) -> list[tuple[int, ...]]:
        """Each input's shape as the group's code receives it (flattened to 2-D where the
        porter's matmul template needs it)."""
        out = []
        for k, i in enumerate(self.inputs):
            shape = tuple(int(d) for d in i.meta["tensor_meta"].shape)
            flat = k < len(self.flat) and self.flat[k]
            out.append((math.prod(shape[:-1]), shape[-1]) if flat else shape)
        return out

    @property
    def pack_name(self) -> str:
        """The pack (and spec NAME) this group's kernel lives under."""
        return f"{self.label}_{self.signature[:8]}" if self.signature else self.label


class _Tracer(fx.Tracer):
    """Traces through every module except the ones that are one kernel (Linear, conv, ...)
    and the activation modules (kept as nodes, read as their function)."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, _LEAF_TYPES) or type(m) in _ACTIVATION_MODULES


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
        if type(m) in _ACTIVATION_MODULES:
            return _ACTIVATION_MODULES[type(m)]
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


def _ancestors(nodes: list[fx.Node]) -> dict[fx.Node, int]:
    """Each node's ancestor set as a bit mask over graph positions (graphs here are small)."""
    pos = {n: i for i, n in enumerate(nodes)}
    anc: dict[fx.Node, int] = {}
    for n in nodes:
        mask = 0
        for a in n.all_input_nodes:
            mask |= anc[a] | (1 << pos[a])
        anc[n] = mask
    return anc


def find_groups(traced: TracedModel, *, matmul_epilogues: bool = False) -> list[Group]:
    """Cut the traced graph into fused groups, plus one entry per matmul and opaque op.

    Args:
        traced: the traced model.
        matmul_epilogues: also absorb a Linear into the elementwise group that alone reads its
            output (bias + activation, SiLU-and-multiply of a gate projection): one matmul
            kernel with a fused epilogue, as the porter's matmul template generates. Off by
            default: Inductor's default mode leaves matmuls to cuBLAS and fuses only the
            elementwise part, and that is the group a custom op must not break.

    Returns:
        Groups in graph order: "fused" ones (with code and signature), "matmul" and "opaque"
        ones (one node each, with the reason the porter does not take them).
    """
    gm = traced.module
    nodes = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    anc = _ancestors(nodes)
    kind = {n: classify(gm, n) for n in nodes}
    group_of: dict[fx.Node, int] = {}
    members: dict[int, list[fx.Node]] = {}
    masks: dict[int, int] = {}
    next_id = 0
    for n in nodes:
        if kind[n] not in ("pointwise", "reduction"):
            continue
        producers = [a for a in n.all_input_nodes if a in group_of]
        joined = None
        for p in producers:
            gid = group_of[p]
            gmask = masks[gid]
            others = [s for a in n.all_input_nodes for s in _sources(a, kind)
                      if group_of.get(s) != gid]
            # joining is legal when no other input depends on the group
            if all(not (anc[a] & gmask) for a in others):
                joined = gid
                break
        if joined is None:
            joined = next_id
            next_id += 1
            members[joined] = []
            masks[joined] = 0
        group_of[n] = joined
        members[joined].append(n)
        masks[joined] |= 1 << pos[n]

    groups: list[Group] = []
    absorbed: set[fx.Node] = set()
    for gid in sorted(members, key=lambda g: pos[members[g][0]]):
        g = _fused_group(gm, members[gid], kind)
        if matmul_epilogues and g.kind == "fused":
            with_mm = _absorb_matmul(gm, g, kind)
            if with_mm is not None:
                absorbed.add(with_mm.nodes[0])
                g = with_mm
        groups.append(g)
    for n in nodes:
        k = kind[n]
        if n in absorbed:
            continue
        if not isinstance(n.meta.get("tensor_meta"), torch.fx.passes.shape_prop.TensorMetadata):
            continue  # no tensor made (grad mode, autocast, vmap bookkeeping): no kernel
        if k == "matmul":
            groups.append(Group(0, [n], list(n.all_input_nodes), [n], [op_name(gm, n)], "matmul",
                                op_name(gm, n), reason=_LINEAR_REASON))
        elif k == "opaque":
            name = op_name(gm, n)
            groups.append(Group(0, [n], list(n.all_input_nodes), [n], [name], "opaque", name,
                                reason=NOT_PORTABLE.get(name, f"{name}: no template covers it")))
        elif k == "layout" and _copies(gm, n):
            name = op_name(gm, n)
            groups.append(Group(0, [n], list(n.all_input_nodes), [n], [name], "opaque", name,
                                reason=f"{name}: a layout copy, no arithmetic to fuse"))
    groups.sort(key=lambda g: pos[g.nodes[0]])
    for i, g in enumerate(groups):
        g.index = i
    return groups


def _sources(a: fx.Node, kind: dict[fx.Node, str]) -> list[fx.Node]:
    """The tensor nodes a value comes from: itself, or for a shape/dtype query the tensors it
    queries (the query is recomputed inside a group, the tensor must exist before it)."""
    if kind.get(a) != "meta":
        return [a]
    return [s for b in a.all_input_nodes for s in _sources(b, kind)]


def _copies(gm: fx.GraphModule, n: fx.Node) -> bool:
    """A layout op that makes a copy (reshape of a non-contiguous tensor, cat, contiguous)."""
    return op_name(gm, n) in ("cat", "stack", "contiguous", "clone", "repeat", "index_select",
                              "gather", "masked_fill")


def _fused_group(gm: fx.GraphModule, members: list[fx.Node], kind: dict[fx.Node, str]) -> Group:
    inside = set(members)
    ops = [op_name(gm, n) for n in members]
    g = Group(0, list(members), ops=ops, kind="fused", label=_label(ops))
    g.outputs = [n for n in members if any(u not in inside for u in n.users)]
    code, inputs, reason = _standalone(gm, members, g.outputs, kind)
    g.inputs = inputs
    if reason:
        g.kind, g.reason = "opaque", reason
        return g
    g.code = code
    g.signature = _signature(g)
    return g


def _signature(g: Group) -> str:
    ranks = ",".join(str(len(s)) for s in g.input_shapes())
    return hashlib.sha256(f"{g.code}\n{ranks}\n{g.flat}".encode()).hexdigest()[:16]


def _linear_params(gm: fx.GraphModule, lin: fx.Node) -> tuple[fx.Node, fx.Node | None]:
    """The weight and bias nodes of a Linear module call (get_attr nodes added before it)."""
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    if "porter_linear_params" not in lin.meta:
        m = gm.get_submodule(str(lin.target))
        made = []
        for pname in ("weight", "bias"):
            p = getattr(m, pname, None)
            if p is None:
                made.append(None)
                continue
            with gm.graph.inserting_before(lin):
                node = gm.graph.get_attr(f"{lin.target}.{pname}")
            node.meta["tensor_meta"] = _extract_tensor_metadata(p)
            made.append(node)
        lin.meta["porter_linear_params"] = tuple(made)
        gm.recompile()
    w, b = lin.meta["porter_linear_params"]
    return w, b


def _absorb_matmul(gm: fx.GraphModule, g: Group, kind: dict[fx.Node, str]) -> Group | None:
    """`g` with the Linear that only it reads in front (a matmul with a fused epilogue), or
    None where the porter's matmul template cannot take it."""
    if any(kind[n] == "reduction" for n in g.nodes):
        return None
    inside = set(g.nodes)
    lin = next((i for i in g.inputs if kind.get(i) == "matmul" and op_name(gm, i) == "linear"
                and all(u in inside for u in i.users)), None)
    if lin is None or lin.op not in ("call_module", "call_function"):
        return None
    if lin.op == "call_module":
        _linear_params(gm, lin)
    members = [lin, *g.nodes]
    code, inputs, reason = _standalone(gm, members, g.outputs, kind)
    if reason:
        return None
    x = lin.all_input_nodes[0]
    params = set(lin.meta.get("porter_linear_params", ())) | set(lin.all_input_nodes[1:])
    lead = tuple(x.meta["tensor_meta"].shape[:-1])
    flat = []
    for i in inputs:
        shape = tuple(i.meta["tensor_meta"].shape)
        if len(lead) <= 1 or i in params or len(shape) <= 1:
            flat.append(False)  # 2-D already, the weight or bias, or a vector over columns
        elif len(shape) == len(lead) + 1 and (shape[:-1] == lead or
                                              all(d == 1 for d in shape[:-1])):
            flat.append(True)
        else:
            return None  # broadcast over some leading dims only: no 2-D form
    if len(lead) > 1 and any(tuple(o.meta["tensor_meta"].shape[:-1]) != lead for o in g.outputs):
        return None
    ops = [op_name(gm, n) for n in members]
    new = Group(0, members, inputs, list(g.outputs), ops, "fused", f"linear_{g.label}", code,
                flat=flat, base=g)
    new.signature = _signature(new)
    return new


def _label(ops: list[str]) -> str:
    """A short human name for a group from its ops, e.g. "add_rmsnorm", "silu_mul"."""
    s = set(ops)
    words: list[str] = []
    norm = ("rsqrt" in s and ("mean" in s or "pow" in s)) or "rms_norm" in s
    if norm:
        if ops[0] in ("add", "iadd"):
            words.append("add")
        words.append("rmsnorm")
    elif "layer_norm" in s:
        words += (["add"] if ops[0] in ("add", "iadd") else []) + ["layernorm"]
    elif "softmax" in s or "log_softmax" in s:
        words.append("log_softmax" if "log_softmax" in s else "softmax")
    else:
        for o in ops:
            if o not in words and o not in ("to", "float", "type_as"):
                words.append(o)
            if len(words) == 3:
                break
    return "_".join(words) or "group"


def _standalone(gm: fx.GraphModule, members: list[fx.Node], outputs: list[fx.Node],
                kind: dict[fx.Node, str]) -> tuple[str, list[fx.Node], str]:
    """The group as `def reference(a0, ...)`; its input nodes; or a reason it cannot be."""
    inside = set(members)
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    inputs: list[fx.Node] = []
    counter = [0]

    def value(a: fx.Node) -> fx.Node:
        if a in env:
            return env[a]
        if a not in inside and kind.get(a) == "meta":
            # a shape/dtype query: recomputed inside the group from its own inputs
            new = graph.create_node(a.op, a.target, fx.map_arg(a.args, value),
                                    fx.map_arg(a.kwargs, value), name=f"m{len(env)}")
            env[a] = new
            return new
        if a in inside:
            raise KeyError(a)  # a member is created in order before it is read
        env[a] = graph.placeholder(f"a{len(inputs)}")
        inputs.append(a)
        return env[a]

    for n in members:
        if not isinstance(n.meta.get("tensor_meta"), torch.fx.passes.shape_prop.TensorMetadata):
            return "", inputs, f"{op_name(gm, n)} returns no single tensor"
        args = fx.map_arg(n.args, value)
        kwargs = fx.map_arg(n.kwargs, value)
        target, op = n.target, n.op
        if op == "call_module" and isinstance(gm.get_submodule(str(n.target)), nn.Linear):
            w, b = _linear_params(gm, n)
            args = (args[0], value(w), value(b) if b is not None else None)
            op, target, kwargs = "call_function", F.linear, {}
        elif op == "call_module":
            m = gm.get_submodule(str(n.target))
            fname = _ACTIVATION_MODULES.get(type(m))
            if fname is None:
                return "", inputs, f"module {type(m).__name__} inside a fused group"
            op, target = "call_function", getattr(F, fname)
            if isinstance(m, nn.GELU):
                kwargs = {"approximate": m.approximate}
        name = f"v{counter[0]}"
        counter[0] += 1
        env[n] = graph.create_node(op, target, args, kwargs, name=name)
    if not inputs:
        return "", inputs, "reads no tensor (makes constants)"
    for i in inputs:
        tm = i.meta.get("tensor_meta")
        if not isinstance(tm, torch.fx.passes.shape_prop.TensorMetadata):
            return "", inputs, f"reads a non-tensor value ({i.name})"
        if not tm.dtype.is_floating_point:
            return "", inputs, (f"reads a {str(tm.dtype).removeprefix('torch.')} tensor "
                                f"({i.name}): specs are made with float inputs only")
    outs = [env[o] for o in outputs]
    graph.output(outs[0] if len(outs) == 1 else tuple(outs))
    pc = graph.python_code(root_module="self")
    unknown = sorted(k for k, v in pc.globals.items() if not _torch_or_builtin(k, v))
    if unknown:
        return "", inputs, f"calls functions outside torch ({', '.join(unknown)})"
    src = pc.src.replace("def forward(self, ", "def reference(").strip("\n")
    # fx frees intermediates with `x = None` statements: noise in a spec a person reads
    lines = [ln.split(";  ")[0].rstrip() for ln in src.splitlines()]
    return "\n".join(lines) + "\n", inputs, ""


def _torch_or_builtin(name: str, value: Any) -> bool:
    if name in ("inf", "nan", "NoneType", "device", "operator"):
        return True
    if inspect.ismodule(value):
        return value.__name__.split(".")[0] in ("torch", "builtins", "operator")
    return str(getattr(value, "__module__", "")).split(".")[0] in ("torch", "builtins", "")


def node_bytes(n: fx.Node) -> int:
    """Bytes of a node's tensor value (0 for non-tensors)."""
    tm = n.meta.get("tensor_meta")
    if not isinstance(tm, torch.fx.passes.shape_prop.TensorMetadata):
        return 0
    return math.prod(tm.shape) * tm.dtype.itemsize


def group_bytes(g: Group) -> tuple[int, int]:
    """(bytes op by op, bytes fused): each node reading its inputs and writing its output,
    against the group's inputs read once and its outputs written once."""
    unfused = sum(node_bytes(n) + sum(node_bytes(a) for a in n.all_input_nodes)
                  for n in g.nodes)
    fused = sum(node_bytes(i) for i in g.inputs) + sum(node_bytes(o) for o in g.outputs)
    return unfused, fused


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
