"""What the six roles hand each other: small frozen dataclasses that serialise to JSON and back.

One artifact per role and target, written into the run folder (`runs/<id>/<target>/`):

| role          | artifact (class)            | file                                        |
|---------------|-----------------------------|---------------------------------------------|
| Planner       | `TuningPlan`                | `tuning_plan.json`                          |
| Search        | `Candidates`                | `candidates.json`                           |
| Kernel Writer | `KernelSource`              | `kernel.py` / `kernel.metal`                |
| Benchmark     | `BenchRow` rows             | `bench_results.csv` (the harness judges)    |
| Debugger      | `Diagnosis` (+ KernelSource)| `debug_report.json`, `kernel_fixed.py`      |
|               |                             | when a fix passed                           |
| Profiler      | `ProfileReport`             | `profile_report.json`                       |

Everything here is plain data (str, int, float, bool, tuples, dicts of those): `to_dict()` /
`from_dict()` round-trip exactly, so an LLM implementation can be fed and recorded with the same
types the rule-based one uses. This module imports nothing heavier than the standard library.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from pathlib import Path
from typing import Any
from typing import TypeVar

T = TypeVar("T", bound="Artifact")

# File names of the per-target artifacts (one owner; the loop and the tests read them here).
TUNING_PLAN = "tuning_plan.json"
CANDIDATES = "candidates.json"
KERNEL_TRITON = "kernel.py"
KERNEL_METAL = "kernel.metal"
BENCH_RESULTS = "bench_results.csv"
DEBUG_REPORT = "debug_report.json"
KERNEL_FIXED = "kernel_fixed.py"
PROFILE_REPORT = "profile_report.json"
# The first line of kernel.py / kernel_fixed.py: this prefix, then the KernelSource's metadata
# as one line of JSON (everything but the source text), so the file stays importable.
KERNEL_HEADER = "# porter-kernel: "


def _plain(value: Any) -> Any:
    """JSON-friendly copy: tuples become lists, dataclasses dicts, unknown objects their str."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def shape_tuple(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value or ())


class Artifact:
    """Mixin: JSON round trip for a frozen dataclass whose fields are plain data."""

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))  # type: ignore[call-overload]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls: type[T], raw: dict[str, Any]) -> T:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in raw.items() if k in names})

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        return cls.from_dict(json.loads(text))

    def write(self, path: str | Path) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.to_json())
        return out


# -- Planner --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShapePlan(Artifact):
    """The roofline view of one shape on one device, and what to try first."""

    shape: tuple[int, ...]
    dtype: str
    bytes_moved: int
    flops: int
    memory_floor_ms: float
    compute_floor_ms: float
    floor_ms: float
    bound: str  # "memory" | "compute" | "launch"
    knob_order: tuple[str, ...]
    preferred: dict[str, Any] = field(default_factory=dict)  # knob -> value to try first
    note: str = ""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ShapePlan:
        return cls(**{**raw, "shape": shape_tuple(raw["shape"]),
                      "knob_order": tuple(raw.get("knob_order", ()))})


@dataclass(frozen=True)
class TuningPlan(Artifact):
    """The Planner's artifact (`tuning_plan.json`): every shape x dtype on the device's roofline."""

    target: str
    op: str
    shapes: tuple[ShapePlan, ...]

    def for_shape(self, shape: tuple[int, ...], dtype: str) -> ShapePlan | None:
        for sp in self.shapes:
            if sp.shape == tuple(shape) and sp.dtype == dtype:
                return sp
        return None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TuningPlan:
        return cls(target=raw["target"], op=raw["op"],
                   shapes=tuple(ShapePlan.from_dict(s) for s in raw.get("shapes", ())))


# -- Search ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProposedConfig(Artifact):
    """One config the Search role offers, with where it came from."""

    config: dict[str, Any]
    origin: str = "space"  # "default" | "space" | "existing" | "fix" (the Debugger's)
    why: str = ""


@dataclass(frozen=True)
class RejectedConfig(Artifact):
    config: dict[str, Any]
    reasons: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RejectedConfig:
        return cls(config=dict(raw["config"]), reasons=tuple(raw.get("reasons", ())))


