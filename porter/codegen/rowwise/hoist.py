"""Reordering a kernel body's top-level statements: what needs no reduction (the HOIST knob of
the single pass) or no row (the persistent kernel's once-per-program loads) moves first."""

from __future__ import annotations

import ast
import re
from collections import Counter


def loads_before_a_reduction(lines: list[str]) -> int:
    first = next((i for i, ln in enumerate(lines) if _reduces(ln.strip())), len(lines))
    return sum("tl.load(" in ln for ln in lines[:first])


def _reduces(code: str) -> bool:
    """Whether a statement or expression calls a tl reduction (of a block header such as
    `if VAR1:` or `else:`, its condition)."""
    if code.endswith(":"):
        code = code[3:-1] if code.startswith("if ") else "None"
    return any(isinstance(n, ast.Attribute) and n.attr in _REDUCTIONS
               for n in ast.walk(ast.parse(code)))


_ASSIGN = re.compile(r"^    ([A-Za-z_]\w*) = (.+)$")  # a statement at the kernel's top level
_REDUCTIONS = {"sum", "max", "min", "reduce"}  # tl.* calls: a statement using one stays put


_TARGETS = re.compile(r"^\s*([A-Za-z_]\w*(?:, [A-Za-z_]\w*)*) = ")  # `a = ` or `a, b = `


def assignments(lines: list[str]) -> list[str]:
    """The names each assignment among `lines` binds, at any indentation, with repeats."""
    return [n for ln in lines if (m := _TARGETS.match(ln)) for n in m.group(1).split(", ")]


def split_invariant(lines: list[str], variant: set[str]) -> tuple[list[str], list[str]]:
    """(movable, rest), each in order: a top-level statement is movable when it calls no
    reduction and uses none of `variant` nor anything computed from them. Only names assigned
    once move, so moving the first list ahead of the second computes the same values."""
    assigned = Counter(assignments(lines))
    variant = set(variant)
    movable: list[str] = []
    rest: list[str] = []
    for ln in lines:
        m = _ASSIGN.match(ln)
        if m and assigned[m.group(1)] == 1:
            names = {n.id for n in ast.walk(ast.parse(m.group(2))) if isinstance(n, ast.Name)}
            if not _reduces(m.group(2)) and not names & variant:
                movable.append(ln)
                continue
        if (t := _TARGETS.match(ln)):
            variant.update(t.group(1).split(", "))
        rest.append(ln)
    return movable, rest


def hoist_reduction_free(lines: list[str]) -> list[str]:
    """Move each top-level statement that depends on no reduction (loads of weights, biases,
    targets and what indexes them) to the start of the body, in order.

    Triton issues loads where they are written and does not move them across a reduction (a
    barrier), so a weight load written after the reductions adds a memory round trip to each
    row. Whether that pays is measured, not assumed (config knob HOIST): it made rmsnorm at
    4097x1537 9% faster on an H100 and layernorm at width 5120 16-32% slower (the weights stay
    live across both reductions; bench/NOTES.md items 9 and 20).
    """
    movable, rest = split_invariant(lines, set())
    return movable + rest
