"""Occupancy from a kernel's resource usage and a device's per-SM/CU limits.

`compute(resources, hw)` answers: how many blocks (workgroups) of this kernel can be resident on
one SM / CU at once, and which limit stops it. Each limit is evaluated with the allocation
granularity the hardware really uses, so the answer matches the vendor occupancy calculators
rather than a plain division.

Assumptions (architectural constants, not in the hardware model because they describe how the
hardware allocates rather than how much it has):

* NVIDIA (sm_80 .. sm_100): registers are allocated per warp in units of 256 (the CUDA
  occupancy calculator's "register allocation unit size"), so a warp of a 55-register kernel
  takes 1792 registers, not 1760. Shared memory is allocated in 128-byte units, and the driver
  reserves 1 KB of shared memory per resident block (CUDA Programming Guide, compute capability
  8.x/9.x/10.x: "1 KB of shared memory reserved for system use" per block). That reservation is
  why an H100 SM has 228 KB while one block may use at most 227 KB.
* AMD CDNA (gfx90a/gfx942/gfx950): a CU has 4 SIMDs; each SIMD has its own register file of
  512 unified VGPRs (architectural + accumulation) per lane, allocated per wave in granules of
  8 VGPRs. A workgroup's waves are spread round-robin over the 4 SIMDs. LDS is allocated in
  512-byte granules. The compiler states the waves per SIMD it expects (`; Occupancy: N` in the
  assembly); when present we prefer it for the register limit and record both.
* Apple: no register count is available (nothing is compiled), so only threads, threadgroup
  memory and the threadgroup limit apply.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from targets.base import Occupancy
from targets.base import ResourceUsage

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

NVIDIA_REG_ALLOC_UNIT = 256  # registers per warp are rounded up to a multiple of this
NVIDIA_SMEM_ALLOC_UNIT = 128  # bytes
NVIDIA_SMEM_RESERVED_PER_BLOCK = 1024  # bytes the driver keeps per resident block (cc >= 8.0)

AMD_SIMDS_PER_CU = 4
AMD_VGPR_GRANULE = 8  # VGPRs per lane, gfx90a/gfx942/gfx950 unified register file
AMD_LDS_GRANULE = 512  # bytes


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def amd_vgprs_per_simd_lane(hw: HardwareModel) -> int:
    """Unified VGPRs per lane in one SIMD's register file (512 on MI300X).

    Args:
        hw: an AMD hardware model; `limits.registers_per_unit` counts 32-bit registers per CU.

    Returns:
        registers_per_unit / (SIMDs per CU * wave width).
    """
    return int(hw.limits.registers_per_unit.value) // (AMD_SIMDS_PER_CU * hw.warp_size)


def amd_waves_per_simd_from_vgprs(vgprs: int, hw: HardwareModel) -> int:
    """Waves one SIMD can hold given a kernel's VGPR count per lane (0 if it cannot hold one).

    Args:
        vgprs: total VGPRs per lane (architectural + accumulation), as the compiler reports.
        hw: an AMD hardware model.

    Returns:
        floor(VGPR file / VGPRs rounded to the granule), capped by the waves a SIMD may hold.
    """
    max_waves_per_simd = int(hw.limits.max_warps_per_unit.value) // AMD_SIMDS_PER_CU
    if vgprs <= 0:
        return max_waves_per_simd
    allocated = _round_up(vgprs, AMD_VGPR_GRANULE)
    return min(max_waves_per_simd, amd_vgprs_per_simd_lane(hw) // allocated)


def compute(resources: ResourceUsage, hw: HardwareModel) -> Occupancy:
    """Resident blocks and warps per SM/CU for one kernel on one device.

    Args:
        resources: what the compiled kernel uses (registers per thread, shared memory per block,
            threads per block). For AMD, `resources.extra["occupancy_reported"]` (waves per SIMD
            stated by the compiler) is used for the register limit when present.
        hw: the device's hardware model (limits per SM/CU, warp width).

    Returns:
        Occupancy with blocks_per_unit (0 when a single block cannot be resident),
        warps_per_unit, fraction = warps_per_unit / max_warps_per_unit, and limited_by naming the
        tightest limit ("registers" | "shared_memory" | "threads" | "blocks" | "warps").
    """
    lim = hw.limits
    warp = hw.warp_size
    threads = max(1, resources.threads_per_block)
    warps_per_block = math.ceil(threads / warp)
    max_warps = int(lim.max_warps_per_unit.value)

    # Candidate limits on resident blocks per unit; the smallest wins. Dict order breaks ties in
    # favour of the hardware resource (registers, shared memory) over the scheduler limits.
    limits: dict[str, int] = {}

    if hw.vendor == "amd":
        if resources.registers_per_thread is not None:
            reported = resources.extra.get("occupancy_reported")
            waves_per_simd = (
                int(reported)
                if reported is not None
                else amd_waves_per_simd_from_vgprs(resources.registers_per_thread, hw)
            )
            if warps_per_block >= AMD_SIMDS_PER_CU:
                # Waves of one workgroup go round-robin over the SIMDs, so each SIMD must hold
                # ceil(waves / 4) of them.
                per_simd = math.ceil(warps_per_block / AMD_SIMDS_PER_CU)
                limits["registers"] = waves_per_simd // per_simd
            else:
                # Small workgroups pack onto different SIMDs: the CU's slots are what count.
                limits["registers"] = AMD_SIMDS_PER_CU * waves_per_simd // warps_per_block
        if resources.shared_memory_bytes > 0:
            lds = _round_up(resources.shared_memory_bytes, AMD_LDS_GRANULE)
            limits["shared_memory"] = int(lim.shared_memory_per_unit_bytes.value) // lds
    elif hw.vendor == "nvidia":
        if resources.registers_per_thread is not None:
            regs_per_warp = _round_up(resources.registers_per_thread * warp, NVIDIA_REG_ALLOC_UNIT)
            warps_by_regs = int(lim.registers_per_unit.value) // max(1, regs_per_warp)
            limits["registers"] = warps_by_regs // warps_per_block
        smem = _round_up(resources.shared_memory_bytes, NVIDIA_SMEM_ALLOC_UNIT)
        smem += NVIDIA_SMEM_RESERVED_PER_BLOCK
        limits["shared_memory"] = int(lim.shared_memory_per_unit_bytes.value) // smem
    else:
        if resources.registers_per_thread is not None:
            regs_per_block = resources.registers_per_thread * threads
            limits["registers"] = int(lim.registers_per_unit.value) // regs_per_block
        if resources.shared_memory_bytes > 0:
            limits["shared_memory"] = (
                int(lim.shared_memory_per_unit_bytes.value) // resources.shared_memory_bytes
            )

    limits["threads"] = int(lim.max_threads_per_unit.value) // threads
    limits["warps"] = max_warps // warps_per_block
    limits["blocks"] = int(lim.max_blocks_per_unit.value)

    limited_by = min(limits, key=lambda k: limits[k])
    blocks = max(0, limits[limited_by])
    warps_resident = blocks * warps_per_block
    return Occupancy(
        blocks_per_unit=blocks,
        warps_per_unit=warps_resident,
        fraction=warps_resident / max_warps if max_warps else 0.0,
        limited_by=limited_by,
    )
