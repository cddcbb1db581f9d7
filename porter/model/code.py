"""A fused group written standalone: `def reference(a0, ...)` with its inputs (activations and
parameters) as arguments and its nodes renamed `v0, v1, ...`, or the reason it cannot be (a
module inside the group, a non-float input, a call outside torch)."""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from porter.model.graph import ACTIVATION_MODULES
from porter.model.graph import op_name


def linear_params(gm: fx.GraphModule, lin: fx.Node) -> tuple[fx.Node, fx.Node | None]:
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


def standalone(gm: fx.GraphModule, members: list[fx.Node], outputs: list[fx.Node],
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
            w, b = linear_params(gm, n)
            args = (args[0], value(w), value(b) if b is not None else None)
            op, target, kwargs = "call_function", F.linear, {}
        elif op == "call_module":
            m = gm.get_submodule(str(n.target))
            fname = ACTIVATION_MODULES.get(type(m))
            if fname is None:
                return "", inputs, f"module {type(m).__name__} inside a fused group"
            op, target = "call_function", getattr(F, fname)
            if isinstance(m, nn.GELU):
                kwargs = {"approximate": m.approximate}
        # `inplace=False` is every functional activation's default: fx's tracer writes it where
        # Dynamo's export does not, and a group has one signature however it was traced.
        kwargs = {k: v for k, v in kwargs.items() if not (k == "inplace" and v is False)}
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
