"""Triton for AMD CDNA (gfx942, gfx950): cross-compile to amdgcn/hsaco and read its resources.

The AMDGPU backend states what it allocated in comments and metadata of the assembly:
`; TotalNumVgprs:` (architectural + accumulation VGPRs), `; ScratchSize:` (spill/private
bytes per lane), `; Occupancy:` (waves per SIMD it expects) and the static LDS size
(`.group_segment_fixed_size`). Triton's own LDS is dynamic, so `metadata.shared` is added.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from typing import Any

from targets import occupancy as occupancy_mod
from targets.base import CompileError
from targets.base import KernelRef
from targets.base import ResourceUsage
from targets.triton_common import TritonBackend

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

SUPPORTED_ARCHS = ("gfx942", "gfx950")

# name in ResourceUsage.extra -> patterns tried in order (assembly comment, then metadata).
_AMDGCN_FIELDS: dict[str, tuple[str, ...]] = {
    "total_vgprs": (r";\s*TotalNumVgprs:\s*(\d+)", r"\.vgpr_count:\s*(\d+)"),
    "arch_vgprs": (r";\s*NumVgprs:\s*(\d+)",),
    "agprs": (r";\s*NumAgprs:\s*(\d+)", r"\.agpr_count:\s*(\d+)"),
    "sgprs": (r";\s*TotalNumSgprs:\s*(\d+)", r"\.sgpr_count:\s*(\d+)"),
    "scratch_bytes": (r";\s*ScratchSize:\s*(\d+)", r"\.private_segment_fixed_size:\s*(\d+)"),
    "occupancy_reported": (r";\s*Occupancy:\s*(\d+)",),
    "static_lds_bytes": (r"\.group_segment_fixed_size:\s*(\d+)", r";\s*LDSByteSize:\s*(\d+)"),
    "vgpr_spill_count": (r"\.vgpr_spill_count:\s*(\d+)",),
    "sgpr_spill_count": (r"\.sgpr_spill_count:\s*(\d+)",),
}


def parse_amdgcn(text: str) -> dict[str, int]:
    """Resource fields stated in AMDGPU assembly (first match of each; missing keys absent).

    Args:
        text: the `amdgcn` assembly of one kernel.

    Returns:
        e.g. {"total_vgprs": 31, "agprs": 0, "scratch_bytes": 0, "occupancy_reported": 8, ...}.
    """
    found: dict[str, int] = {}
    for key, patterns in _AMDGCN_FIELDS.items():
        for pattern in patterns:
            match = re.search(pattern, text)
            if match:
                found[key] = int(match.group(1))
                break
    return found


class TritonHipBackend(TritonBackend):
    """Triton -> LLVM AMDGPU -> hsaco, e.g. mi300x -> GPUTarget("hip", "gfx942", 64)."""

    name = "triton-hip"
    vendor = "amd"
    # HIPOptions fields passed through to `triton.compile` (present in triton 3.6 and 3.9).
    known_knobs = frozenset({"waves_per_eu", "matrix_instr_nonkdim", "kpack", "num_ctas"})

    def options_class(self) -> Any:
        from triton.backends.amd.compiler import HIPOptions

        return HIPOptions

    def gpu_target(self, hw: HardwareModel) -> Any:
        from triton.backends.compiler import GPUTarget

        if hw.build.arch not in SUPPORTED_ARCHS:
            raise CompileError(
                f"{self.name}: arch {hw.build.arch!r} of {hw.name} is not one of "
                f"{', '.join(SUPPORTED_ARCHS)}"
            )
        return GPUTarget("hip", hw.build.arch, hw.warp_size)

    def read_resources(self, compiled: Any, kernel: KernelRef, hw: HardwareModel) -> ResourceUsage:
        meta = compiled.metadata
        fields = parse_amdgcn(compiled.asm.get("amdgcn", ""))
        dynamic_lds = int(getattr(meta, "shared", 0) or 0)
        static_lds = fields.get("static_lds_bytes", 0)
        extra: dict[str, Any] = dict(fields)
        extra["dynamic_lds_bytes"] = dynamic_lds
        extra["num_warps"] = int(meta.num_warps)
        if "total_vgprs" in fields:
            # Keep the model's own answer beside the compiler's so a disagreement is visible.
            extra["occupancy_computed"] = occupancy_mod.amd_waves_per_simd_from_vgprs(
                fields["total_vgprs"], hw
            )
        return ResourceUsage(
            registers_per_thread=fields.get("total_vgprs"),
            shared_memory_bytes=static_lds + dynamic_lds,
            spill_bytes=fields.get("scratch_bytes", 0),
            threads_per_block=int(meta.num_warps) * hw.warp_size,
            extra=extra,
        )

    def notes(self, resources: ResourceUsage, hw: HardwareModel) -> list[str]:
        reported = resources.extra.get("occupancy_reported")
        computed = resources.extra.get("occupancy_computed")
        if reported is None:
            return ["compiler stated no occupancy; waves per SIMD computed from VGPRs"]
        return [f"waves per SIMD: compiler states {reported}, model computes {computed} from VGPRs"]

    def artifacts(self, compiled: Any) -> tuple[dict[str, str], bytes | None]:
        return {"amdgcn": compiled.asm.get("amdgcn", "")}, compiled.asm.get("hsaco")
