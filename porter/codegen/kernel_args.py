"""A kernel's runtime arguments and how its launcher computes each (`KernelArgs`), and size
expressions printed as Python over the inputs' shapes."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

import sympy

from porter.codegen.errors import UnsupportedOpError


def sym_to_python(expr: Any, symbols: dict[sympy.Symbol, tuple[int, int]]) -> str:
    """Print a sympy size expression as Python over `inputs[k].shape[d]` (for launchers)."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Float and float(expr).is_integer():
        return str(int(expr))
    if expr.is_Symbol:
        k, d = symbols[expr]
        return f"inputs[{k}].shape[{d}]"
    if expr.is_Add:
        return "(" + " + ".join(sym_to_python(a, symbols) for a in expr.args) + ")"
    if expr.is_Mul:
        return "(" + " * ".join(sym_to_python(a, symbols) for a in expr.args) + ")"
    name = type(expr).__name__
    if name in ("FloorDiv", "floor") or isinstance(expr, sympy.floor):
        if name == "FloorDiv":
            a, b = expr.args
            return f"({sym_to_python(a, symbols)} // {sym_to_python(b, symbols)})"
    if name in ("Mod", "PythonMod"):
        a, b = expr.args
        return f"({sym_to_python(a, symbols)} % {sym_to_python(b, symbols)})"
    if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
        return "(" + " * ".join([sym_to_python(expr.base, symbols)] * int(expr.exp)) + ")"
    raise UnsupportedOpError(f"size expression {expr}", "cannot express it from input sizes")


@dataclass
class KernelArgs:
    """The runtime arguments one kernel needs, in order, and how the launcher computes each."""

    symbols: dict[sympy.Symbol, tuple[int, int]]
    params: list[str] = field(default_factory=list)  # kernel parameter names
    launch_exprs: list[str] = field(default_factory=list)  # python expressions in the launcher
    # "ptr:<input k>"/"ptr:out<j>"/"i64"/"i32"; constexprs "cstride:...", "cflat:..", "cdiv"
    kinds: list[str] = field(default_factory=list)
    _sizes: dict[Any, str] = field(default_factory=dict)

    def add(self, name: str, launch: str, kind: str) -> str:
        if name not in self.params:
            self.params.append(name)
            self.launch_exprs.append(launch)
            self.kinds.append(kind)
        return name

    def size(self, expr: Any) -> str:
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return str(int(expr))
        if expr not in self._sizes:
            self._sizes[expr] = self.add(f"sz{len(self._sizes)}", sym_to_python(expr, self.symbols),
                                         "i32")
        return self._sizes[expr]

    def divisor(self, expr: Any) -> str:
        """A size that index math divides by (a reshape's split of a linear index), as a
        constexpr: the compiler then divides by a multiply and a shift, where a runtime divisor
        costs a division routine per element (KernelBench 35's per-channel weights, `cols //
        (H * W)`, on every element). Its values are products of inner dims, so it adds few
        specializations beyond the constexpr strides the kernels already have."""
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return str(int(expr))
        key = ("divisor", expr)
        if key not in self._sizes:
            n = sum(1 for k in self._sizes if isinstance(k, tuple))
            self._sizes[key] = self.add(f"dv{n}", sym_to_python(expr, self.symbols), "cdiv")
        return self._sizes[key]

    def input_ptr(self, k: int) -> str:
        return self.add(f"in{k}_ptr", f"inputs[{k}]", f"ptr:in{k}")

    def input_stride(self, k: int, d: int, col: bool = False) -> str:
        """A stride argument. Strides multiplying the column index are constexprs: Triton's JIT
        does not specialize an int argument equal to 1, and without knowing the unit stride
        the compiler cannot emit 16-byte vector loads (ld.global.v4)."""
        if col:
            return self.add(f"in{k}_cs{d}", f"inputs[{k}].stride({d})", f"cstride:in{k}:{d}")
        return self.add(f"in{k}_s{d}", f"inputs[{k}].stride({d})", "i64")

    def input_flat(self, k: int) -> str:
        """A constexpr: whether input k is contiguous (`Emitter.flat_terms` then applies)."""
        return self.add(f"in{k}_flat", f"inputs[{k}].is_contiguous()", f"cflat:in{k}")

    def output_flat(self, j: int) -> str:
        return self.add(f"out{j}_flat", f"outs[{j}].is_contiguous()", f"cflat:out{j}")

    def output_ptr(self, j: int) -> str:
        return self.add(f"out{j}_ptr", f"outs[{j}]", f"ptr:out{j}")

    def output_stride(self, j: int, d: int, col: bool = False) -> str:
        if col:
            return self.add(f"out{j}_cs{d}", f"outs[{j}].stride({d})", f"cstride:out{j}:{d}")
        return self.add(f"out{j}_s{d}", f"outs[{j}].stride({d})", "i64")

    def declared(self) -> list[str]:
        """Parameter declarations for a kernel signature (constexpr strides annotated)."""
        return [f"{p}: tl.constexpr" if k.startswith(("cstride", "cflat", "cdiv")) else p
                for p, k in zip(self.params, self.kinds, strict=True)]
