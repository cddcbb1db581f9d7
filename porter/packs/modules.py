"""Pack files as Python: executed from the bytes verified at load time (never read again from
disk), the interpreter made ready for them, and the reference behind the launcher interface."""

from __future__ import annotations

import importlib.util
import itertools
import linecache
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from porter.packs.format import sha256_bytes
from targets.interpreter import triton_interpret


def ensure_interpreter_ready() -> str | None:
    """Make sure Triton's interpreter can run kernels in this process; None when it can.

    `triton.language` decides at its own import whether its library functions (`tl.sum`,
    `tl.max`, ...) are interpreted: imported without TRITON_INTERPRET=1 they are compiled-only
    JITFunctions, and every interpreted kernel that calls them fails with "Cannot call
    @triton.jit'd outside of the scope of a kernel". So it is imported here with the variable set
    (cross-compiling still works afterwards; the variable is restored).

    Returns:
        None when ready, else the reason the interpreter cannot work in this process.
    """
    if "triton.language" not in sys.modules:
        with triton_interpret(True):
            # triton.language first, for its import-time decision; then Triton's code generator,
            # which imports gluon, which asserts at import that tl's library functions are
            # JITFunctions unless the interpreter is on: import it now, too, or the first
            # cross-compile after this fails with a bare AssertionError.
            import triton.language  # noqa: F401, I001
            import triton.compiler.code_generator  # noqa: F401
        return None
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    if isinstance(getattr(tl, "sum", None), JITFunction) and type(tl.sum) is JITFunction:
        return ("triton.language was imported before TRITON_INTERPRET=1 was set, so Triton's "
                "interpreter cannot run kernels in this process; set TRITON_INTERPRET=1 before "
                "importing triton (or import porter first)")
    return None


_module_ids = itertools.count()


@dataclass(frozen=True)
class Verified:
    """A module executed from verified bytes, and the text pinned for it in linecache."""

    module: ModuleType
    filename: str  # "<porter pack ...>": the module's code objects carry it
    text: str


def exec_verified(data: bytes, *, label: str, display: str) -> Verified:
    """Execute verified pack bytes as a fresh module; nothing is read from disk.

    Triton's @jit does not compile the bytecode: it reads the function's source through `inspect`
    (linecache) when it decorates, and under the interpreter again on the first run, and uses
    that text. So the verified text is pinned in linecache under a "<...>" name, which linecache
    never reads from disk, and the code objects carry that name. The module name is unique, since
    triton looks a function's module up in sys.modules and two packs may hold the same file.

    Args:
        data: the file's bytes, already checked against the manifest.
        label: part of the module name (e.g. "rmsnorm_ref").
        display: the pack and file, shown in tracebacks (e.g. "rmsnorm/nvidia/h100/x.py").
    """
    text = importlib.util.decode_source(data)
    filename = f"<porter pack {display} sha256:{sha256_bytes(data)[:12]}>"
    pin_source(filename, text)
    name = f"_porter_pack_{''.join(c if c.isalnum() else '_' for c in label)}_{next(_module_ids)}"
    module = ModuleType(name)
    sys.modules[name] = module  # triton.jit looks its function's module up while decorating
    try:
        exec(compile(text, filename, "exec", dont_inherit=True), module.__dict__)  # noqa: S102
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return Verified(module, filename, text)


def pin_source(filename: str, text: str) -> None:
    # mtime None marks an entry that linecache.checkcache never re-validates against a file.
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)


class ReferenceModule:
    """The reference op behind a generated module's `launch` interface (out contract)."""

    def __init__(self, reference: Any) -> None:
        self.reference = reference

    def launch(self, *inputs: Any, out: Any = None, config: Any = None) -> Any:
        result = self.reference(*inputs)
        if out is None:
            return result
        if isinstance(out, torch.Tensor):
            return out.copy_(result)
        for o, r in zip(out, result, strict=True):
            o.copy_(r)
        return out
