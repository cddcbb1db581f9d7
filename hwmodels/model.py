"""Typed, frozen view of one device's hardware model (one YAML file in hwmodels/devices/).

Every number in the YAML carries a `source`; the loader turns the YAML into these
dataclasses and keeps the source beside each value (`Fact`). Datasheet numbers
(`kind: spec`) and numbers derived from them (`kind: derived`) live in the main body;
ceilings measured on real hardware live apart, in `measured:` (see `MeasuredCeiling`).

Units are in the field names: `_gbps` is 1e9 bytes/s, `_tflops` is 1e12 FLOP/s, `_bytes` bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Literal

Vendor = Literal["nvidia", "amd", "apple"]
Backend = Literal["triton-cuda", "triton-hip", "metal"]
FactKind = Literal["spec", "derived", "measured"]
# Dtypes whose dense throughput a model may state. fp32 is SIMT/vector; tf32 is the
# matrix-unit float32 mode; the rest are matrix-unit (tensor core / MFMA / simdgroup) rates.
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "fp4")


@dataclass(frozen=True)
class Fact:
    """One number with where it came from."""

    value: float
    source: str
    kind: FactKind = "spec"


@dataclass(frozen=True)
class BuildTarget:
    """How code is built for the device: which backend, which arch string, warp width.

    Example: H100 -> BuildTarget("triton-cuda", "90", 32); MI300X -> ("triton-hip", "gfx942", 64);
    M4 -> ("metal", "apple-m4", 32).
    """

    backend: Backend
    arch: str
    warp_size: int


@dataclass(frozen=True)
class Memory:
    bandwidth_gbps: Fact
    capacity_gb: Fact
    last_level_cache_bytes: Fact  # L2 on NVIDIA, Infinity Cache (MALL) on AMD, SLC on Apple


@dataclass(frozen=True)
class ComputeUnitLimits:
    """Per SM (NVIDIA) / CU (AMD) / GPU core (Apple) limits that decide what fits and occupancy."""

    shared_memory_per_unit_bytes: Fact
    shared_memory_per_block_bytes: Fact  # max one block/workgroup/threadgroup may allocate
    registers_per_unit: Fact  # 32-bit registers in the unit's register file
    max_registers_per_thread: Fact
    max_threads_per_unit: Fact
    max_threads_per_block: Fact
    max_warps_per_unit: Fact  # warps (NVIDIA), wavefronts (AMD), simdgroups (Apple)
    max_blocks_per_unit: Fact


@dataclass(frozen=True)
class MeasuredCeiling:
    """A ceiling measured on real hardware (kept apart from datasheet numbers)."""

    name: str  # "copy_bandwidth_gbps" | "matmul_bf16_tflops" | ...
    value: float
    date: str  # ISO date
    method: str  # what was timed, how bytes/FLOPs were counted, which script
    versions: dict[str, str] = field(default_factory=dict)  # torch, triton, driver, ...


@dataclass(frozen=True)
class HardwareModel:
    name: str  # canonical short name, also the YAML file stem: "h100"
    full_name: str  # "NVIDIA H100 SXM5 80GB"
    aliases: tuple[str, ...]  # other names it answers to: "H100", "NVIDIA H100 80GB HBM3", "sm_90"
    vendor: Vendor
    architecture: str  # "sm_90a", "gfx942", "apple-m4"
    build: BuildTarget
    memory: Memory
    dense_tflops: dict[str, Fact]  # keys from DTYPES; absent key = the chip has no such rate
    compute_units: Fact  # SMs / CUs / GPU cores
    boost_clock_mhz: Fact
    limits: ComputeUnitLimits
    # "tma", "wgmma", "tcgen05", "mfma", "simdgroup_matrix", "fp8_e4m3", ...
    features: frozenset[str]
    measured: tuple[MeasuredCeiling, ...] = ()
    notes: str = ""
    source_file: str = ""  # path of the YAML it was loaded from (for error messages)

    # -- convenience ------------------------------------------------------------------
    @property
    def warp_size(self) -> int:
        return self.build.warp_size

    @property
    def peak_bandwidth_gbps(self) -> float:
        return self.memory.bandwidth_gbps.value

    @property
    def llc_bytes(self) -> int:
        return int(self.memory.last_level_cache_bytes.value)

    def peak_tflops(self, dtype: str) -> float | None:
        fact = self.dense_tflops.get(dtype)
        return None if fact is None else fact.value

    def measured_value(self, name: str) -> float | None:
        """Newest measured ceiling called `name`, or None when none was measured. Of two with
        the same date, the later in the file (entries are appended as they are measured)."""
        found = [(m.date, i, m.value) for i, m in enumerate(self.measured) if m.name == name]
        return max(found)[2] if found else None

    def has(self, feature: str) -> bool:
        return feature in self.features
