"""The judge: correctness stages, timing, roofline and projection, results store, self-test.

Importing `harness` stays light (no torch, no triton); names are resolved on first use:
`harness.check`, `harness.CheckReport`, `harness.tolerance`, `harness.Problem`, and the
submodules (`harness.timing`, `harness.roofline`, `harness.selftest`, ...).
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> (module, attribute or None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "check": ("harness.check", "check"),
    "CheckReport": ("harness.check", "CheckReport"),
    "StageResult": ("harness.check", "StageResult"),
    "Problem": ("harness.problem", "Problem"),
    "Tolerance": ("harness.tolerance", "Tolerance"),
}
_SUBMODULES = frozenset(
    {
        "tolerance",
        "guards",
        "problem",
        "timing",
        "roofline",
        "projection",
        "store",
        "env_info",
        "selftest",
    }
)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module_name, attr = _LAZY[name]
        value = (
            getattr(importlib.import_module(module_name), attr)
            if attr
            else importlib.import_module(module_name)
        )
        # `harness.check` is also a submodule name: pin the function so later lookups get it.
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"harness.{name}")
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)
