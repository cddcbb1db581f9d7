"""Compatibility: the pack loader lives in `porter.packs.loader`."""

from __future__ import annotations

from porter.packs.loader import Choice  # noqa: F401
from porter.packs.loader import PackedOp  # noqa: F401
from porter.packs.loader import PackFallbackWarning  # noqa: F401
from porter.packs.loader import ensure_interpreter_ready  # noqa: F401
from porter.packs.loader import load_pack  # noqa: F401
