"""Kernel Porter: port one reference kernel to every accelerator you own, with the evidence.

`import porter` stays light: torch and triton load only when something that needs them is used
(`porter.load_pack` imports the loader on first access).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from porter.packs.loader import PackedOp
    from porter.packs.loader import load_pack
    from porter.patching import patch

__all__ = ["PackedOp", "load_pack", "patch"]


def __getattr__(name: str) -> Any:
    if name in ("load_pack", "PackedOp"):
        from porter.packs import loader

        return getattr(loader, name)
    if name == "patch":
        from porter.patching import patch

        return patch
    raise AttributeError(f"module 'porter' has no attribute {name!r}")
