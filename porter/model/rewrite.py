"""Rewrite an fx graph so each fused group is one call of its op (a pack's custom op or bound
launch), the rest of the graph copied as it was. Shared by `porter.patching` (whole-model graph)
and `porter.model.inplace` (one module's graph)."""

from __future__ import annotations

import heapq
import operator
from typing import Any

import torch
import torch.fx as fx

from porter.model.groups import Group


def rewrite_groups(gm: fx.GraphModule, groups: list[Group], ops: dict[int, Any]) -> fx.GraphModule:
    """A new GraphModule where each group is one call of its custom op (same parameters)."""
    old = list(gm.graph.nodes)
    pos = {n: i for i, n in enumerate(old)}
    unit_of: dict[fx.Node, Any] = {n: n for n in old}
    for g in groups:
        for n in g.nodes:
            unit_of[n] = g
    members: dict[int, list[fx.Node]] = {}
    units: list[Any] = []
    seen: set[int] = set()
    for n in old:
        u = unit_of[n]
        if id(u) not in seen:
            seen.add(id(u))
            units.append(u)
    for u in units:
        members[id(u)] = u.nodes if isinstance(u, Group) else [u]
    # Units in dependency order (a group runs where all its inputs exist), stable by position:
    # a group's outputs may be read by a node that sat between its members.
    deps: dict[int, set[int]] = {}
    users: dict[int, set[int]] = {id(u): set() for u in units}
    for u in units:
        ins = set()
        for n in members[id(u)]:
            for a in (u.inputs if isinstance(u, Group) else n.all_input_nodes):
                src = unit_of[a]
                if src is not u:
                    ins.add(id(src))
        deps[id(u)] = ins
        for d in ins:
            users[d].add(id(u))
    by_id = {id(u): u for u in units}
    first_pos = {id(u): min(pos[n] for n in members[id(u)]) for u in units}
    ready = [(first_pos[k], k) for k, v in deps.items() if not v]
    heapq.heapify(ready)
    remaining = {k: len(v) for k, v in deps.items()}
    graph = fx.Graph()
    graph._codegen = gm.graph._codegen  # a Dynamo-exported graph's pytree in/out specs
    env: dict[fx.Node, fx.Node] = {}
    while ready:
        _, k = heapq.heappop(ready)
        u = by_id[k]
        if isinstance(u, Group):
            args = []
            for j, i in enumerate(u.inputs):
                a = env[i]
                if j < len(u.flat) and u.flat[j]:  # the matmul template takes 2-D operands
                    a = graph.call_method("reshape", (a, -1, i.meta["tensor_meta"].shape[-1]))
                args.append(a)
            call = graph.call_function(ops[u.index], tuple(args))
            outs = [call] if len(u.outputs) == 1 else [
                graph.call_function(operator.getitem, (call, j)) for j in range(len(u.outputs))]
            like = next((env[i] for j, i in enumerate(u.inputs) if j < len(u.flat) and u.flat[j]),
                        None)
            for o, v in zip(u.outputs, outs, strict=True):
                if like is not None:
                    v = graph.call_function(unflatten_rows, (v, like))
                env[o] = v
        else:
            env[u] = graph.node_copy(u, lambda a: env[a])
        for user in users[k]:
            remaining[user] -= 1
            if remaining[user] == 0:
                heapq.heappush(ready, (first_pos[user], user))
    if len(env) < sum(1 for n in old if not isinstance(unit_of[n], Group)):
        raise RuntimeError("internal: the patched graph has a cycle")  # grouping forbids it
    # The shape/dtype queries and parameters only the replaced groups read are left unused;
    # they go. Nothing else does: fx's dead-code pass would also drop calls kept for their
    # effect that it does not know (a Dynamo graph's vmap nesting calls, for one).
    dropped = {env[n] for g in groups for n in g.nodes for n in n.all_input_nodes
               if n in env and n.op in ("get_attr", "call_function", "call_method")}
    for n in reversed(list(graph.nodes)):
        if n in dropped and not n.users and (n.op == "get_attr" or _is_query(n)):
            graph.erase_node(n)
    new = fx.GraphModule(gm, graph)
    new.recompile()
    return new


def unflatten_rows(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A matmul group's 2-D result back in the leading dims of the activation it read (the call's
    own, not the traced shape's: a decode step has one token where the trace had many)."""
    return v.reshape(*like.shape[:-1], v.shape[-1])


def _is_query(n: fx.Node) -> bool:
    """A shape, dtype or size query (`x.dtype`, `x.shape[0]`, `x.size(-1)`): no effect."""
    if n.op == "call_function" and n.target is getattr:
        return True
    if n.op == "call_method" and n.target in ("size", "dim", "numel"):
        return True
    return n.op == "call_function" and n.target is operator.getitem and all(
        _is_query(a) for a in n.all_input_nodes)
