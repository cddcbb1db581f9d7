"""A small tensor IR: what the templates understand.

Every node has a logical shape whose sizes are sympy expressions over the input sizes (traced
symbolically, so one generated module serves every shape), a torch dtype, and an `op`:

  input     a kernel argument (attrs: index)
  scalar    a constant (attrs: value)
  pw        a pointwise op (attrs: fn); args are nodes, python numbers or sympy sizes
  reduce    sum/max/min along `dims` (attrs: kind, dims, keepdim); dims == all dims for a full one
  expand, unsqueeze, squeeze, permute, reshape, slice, cat, gather, flip: index ops, no math
  mm        a 2-D matrix product, or a batched one (3-D: bmm)
  scan      an inclusive prefix sum/product along `dim` (attrs: kind "sum" | "prod", dim)
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

import sympy
import torch

POINTWISE = "pw"
INDEX_OPS = ("expand", "unsqueeze", "squeeze", "permute", "reshape", "slice", "cat", "gather",
             "flip")


@dataclass(eq=False)
class Node:
    """One value in the graph (identity semantics: two nodes are equal only if they are the
    same)."""

    id: int
    op: str
    args: tuple[Any, ...]
    shape: tuple[sympy.Expr, ...]
    dtype: torch.dtype
    attrs: dict[str, Any] = field(default_factory=dict)
    origin: str = ""  # the aten op it came from, for reports

    @property
    def rank(self) -> int:
        return len(self.shape)

    def inputs(self) -> list[Node]:
        return [a for a in self.args if isinstance(a, Node)]

    def __repr__(self) -> str:
        return f"%{self.id}={self.op}{self.attrs.get('fn', '')}{list(self.shape)}"


def value_class(dtype: torch.dtype) -> str:
    """'f' (computed in fp32 inside kernels), 'i' (integers) or 'b' (bool)."""
    if dtype == torch.bool:
        return "b"
    if dtype.is_floating_point:
        return "f"
    if dtype.is_complex:
        return "c"
    return "i"


@dataclass
class Graph:
    """Nodes in topological order, the inputs (one per reference argument) and the outputs."""

    nodes: list[Node] = field(default_factory=list)
    inputs: list[Node | None] = field(default_factory=list)  # None for a baked python scalar
    outputs: list[Node] = field(default_factory=list)
    scalar_args: dict[int, Any] = field(default_factory=dict)  # argument index -> baked value
    symbols: dict[sympy.Symbol, tuple[int, int]] = field(default_factory=dict)  # -> (input, dim)
    tuple_output: bool = False
    # Output dtypes by input dtypes, probed from the reference (porter.codegen.dtypes): a table
    # keyed by each argument's dtype, and a per-output rule for keys it lacks.
    out_dtype_table: dict[tuple[Any, ...], tuple[torch.dtype, ...]] = field(default_factory=dict)
    out_dtype_rules: list[tuple[Any, ...]] = field(default_factory=list)

    def add(self, op: str, args: tuple[Any, ...], shape: tuple[Any, ...], dtype: torch.dtype,
            origin: str = "", **attrs: Any) -> Node:
        node = Node(len(self.nodes), op, tuple(args), tuple(sympy.sympify(s) for s in shape),
                    dtype, dict(attrs), origin)
        self.nodes.append(node)
        return node

    def live(self) -> list[Node]:
        """Nodes the outputs depend on, in topological order."""
        seen: set[int] = set()
        stack = list(self.outputs)
        while stack:
            n = stack.pop()
            if n.id in seen:
                continue
            seen.add(n.id)
            stack.extend(n.inputs())
        return [n for n in self.nodes if n.id in seen]
