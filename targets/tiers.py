"""Verification tiers: how far a kernel got, lowest to highest (DESIGN.md, "Verification tiers").

The one owner of the tier names. `Tier` is a `StrEnum`, so a tier compares equal to its name
("compiled" == Tier.COMPILED), formats as it, and serialises to it in JSON, YAML and SQLite.

| tier        | meaning                                                                      |
|-------------|------------------------------------------------------------------------------|
| emitted     | source generated                                                             |
| compiled    | cross-compiled for the target's arch; registers, shared memory, spills fit  |
| interpreted | passes the correctness stages under the Triton interpreter (CPU)             |
| emulated    | Metal source executed on the CPU by an MSL executor, passing the stages      |
| measured    | passes the correctness stages and is timed on the real device                |
"""

from __future__ import annotations

from enum import StrEnum


class Tier(StrEnum):
    EMITTED = "emitted"
    COMPILED = "compiled"
    INTERPRETED = "interpreted"
    EMULATED = "emulated"
    MEASURED = "measured"


TIERS: tuple[str, ...] = tuple(t.value for t in Tier)  # lowest to highest
# "correct on a CPU": the checked tiers below measured (what the pack loader may run on a CPU)
CHECKED_ON_CPU: tuple[str, ...] = (Tier.INTERPRETED.value, Tier.EMULATED.value)


def tier_rank(tier: str) -> int:
    """Position of `tier` in TIERS (0 = emitted); -1 for anything else ("none", "")."""
    return TIERS.index(tier) if tier in TIERS else -1
