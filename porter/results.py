"""What a port returns: per target the kept kernel of each shape bucket and dtype, with its
evidence; the pack writer (`porter.packs.writer`) turns it into a pack."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from targets.tiers import tier_rank


@dataclass(frozen=True)
class BucketChoice:
    """The kept kernel of one target for one shape bucket and dtype."""

    bucket: str
    dtype: str
    shape: tuple[int, ...]
    config: dict[str, Any]
    source: str  # the Triton module (config given at launch) or Metal source (config baked in)
    tier: str
    numbers: dict[str, Any] = field(default_factory=dict)
    origin: str = "generated"  # "generated" (porter.codegen) | "existing" (the spec's kernel)


@dataclass(frozen=True)
class TargetResult:
    target: str
    vendor: str
    backend: str
    arch: str
    hw_model_hash: str
    tolerance: str
    choices: tuple[BucketChoice, ...]
    notes: tuple[str, ...] = ()
    # one line per (bucket, dtype) that got no kernel: what its candidates did, by kind
    failures: tuple[str, ...] = ()

    @property
    def tier(self) -> str:
        """Lowest tier over the buckets (what every kept config reached); "none" when empty."""
        return min((c.tier for c in self.choices), key=tier_rank) if self.choices else "none"


@dataclass(frozen=True)
class PortResult:
    op: str
    spec_path: Path
    run_dir: Path
    targets: tuple[TargetResult, ...]
    versions: dict[str, Any]
    fusion: dict[str, Any]
    signature: tuple[str, ...]  # "tensor" | "float" | "int" | "bool" per input
    reference_function: str | None = None  # attribute of reference.py, or None: load_spec
    pack_path: Path | None = None
    checks_run: int = 0
    checks_shared: int = 0
    budget: str = ""  # the search budget, as the output states it
    warnings_file: Path | None = None  # library warnings captured during the port, if any
    # the traced ranks and whether extra leading dims merge into the rows (porter.packs.leading)
    leading_dims: dict[str, Any] | None = None

    @property
    def missing(self) -> tuple[TargetResult, ...]:
        """The targets that got no kernel at all (the CLI exits 1 naming them)."""
        return tuple(t for t in self.targets if not t.choices)
