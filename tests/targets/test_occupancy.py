"""Occupancy math on hand-computed cases (limits from the hardware models' YAML)."""

from __future__ import annotations

import hwmodels
from targets import ResourceUsage
from targets import occupancy
from targets.triton_common import fit_reasons


def _res(regs, smem, threads, **extra):
    return ResourceUsage(registers_per_thread=regs, shared_memory_bytes=smem, spill_bytes=0,
                         threads_per_block=threads, extra=extra)


def test_h100_register_limited_with_256_granularity():
    hw = hwmodels.get("h100")  # 65536 regs, 64 warps, 32 blocks, 233472 B smem per SM
    # 47 regs * 32 lanes = 1504 -> 1536 per warp; 65536 // 1536 = 42 warps; // 8 warps = 5 blocks.
    occ = occupancy.compute(_res(47, 5120, 256), hw)
    assert (occ.blocks_per_unit, occ.warps_per_unit, occ.limited_by) == (5, 40, "registers")
    assert occ.fraction == 40 / 64


def test_h100_granularity_changes_the_answer():
    hw = hwmodels.get("h100")
    # 64 regs -> 2048 per warp -> 32 warps -> 4 blocks of 8 warps; 65 regs -> 2080 -> 2304 per
    # warp -> 28 warps -> 3 blocks. Without the 256 rounding 65 regs would give 31 warps, still 3.
    assert occupancy.compute(_res(64, 0, 256), hw).blocks_per_unit == 4
    assert occupancy.compute(_res(65, 0, 256), hw).blocks_per_unit == 3
    # 40 regs: 1280 per warp (already a multiple of 256) -> 51 warps -> 12 blocks of 4 warps.
    assert occupancy.compute(_res(40, 0, 128), hw).blocks_per_unit == 12


def test_h100_shared_memory_limited_with_reservation():
    hw = hwmodels.get("h100")
    # 100000 B -> 100096 (128 B units) + 1024 reserved = 101120; 233472 // 101120 = 2 blocks.
    occ = occupancy.compute(_res(32, 100000, 128), hw)
    assert (occ.blocks_per_unit, occ.limited_by) == (2, "shared_memory")
    # 116224 B (227 KB - 1 KB... half of 228 KB minus the reservation) fits exactly twice.
    assert occupancy.compute(_res(32, 233472 // 2 - 1024, 128), hw).blocks_per_unit == 2
    assert occupancy.compute(_res(32, 233472 // 2 - 1023, 128), hw).blocks_per_unit == 1


def test_block_and_thread_limits():
    hw = hwmodels.get("h100")
    # Tiny blocks: 32 threads, 16 regs -> 128 warps by regs, 64 by warps, 32 by blocks.
    occ = occupancy.compute(_res(16, 0, 32), hw)
    assert (occ.blocks_per_unit, occ.limited_by) == (32, "blocks")
    # 1024-thread blocks with few registers: 2048 // 1024 = 2 by threads.
    occ = occupancy.compute(_res(16, 0, 1024), hw)
    assert occ.blocks_per_unit == 2 and occ.warps_per_unit == 64 and occ.fraction == 1.0


def test_mi300x_prefers_compiler_reported_occupancy():
    hw = hwmodels.get("mi300x")  # 131072 regs per CU -> 512 VGPRs per SIMD lane, 32 waves per CU
    assert occupancy.amd_vgprs_per_simd_lane(hw) == 512
    # 100 VGPRs -> 104 (granule 8) -> 512 // 104 = 4 waves per SIMD.
    assert occupancy.amd_waves_per_simd_from_vgprs(100, hw) == 4
    # 8 waves per workgroup = 2 per SIMD: 4 // 2 = 2 workgroups when computed ...
    assert occupancy.compute(_res(100, 0, 512), hw).blocks_per_unit == 2
    # ... but the compiler's own figure wins when it states one (here 2 waves/SIMD -> 1 block).
    occ = occupancy.compute(_res(100, 0, 512, occupancy_reported=2), hw)
    assert (occ.blocks_per_unit, occ.warps_per_unit, occ.limited_by) == (1, 8, "registers")


def test_mi300x_small_workgroups_pack_across_simds():
    hw = hwmodels.get("mi300x")
    # One-wave workgroups, 8 waves per SIMD: 4 SIMDs * 8 = 32 workgroups by registers, but at
    # most 16 workgroups per CU (max_blocks_per_unit).
    occ = occupancy.compute(_res(53, 0, 64, occupancy_reported=8), hw)
    assert occ.blocks_per_unit == 16 and occ.limited_by == "blocks"


def test_mi300x_lds_limited():
    hw = hwmodels.get("mi300x")  # 65536 B LDS per CU
    # 20000 B -> 20480 (512 B granules) -> 3 workgroups.
    occ = occupancy.compute(_res(32, 20000, 256, occupancy_reported=8), hw)
    assert (occ.blocks_per_unit, occ.limited_by) == (3, "shared_memory")


def test_fit_reasons_name_limit_device_and_excess():
    mi = hwmodels.get("mi300x")
    res = _res(64, 98304, 256)
    reasons = fit_reasons(res, occupancy.compute(res, mi), mi)
    assert reasons == ["LDS 98304 B per workgroup > 65536 B LDS per CU on mi300x (by 32768 B)"]

    h100 = hwmodels.get("h100")
    assert fit_reasons(res, occupancy.compute(res, h100), h100) == []

    too_many_regs = _res(300, 0, 256)
    assert fit_reasons(too_many_regs, None, h100) == [
        "registers 300 per thread > 255 max per thread on h100 (by 45)"
    ]
    too_many_threads = _res(32, 0, 2048)
    assert fit_reasons(too_many_threads, None, h100) == [
        "threads 2048 per block > 1024 max per block on h100 (by 1024)"
    ]


def test_zero_occupancy_is_a_reason():
    h100 = hwmodels.get("h100")
    # 255 regs * 32 = 8160 -> 8192 per warp -> 8 warps per SM; a 16-warp block cannot be resident.
    res = _res(255, 0, 512)
    occ = occupancy.compute(res, h100)
    assert occ.blocks_per_unit == 0 and occ.limited_by == "registers"
    assert fit_reasons(res, occ, h100) == [
        "zero occupancy: not even one block fits on one SM of h100 (limited by registers)"
    ]
