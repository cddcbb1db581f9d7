"""IR patterns expression emission recognises: the whole-function helpers (GELU, 1 + erf), a
reshape that merges trailing dims, a softmax's denominator."""

from __future__ import annotations

import math
from typing import Any

import sympy
import torch

from porter.codegen.ir import Node


def _one_plus_erf_arg(n: Node) -> Node | None:
    """y when `n` is add(erf(y), 1.0) or add(1.0, erf(y)) of a float y, else None."""
    if n.attrs.get("fn") != "add" or len(n.args) != 2:
        return None
    for a, b in (n.args, n.args[::-1]):
        if (isinstance(a, Node) and a.op == "pw" and a.attrs.get("fn") == "erf"
                and not isinstance(b, (Node, bool)) and b == 1.0 and isinstance(a.args[0], Node)):
            return a.args[0]
    return None


def _scaled(n: Any, factor: float) -> Node | None:
    """x when `n` is mul(x, factor) or mul(factor, x) of a node x, else None."""
    if not (isinstance(n, Node) and n.op == "pw" and n.attrs.get("fn") == "mul"
            and len(n.args) == 2):
        return None
    for a, b in (n.args, n.args[::-1]):
        if isinstance(a, Node) and not isinstance(b, (Node, bool)) and abs(b - factor) < 1e-12:
            return a
    return None


def _gelu_arg(n: Node) -> Node | None:
    """x when `n` is GELU's erf form as traced, mul(mul(x, 0.5), 1 + erf(mul(x, 1/sqrt 2)))
    in either operand order, else None."""
    if n.attrs.get("fn") != "mul" or len(n.args) != 2:
        return None
    for a, b in (n.args, n.args[::-1]):
        x = _scaled(a, 0.5)
        y = _one_plus_erf_arg(b) if isinstance(b, Node) and b.op == "pw" else None
        if x is not None and y is not None and _scaled(y, 1.0 / math.sqrt(2.0)) is x:
            return x
    return None


def one_operand_helper(n: Node) -> tuple[str, Node, Any] | None:
    """(Triton helper, its operand, the same function in torch) when `n` is a pattern one
    fastmath helper computes whole (GELU, 1 + erf), else None."""
    x = _gelu_arg(n)
    if x is not None:
        return "porter_gelu", x, torch.nn.functional.gelu
    y = _one_plus_erf_arg(n)
    if y is not None:
        return "porter_one_plus_erf", y, lambda v: 1.0 + torch.erf(v)
    return None


def trailing_merge(out_shape: tuple[Any, ...], in_shape: tuple[Any, ...]) -> int | None:
    """k when `out_shape` is `in_shape` with dims k.. merged into its last dim, else None."""
    k = len(out_shape) - 1
    if k < 0 or len(in_shape) <= k or tuple(out_shape[:k]) != tuple(in_shape[:k]):
        return None
    if sympy.simplify(out_shape[k] - sympy.Mul(*in_shape[k:])) != 0:
        return None
    return k


def row_shape(n: Node) -> tuple[Any, ...]:
    """Shape of a reduce node without its reduced (kept) dims."""
    if n.attrs["keepdim"]:
        return tuple(s for i, s in enumerate(n.shape) if i not in n.attrs["dims"])
    return n.shape


def is_softmax_denominator(d: Any) -> bool:
    """True for sum(exp(g - max(g))) over a row: a value in [1, n] (the max term is exp(0))."""
    if not (isinstance(d, Node) and d.op == "reduce" and d.attrs.get("kind") == "sum"):
        return False
    e = d.args[0]
    if not (isinstance(e, Node) and e.op == "pw" and e.attrs.get("fn") == "exp"):
        return False
    sub = e.args[0]
    if not (isinstance(sub, Node) and sub.op == "pw" and sub.attrs.get("fn") == "sub"):
        return False
    g, m = sub.args
    return (isinstance(m, Node) and m.op == "reduce" and m.attrs.get("kind") == "max"
            and m.args[0] is g and m.attrs.get("dims") == d.attrs.get("dims"))