@dataclass(frozen=True)
class UnitCandidates(Artifact):
    """The ordered candidates of one (shape, dtype) unit, as `candidates.json` lists them."""

    shape: tuple[int, ...]
    dtype: str
    bucket: str
    candidates: tuple[ProposedConfig, ...]
    rejected: tuple[RejectedConfig, ...] = ()
    space_size: int = 0  # variants offered before pruning
    capped: int = 0  # valid candidates left out by the budget

    @property
    def key(self) -> str:
        return f"{'x'.join(map(str, self.shape))}/{self.dtype}"

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> UnitCandidates:
        return cls(shape=shape_tuple(raw["shape"]), dtype=raw["dtype"],
                   bucket=raw.get("bucket", ""),
                   candidates=tuple(ProposedConfig.from_dict(c) for c in raw["candidates"]),
                   rejected=tuple(RejectedConfig.from_dict(r) for r in raw.get("rejected", ())),
                   space_size=int(raw.get("space_size", 0)), capped=int(raw.get("capped", 0)))


@dataclass(frozen=True)
class Candidates(Artifact):
    """The Search role's artifact (`candidates.json`): keyed "<shape>/<dtype>" on disk."""

    target: str
    units: tuple[UnitCandidates, ...]

    def to_dict(self) -> dict[str, Any]:
        # keyed by unit: what a reader (and the tests) look up
        return {u.key: u.to_dict() for u in self.units}

    @classmethod
    def from_dict(cls, raw: dict[str, Any], target: str = "") -> Candidates:
        return cls(target=target, units=tuple(UnitCandidates.from_dict(v) for v in raw.values()))

    @classmethod
    def from_json(cls, text: str, target: str = "") -> Candidates:
        return cls.from_dict(json.loads(text), target)


