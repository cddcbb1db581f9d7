"""Kernel packs: the format (`format`: layout, manifest keys, buckets, tiers), the integrity
checks (`verify`), the writer (`writer`) and the runtime loader (`loader`: `load_pack`)."""

from __future__ import annotations

from porter.packs.loader import PackedOp
from porter.packs.loader import load_pack

__all__ = ["PackedOp", "load_pack"]
