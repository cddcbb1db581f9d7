"""A spec's TRITON_KERNEL / TRITON_LAUNCHER references ("kernel.py::_kernel") resolved to
objects, imported under the interpreter setting asked for."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from porter.errors import SpecError
from porter.specs.opspec import import_file
from targets import interpreter as pyfile
from targets.base import KernelRef

log = logging.getLogger(__name__)


def resolve_file_attr(spec_path: Path, ref: str, field_name: str, *, interpret: bool | None = None,
                      cache: dict[Path, ModuleType] | None = None) -> Any:
    """Resolve ``"kernel.py::name"`` relative to the spec file.

    Args:
        spec_path: the spec file the reference is relative to.
        ref: "file.py::attribute".
        field_name: the spec field, for the error message (e.g. "TRITON_KERNEL").
        interpret: None to import under the current TRITON_INTERPRET; True/False to set it
            for the import (and leave it so, as the kernels need it while they run).
        cache: file -> module already imported in this load (kernel and launcher share one).

    Raises:
        SpecError: bad format, missing file, import failure, or missing attribute.
    """
    if not isinstance(ref, str) or "::" not in ref:
        raise SpecError(
            spec_path, f"{field_name} must look like 'kernel.py::_kernel_name', got {ref!r}"
        )
    rel, attr = ref.split("::", 1)
    kpath = (spec_path.parent / rel).resolve()
    if not kpath.is_file():
        raise SpecError(
            spec_path, f"{field_name}: no file {kpath} (paths are relative to the spec)"
        )
    if interpret is not None:
        pyfile.set_interpret(interpret)  # lasting: the kernel's later imports must agree
    module = cache.get(kpath) if cache is not None else None
    if module is None:
        module = import_file(kpath, tag="kernel")
        if cache is not None:
            cache[kpath] = module
    if not hasattr(module, attr):
        available = sorted(n for n in vars(module) if not n.startswith("__"))
        raise SpecError(
            spec_path, f"{field_name}: {rel} has no {attr!r}", f"it defines: {', '.join(available)}"
        )
    return getattr(module, attr)


def _is_triton_kernel(obj: Any) -> bool:
    # JITFunction normally; InterpretedFunction under TRITON_INTERPRET=1. Both wrap `.fn`.
    return type(obj).__name__ in ("JITFunction", "InterpretedFunction") or (
        hasattr(obj, "fn") and hasattr(obj, "arg_names")
    )


def load_kernel(spec_path: Path, ref: str, launcher_ref: str | None, tunables: dict[str, Any],
                *, interpret: bool | None = None) -> tuple[KernelRef, Callable[..., Any] | None]:
    """Load a spec's TRITON_KERNEL (and TRITON_LAUNCHER) into a `KernelRef` and a callable.

    Raises:
        SpecError: when the path is bad or the attribute is not a `@triton.jit` function.
    """
    cache: dict[Path, ModuleType] = {}
    fn = resolve_file_attr(spec_path, ref, "TRITON_KERNEL", interpret=interpret, cache=cache)
    if not _is_triton_kernel(fn):
        raise SpecError(
            spec_path,
            f"TRITON_KERNEL {ref!r} is a {type(fn).__name__}, not a @triton.jit kernel",
        )
    kfile = (spec_path.parent / ref.split("::", 1)[0]).resolve()
    constexprs = {
        k: v for k, v in tunables.items() if k.isupper() and not isinstance(v, (list, tuple))
    }
    kernel = KernelRef(
        name=ref.split("::", 1)[1], fn=fn, source=kfile.read_text(), constexprs=constexprs
    )
    launcher = None
    if launcher_ref is not None:
        launcher = resolve_file_attr(spec_path, launcher_ref, "TRITON_LAUNCHER", cache=cache)
        if not callable(launcher):
            raise SpecError(spec_path, f"TRITON_LAUNCHER {launcher_ref!r} is not callable")
    return kernel, launcher
