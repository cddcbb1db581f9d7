"""Import generated Triton source as a module (interpreted on CPU, or compiled)."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from types import ModuleType

from targets.interpreter import import_file
from targets.interpreter import set_interpret
from targets.interpreter import triton_interpret


def load_generated_module(source: str, name: str, interpret: bool) -> ModuleType:
    """Write `source` to a temp file and import it.

    Triton's `@jit` decides at decoration time whether to interpret, so TRITON_INTERPRET is set
    for the import. With interpret=True it stays "1" afterwards (interpreted kernels read it
    while they run); with interpret=False it is restored to its previous value.

    Args:
        source: one Python module's text.
        name: a readable module name (made unique by a hash of the source).
        interpret: import under the Triton interpreter (CPU) or for real compilation.

    Returns:
        The imported module (also kept in sys.modules, which triton's JIT needs for source
        lookups).
    """
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    mod_name = f"porter_gen_{''.join(c if c.isalnum() else '_' for c in name)}_{digest}"
    folder = Path(tempfile.gettempdir()) / "porter_generated"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{mod_name}.py"
    if not path.exists() or path.read_text() != source:
        path.write_text(source)
    name = mod_name + ("_i" if interpret else "_c")
    if interpret:
        # left set: the interpreted kernels must still see it when they run
        set_interpret(True)
        return import_file(path, name)
    with triton_interpret(False):
        module = import_file(path, name)
    return module
