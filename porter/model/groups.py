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
import math
from dataclasses import dataclass
from dataclasses import field

import torch
import torch.fx as fx

from porter.model.code import linear_params
from porter.model.code import standalone
from porter.model.graph import NOT_PORTABLE
from porter.model.graph import TracedModel
from porter.model.graph import classify
from porter.model.graph import node_bytes
from porter.model.graph import op_name

_LINEAR_REASON = ("plain matmul (cuBLAS/cuDNN): near its roofline already; the porter's matmul "
                  "template gains only with an epilogue to fuse")


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
        for p in producers:
            gid = group_of[p]
            if gid != joined and _parameter_prologue(members[gid], n):
                # e.g. Gemma's `1 + weight.float()`: computed from parameters alone and read only
                # here, so it joins the group that reads it (as Inductor fuses it)
                moved = members.pop(gid)
                masks.pop(gid)
                for m in moved:
                    group_of[m] = joined
                    masks[joined] |= 1 << pos[m]
                members[joined] = sorted(members[joined] + moved, key=lambda m: pos[m])

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


def _parameter_prologue(group: list[fx.Node], reader: fx.Node) -> bool:
    """A group computed from parameters and constants alone (no activation), all of whose
    values are read only inside it or by `reader`."""
    inside = set(group)
    return all(a in inside or a.op == "get_attr" for m in group for a in m.all_input_nodes) and all(
        u in inside or u is reader for m in group for u in m.users)


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
    code, inputs, reason = standalone(gm, members, g.outputs, kind)
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
        linear_params(gm, lin)
    members = [lin, *g.nodes]
    code, inputs, reason = standalone(gm, members, g.outputs, kind)
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


def group_bytes(g: Group) -> tuple[int, int]:
    """(bytes op by op, bytes fused): each node reading its inputs and writing its output,
    against the group's inputs read once and its outputs written once."""
    unfused = sum(node_bytes(n) + sum(node_bytes(a) for a in n.all_input_nodes)
                  for n in g.nodes)
    fused = sum(node_bytes(i) for i in g.inputs) + sum(node_bytes(o) for o in g.outputs)
    return unfused, fused


