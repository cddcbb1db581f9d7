"""Verification tiers: how far a kernel got, lowest to highest (DESIGN.md, "Verification tiers").

The one owner of the tier names. `Tier.COMPILED` is the plain string "compiled" (not an enum
member), so a tier goes into JSON, YAML, SQLite and f-strings as its name with no conversion;
`TierName` types it.

| tier        | meaning                                                                      |
|-------------|------------------------------------------------------------------------------|
| emitted     | source generated                                                             |
| compiled    | cross-compiled for the target's arch; registers, shared memory, spills fit  |
| interpreted | passes the correctness stages under the Triton interpreter (CPU)             |
| emulated    | Metal source executed on the CPU by an MSL executor, passing the stages      |
| measured    | passes the correctness stages and is timed on the real device                |
"""

from __future__ import annotations

from typing import Final
from typing import Literal

TierName = Literal["emitted", "compiled", "interpreted", "emulated", "measured"]


class Tier:
    """The tier names as constants: Tier.EMITTED ... Tier.MEASURED."""

    EMITTED: Final = "emitted"
    COMPILED: Final = "compiled"
    INTERPRETED: Final = "interpreted"
    EMULATED: Final = "emulated"
    MEASURED: Final = "measured"


# lowest to highest
TIERS: tuple[str, ...] = (Tier.EMITTED, Tier.COMPILED, Tier.INTERPRETED, Tier.EMULATED,
                          Tier.MEASURED)
# "correct on a CPU": the checked tiers below measured (what the pack loader may run on a CPU)
CHECKED_ON_CPU: tuple[str, ...] = (Tier.INTERPRETED, Tier.EMULATED)


def tier_rank(tier: str) -> int:
    """Position of `tier` in TIERS (0 = emitted); -1 for anything else ("none", "")."""
    return TIERS.index(tier) if tier in TIERS else -1