# -- Kernel Writer --------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelSource(Artifact):
    """The Kernel Writer's artifact: one kernel module for one target and config.

    language "triton": a Python module with `launch(*inputs, out=None, config=None)`;
    "metal": Metal Shading Language source.
    """

    target: str
    language: str  # "triton" | "metal"
    source: str
    config: dict[str, Any] = field(default_factory=dict)
    origin: str = "generated"  # "generated" | "existing" | "fixed"
    bucket: str = ""
    dtype: str = ""
    note: str = ""  # e.g. the failure a fixed kernel addresses

    @property
    def filename(self) -> str:
        return KERNEL_METAL if self.language == "metal" else KERNEL_TRITON

    def header(self) -> dict[str, Any]:
        return {k: v for k, v in self.to_dict().items() if k != "source"}

    def write_file(self, path: str | Path) -> Path:
        """Write the source with its metadata as a first comment line (Triton) or comment
        block (Metal); `read_file` reads both back."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        meta = json.dumps(self.header(), sort_keys=True)
        prefix = KERNEL_HEADER if self.language != "metal" else "// " + KERNEL_HEADER[2:]
        out.write_text(f"{prefix}{meta}\n{self.source}")
        return out

    @classmethod
    def read_file(cls, path: str | Path) -> KernelSource:
        text = Path(path).read_text()
        first, _, source = text.partition("\n")
        meta = json.loads(first.split(KERNEL_HEADER[2:], 1)[1])
        return cls.from_dict({**meta, "source": source})


# -- Benchmark ------------------------------------------------------------------------------
BENCH_COLUMNS = ("target", "bucket", "dtype", "config", "source_hash", "tier", "verdict",
                 "time_ms", "p20_ms", "p80_ms", "label", "pct_of_peak", "reason")


@dataclass(frozen=True)
class BenchRow(Artifact):
    """One verdict of the Benchmark role (its judge is the harness): a row of bench_results.csv."""

    target: str
    bucket: str
    dtype: str
    config: str  # canonical JSON of the config (porter.ledger.config_key)
    source_hash: str
    tier: str
    verdict: str  # kept | reverted | rejected | skipped
    time_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    label: str = ""  # "measured" | "projected"
    pct_of_peak: float | None = None
    reason: str = ""


def write_bench_csv(rows: list[BenchRow] | tuple[BenchRow, ...], path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=BENCH_COLUMNS)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.to_dict().items()})
    out.write_text(buf.getvalue())
    return out


def read_bench_csv(path: str | Path) -> list[BenchRow]:
    def num(text: str) -> float | None:
        return float(text) if text not in ("", None) else None

    rows = []
    with Path(path).open(newline="") as fh:
        for raw in csv.DictReader(fh):
            rows.append(BenchRow(**{**raw, **{k: num(raw[k]) for k in
                                              ("time_ms", "p20_ms", "p80_ms", "pct_of_peak")}}))
    return rows


# -- Debugger -------------------------------------------------------------------------------
@dataclass(frozen=True)
class FailingInput(Artifact):
    """The smallest input a failure was seen at (shape and dtype)."""

    shape: tuple[int, ...]
    dtype: str
    stage: str = ""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> FailingInput:
        return cls(shape=shape_tuple(raw["shape"]), dtype=raw["dtype"], stage=raw.get("stage", ""))


@dataclass(frozen=True)
class Diagnosis(Artifact):
    """The Debugger's verdict on one failed candidate.

    kind: "misfit (registers)", "misfit (shared memory)", "compile error", "failed sweep at
    bf16", "crashed", ... (the port's failure kinds). fix_config: the config a rule proposes
    (None: no rule knows a fix); fixed: the fix went through the judge and passed.
    """

    target: str
    bucket: str
    dtype: str
    config: dict[str, Any]
    failure: str  # the judge's reason, whole
    kind: str
    detail: str = ""
    classification: str = ""  # compile errors: "syntax", "type", "resources", "unsupported", ...
    smallest_failing: FailingInput | None = None
    fix_config: dict[str, Any] | None = None
    fix_change: str = ""  # "num_stages 4 -> 3"
    fixed: bool = False
    fix_verdict: str = ""  # the judge's word on the fix

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Diagnosis:
        small = raw.get("smallest_failing")
        return cls(**{**raw, "smallest_failing": FailingInput.from_dict(small) if small else None})


@dataclass(frozen=True)
class DebugReport(Artifact):
    """Every diagnosis of one target in one run (`debug_report.json`)."""

    target: str
    diagnoses: tuple[Diagnosis, ...] = ()

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DebugReport:
        return cls(target=raw["target"],
                   diagnoses=tuple(Diagnosis.from_dict(d) for d in raw.get("diagnoses", ())))


# -- Profiler -------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelResources(Artifact):
    """What one compiled kernel uses, from the backend's read-out (never guessed)."""

    kernel: str
    registers: int | None = None
    spill_bytes: int | None = None
    smem_bytes: int | None = None
    occupancy: float | None = None  # resident warps / max warps per SM/CU
    blocks_per_unit: int | None = None
    limited_by: str = ""


@dataclass(frozen=True)
class UnitProfile(Artifact):
    """The kept kernel of one (bucket, dtype): resources, roofline position, counters."""

    bucket: str
    dtype: str
    shape: tuple[int, ...]
    config: dict[str, Any]
    tier: str
    kernels: tuple[KernelResources, ...] = ()
    limits: dict[str, Any] = field(default_factory=dict)  # the device's, from hwmodels
    roofline: dict[str, Any] = field(default_factory=dict)  # bytes, flops, floor, time, % peak
    bottleneck: str = ""  # one line: what binds and what would help
    counters: dict[str, Any] | None = None  # Nsight Compute / rocprof when measured, else None
    counters_note: str = ""

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> UnitProfile:
        kernels = tuple(KernelResources.from_dict(k) for k in raw.get("kernels", ()))
        return cls(**{**raw, "shape": shape_tuple(raw["shape"]), "kernels": kernels})


@dataclass(frozen=True)
class ProfileReport(Artifact):
    """The Profiler's artifact (`profile_report.json`) for one target."""

    target: str
    units: tuple[UnitProfile, ...] = ()

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ProfileReport:
        return cls(target=raw["target"],
                   units=tuple(UnitProfile.from_dict(u) for u in raw.get("units", ())))
