"""An op spec module (NAME, reference, make_inputs, SHAPES, ...) read into a validated `OpSpec`."""

from __future__ import annotations

import ast
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from harness.problem import Shape
from porter.errors import SpecError
from porter.specs.opspec import DEFAULT_DTYPES
from porter.specs.opspec import OpSpec
from porter.specs.opspec import default_interpret_shapes
from porter.specs.opspec import validate

log = logging.getLogger(__name__)


def read_source(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(p, f"cannot be read: {exc}") from None


def top_level_names(p: Path, source: str) -> set[str]:
    try:
        tree = ast.parse(source, filename=str(p))
    except SyntaxError as exc:
        raise SpecError(p, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def _shape_list(p: Path, module: ModuleType, attr: str, required: bool) -> tuple[Shape, ...]:
    value = getattr(module, attr, None)
    if value is None:
        if required:
            raise SpecError(p, f"no {attr}", f"define {attr} = [(4096, 4096), ...]")
        return ()
    try:
        shapes = tuple(tuple(_size(d) for d in s) for s in value)
    except (TypeError, ValueError):
        raise SpecError(p, f"{attr} must be a list of tuples of ints, got {value!r}") from None
    if required and not shapes:
        raise SpecError(p, f"{attr} is empty")
    for s in shapes:
        if any(d <= 0 for d in s):
            raise SpecError(p, f"{attr}: every size must be positive, got {s}")
    return shapes


def _size(d: Any) -> int:
    """A size as written: an int (numpy's too), never a float or bool cut to one (4096.5 was
    ported as 4096)."""
    if isinstance(d, bool) or not hasattr(d, "__index__"):
        raise TypeError(f"{d!r} is not an int")
    return int(d.__index__())


def _callable(p: Path, module: ModuleType, attr: str, required: bool) -> Callable[..., Any] | None:
    value = getattr(module, attr, None)
    if value is None:
        if required:
            hint = {
                "reference": (
                    "define `def reference(*inputs)` in plain PyTorch: the meaning of the op"
                ),
                "make_inputs": (
                    "define `def make_inputs(shape, dtype, device, generator)` returning a tuple"
                ),
            }.get(attr, "")
            raise SpecError(p, f"no {attr}", hint)
        return None
    if not callable(value):
        raise SpecError(p, f"{attr} must be a function, got {type(value).__name__}")
    return value


def spec_from_module(module: ModuleType, p: Path) -> OpSpec:
    """Build and validate an `OpSpec` from an imported spec module (format: module docstring)."""
    reference = _callable(p, module, "reference", required=True)
    make_inputs = _callable(p, module, "make_inputs", required=True)
    assert reference is not None and make_inputs is not None
    shapes = _shape_list(p, module, "SHAPES", required=True)
    interpret_shapes = _shape_list(p, module, "INTERPRET_SHAPES", required=False)
    interpret_shapes = interpret_shapes or default_interpret_shapes(shapes)
    odd_shapes = _shape_list(p, module, "ODD_SHAPES", required=False)
    smoke = getattr(module, "SMOKE_SHAPE", None)
    smoke_shape = tuple(int(d) for d in smoke) if smoke is not None else interpret_shapes[0]
    dtypes = tuple(getattr(module, "DTYPES", DEFAULT_DTYPES))
    for dt in dtypes:
        if not isinstance(dt, torch.dtype):
            raise SpecError(p, f"DTYPES must hold torch dtypes, got {dt!r}")
    tunables = dict(getattr(module, "TUNABLES", {}) or {})
    kernel_ref = getattr(module, "TRITON_KERNEL", None)
    launcher_ref = getattr(module, "TRITON_LAUNCHER", None)
    if launcher_ref is not None and kernel_ref is None:
        raise SpecError(p, "TRITON_LAUNCHER given without TRITON_KERNEL")
    kernel = launcher = None
    if kernel_ref is not None:
        from porter.user_kernel import load as load_user_kernel  # by file or import path

        kernel, launcher = load_user_kernel(p, kernel_ref, launcher_ref, tunables,
                                            _callable(p, module, "TRITON_CALL", required=False))
    name = getattr(module, "NAME", None) or (p.parent.name if p.stem == "spec" else p.stem)
    description = (
        getattr(module, "DESCRIPTION", None) or (inspect.getdoc(module) or "").split("\n\n")[0]
    )
    spec = OpSpec(
        name=str(name),
        path=p,
        reference=reference,
        make_inputs=make_inputs,
        shapes=shapes,
        interpret_shapes=interpret_shapes,
        smoke_shape=smoke_shape,
        dtypes=dtypes,
        triton_kernel=kernel,
        tunables=tunables,
        triton_launcher=launcher,
        triton_constexprs=_callable(p, module, "TRITON_CONSTEXPRS", required=False),
        source_kind="spec",
        bytes_moved=_callable(p, module, "BYTES", required=False),
        flops=_callable(p, module, "FLOPS", required=False),
        description=description,
        odd_shapes=odd_shapes,
        adversarial=_callable(p, module, "ADVERSARIAL", required=False),
        shape_names=tuple(getattr(module, "SHAPE_NAMES", ())),
    )
    validate(spec)
    return spec
