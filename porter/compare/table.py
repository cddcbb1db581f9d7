"""What a comparison is made of: one `Row` per device, shape and dtype, the `Comparison` of an
op across devices, and the defaults (store, packs, validation file, devices) it reads."""

from __future__ import annotations

from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from porter.errors import PorterError

COPY_OP = "device_copy"  # store op name of a same-size device copy (shape: [bytes])
DEFAULT_STORE = Path("runs/results.sqlite")
DEFAULT_PACKS = Path("packs")
DEFAULT_VALIDATION = Path(__file__).resolve().parents[2] / "results" / \
    "projection-validation.json"
ALL_DEVICES = ("a100", "h100", "h200", "b200", "mi300x", "mi355x", "m4")

Key = tuple[tuple[int, ...], str]  # (shape, dtype)


class CompareError(PorterError):
    """`porter compare` cannot run: no such op, pack or validation file (the message says)."""


@dataclass
class Row:
    """One device at one shape and dtype."""

    device: str
    shape: tuple[int, ...]
    dtype: str
    label: str  # "measured" | "projected"
    time_ms: float | None
    tier: str = ""
    kernel: str = ""  # the config, as text
    source: str = ""  # where the number comes from
    bound: str = ""
    gbps: float | None = None
    tflops: float | None = None
    pct_peak: float | None = None
    peak_basis: str = ""  # "measured ceiling" | "datasheet"
    speedup_vs_eager: float | None = None
    error_pct: float | None = None  # expected error of a projection (p90, percent)
    validated: bool | None = None  # was that error measured on this device pair?
    calibration: str | None = None  # the measured device a transfer started from

    @property
    def projected(self) -> bool:
        return self.label == "projected"


@dataclass
class Comparison:
    op: str
    devices: list[str]
    keys: list[Key]
    rows: list[Row]
    portability: float | None  # geometric mean over devices of each device's % of peak
    per_device_pct: dict[str, float | None]
    validation_source: str
    fleet: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def row(self, device: str, key: Key) -> Row | None:
        for r in self.rows:
            if r.device == device and (r.shape, r.dtype) == key:
                return r
        return None

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "devices": self.devices,
                "shapes": [{"shape": list(s), "dtype": d} for s, d in self.keys],
                "portability_pct": self.portability, "per_device_pct": self.per_device_pct,
                "validation_source": self.validation_source, "fleet": self.fleet,
                "notes": self.notes,
                "rows": [{**asdict(r), "shape": list(r.shape)} for r in self.rows]}
