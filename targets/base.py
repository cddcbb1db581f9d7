"""The seam every code-target backend implements (Triton for NVIDIA, Triton for AMD, Metal).

A backend turns one kernel + one launch config into target code without needing the device:
it cross-compiles (or, for Metal, only emits), reads the resources the compiled kernel uses,
and says whether that fits the device described by a `HardwareModel`, and if not, why.
"""

from __future__ import annotations

from abc import ABC
from abc import abstractmethod
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

from targets.tiers import Tier

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel


@dataclass(frozen=True)
class KernelRef:
    """One kernel to build: a `@triton.jit` function (or Metal source) and how to specialize it.

    signature: Triton type per runtime argument, e.g. {"x_ptr": "*bf16", "n_cols": "i32"}.
    constexprs: value per constexpr argument, e.g. {"BLOCK_N": 4096}.
    """

    name: str
    fn: Any = None  # triton.runtime.JITFunction for Triton backends
    source: str = ""  # source text (Metal backend, and for the record)
    signature: dict[str, str] = field(default_factory=dict)
    constexprs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchConfig:
    """Launch knobs a backend understands. Unknown-to-the-target knobs are rejected, not ignored."""

    num_warps: int = 4
    num_stages: int = 2
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. {"waves_per_eu": 2} on AMD


@dataclass(frozen=True)
class ResourceUsage:
    """What one compiled kernel uses, read from the compiled artifact (never guessed)."""

    registers_per_thread: int | None  # NVIDIA regs / AMD VGPRs (arch+acc); None if unreadable
    shared_memory_bytes: int  # static + dynamic shared memory / LDS per block
    spill_bytes: int  # local-memory spill stores (NVIDIA) / scratch (AMD)
    threads_per_block: int
    # e.g. {"sgprs": 40, "occupancy_reported": 8}
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Occupancy:
    blocks_per_unit: int  # resident blocks per SM/CU
    warps_per_unit: int
    fraction: float  # warps_per_unit / max_warps_per_unit
    limited_by: str  # "registers" | "shared_memory" | "threads" | "blocks" | "warps"


@dataclass(frozen=True)
class CompileReport:
    """Result of building one kernel for one device."""

    target: str  # hardware model name, e.g. "h100"
    backend: str  # "triton-cuda" | "triton-hip" | "metal"
    arch: str  # "90", "gfx942", "apple-m4"
    tier: str  # "compiled" (cross-compiled, resources read) or "emitted" (source only)
    fits: bool
    reasons: tuple[str, ...] = ()  # why it does not fit: which limit, by how much
    resources: ResourceUsage | None = None
    occupancy: Occupancy | None = None
    artifacts: dict[str, str] = field(default_factory=dict)  # "ptx"/"amdgcn"/"metal" -> text
    binary: bytes | None = None  # cubin / hsaco
    notes: tuple[str, ...] = ()  # e.g. "Metal: code emission only, no compiler on this machine"


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do on this machine; the porter asks this instead of testing names.

    language: what it emits: "triton" (a Python module of `@triton.jit` kernels and a
        `launch`) or "metal" (Metal Shading Language source).
    compiles_here: it builds for the target's arch here and reads the resources (tier
        compiled); False: source is emitted and checked statically (tier emitted).
    cpu_check: how a candidate's correctness is checked without the device: "interpreter"
        (the Triton interpreter; tier interpreted), "emulator" (an MSL executor on the CPU;
        tier emulated), or None (not checked here).
    runs_existing_kernels: a spec's own Triton kernel (TRITON_KERNEL) runs on it, so it
        competes as a candidate.
    fp32_dot_precisions: the `input_precision` values the installed compiler takes for a
        tl.dot of fp32 operands on this backend (Triton's allowed_dot_input_precisions), e.g.
        tf32x3 on CUDA and not on HIP; () where the backend emits no Triton.
    """

    language: str
    compiles_here: bool
    cpu_check: str | None
    runs_existing_kernels: bool
    fp32_dot_precisions: tuple[str, ...] = ()

    @property
    def tier_here(self) -> str:
        """The highest tier a candidate reaches on a machine without the device."""
        if self.cpu_check == "interpreter":
            return Tier.INTERPRETED
        if self.cpu_check == "emulator":
            return Tier.EMULATED
        return Tier.COMPILED if self.compiles_here else Tier.EMITTED


TRITON_CAPABILITIES = Capabilities(language="triton", compiles_here=True, cpu_check="interpreter",
                                   runs_existing_kernels=True)


class CompileError(Exception):
    """A kernel failed to build for a target; the message names kernel, target and cause."""


class TargetBackend(ABC):
    """One code dialect. Instances are stateless; look them up through `targets.registry`."""

    name: str  # "triton-cuda"

    def capabilities(self) -> Capabilities:
        """What this backend does here, e.g. triton-cuda: Capabilities("triton",
        compiles_here=True, cpu_check="interpreter", runs_existing_kernels=True); metal:
        ("metal", False, None, False) until an MSL executor is present. Never raises.
        This default claims nothing beyond emitting source in the backend's own dialect."""
        return Capabilities(language=self.name, compiles_here=False, cpu_check=None,
                            runs_existing_kernels=False)

    @abstractmethod
    def supports(self, hw: HardwareModel) -> bool:
        """True if this backend builds for `hw` (e.g. triton-cuda for h100, not for mi300x)."""

    @abstractmethod
    def compile(self, kernel: KernelRef, config: LaunchConfig, hw: HardwareModel) -> CompileReport:
        """Build `kernel` with `config` for `hw`, read its resources and check they fit.

        Returns a report with fits=False and the reasons when a limit is exceeded.
        Raises CompileError when the compiler itself rejects the kernel.
        """

    @abstractmethod
    def validate_config(self, config: LaunchConfig, hw: HardwareModel) -> list[str]:
        """Reasons `config` cannot run on `hw` before compiling (empty list = plausible).

        Example: num_warps=32 on MI300X -> ["32 wavefronts x 64 lanes = 2048 threads > 1024 per
        workgroup"]. The search prunes with this, the launcher asserts it.
        """
