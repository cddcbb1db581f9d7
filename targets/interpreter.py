"""The Triton interpreter's environment and importing a Python file: the one owner of both.

`@triton.jit` decides when the decorator runs whether a kernel is interpreted (TRITON_INTERPRET
set to "1") or compiled, so whoever imports a kernel file or runs interpreted kernels sets the
variable around it and puts the previous value (or its absence) back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

INTERPRET_VAR = "TRITON_INTERPRET"


def set_interpret(on: bool) -> None:
    """TRITON_INTERPRET=1 (or 0) from now on: before any kernel module of the process imports."""
    os.environ[INTERPRET_VAR] = "1" if on else "0"


@contextlib.contextmanager
def triton_interpret(on: bool | None) -> Iterator[None]:
    """TRITON_INTERPRET=1 (True) or 0 (False) inside the block, restored after; None leaves it
    as it is."""
    if on is None:
        yield
        return
    old = os.environ.get(INTERPRET_VAR)
    set_interpret(on)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(INTERPRET_VAR, None)
        else:
            os.environ[INTERPRET_VAR] = old


def import_file(path: str | os.PathLike[str], module_name: str, *, register: bool = True,
                own_folder: bool = False, source: str | None = None) -> ModuleType:
    """Import the Python file at `path` as a fresh module named `module_name`.

    Args:
        register: keep it in sys.modules (Triton's JIT looks a kernel's source up there).
        own_folder: put the file's folder first on sys.path while it imports (a kernel file
            importing its siblings), unless it is there already.
        source: execute this text instead of the file's (line numbers still name the file).

    Raises:
        ImportError: the file cannot be imported as a Python module. Whatever executing the
            file raises propagates unchanged (callers name the file).
    """
    file = Path(path)
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"{file}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[module_name] = module
    folder = str(file.resolve().parent)
    added = own_folder and folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        if source is None:
            spec.loader.exec_module(module)
        else:
            exec(compile(source, str(file), "exec"), module.__dict__)  # noqa: S102 - the user's file
    except BaseException:
        if register:
            sys.modules.pop(module_name, None)
        raise
    finally:
        if added:
            sys.path.remove(folder)
    return module
