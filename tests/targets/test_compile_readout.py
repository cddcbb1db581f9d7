"""Cross-compile the RMSNorm example for every Triton target and read resources from artifacts."""

from __future__ import annotations

import pytest

import hwmodels
import targets
from targets import LaunchConfig
from targets.triton_cuda import parse_resource_usage
from targets.triton_hip import parse_amdgcn

# One device per Triton arch: sm_80, sm_90, sm_100, gfx942, gfx950.
TRITON_DEVICES = ["a100", "h100", "b200", "mi300x", "mi355x"]


@pytest.mark.parametrize("device", TRITON_DEVICES)
def test_readout_every_triton_target(device, rmsnorm_report):
    hw = hwmodels.get(device)
    report = rmsnorm_report(device)
    assert report.tier == "compiled"
    assert report.arch == hw.build.arch
    assert report.backend == hw.build.backend
    res = report.resources
    assert res is not None
    assert res.registers_per_thread is not None and res.registers_per_thread > 0
    assert res.threads_per_block == 8 * hw.warp_size
    assert res.spill_bytes == 0  # 4096 fp32 values over 256+ threads fit in registers
    assert res.shared_memory_bytes > 0  # the cross-warp row reduction goes through smem/LDS
    assert report.fits, report.reasons
    assert report.occupancy is not None and report.occupancy.blocks_per_unit > 0
    assert report.binary  # cubin / hsaco bytes


@pytest.mark.parametrize("device", ["a100", "h100", "b200"])
def test_nvidia_readout_matches_cuobjdump_of_the_cubin(device, rmsnorm_report):
    report = rmsnorm_report(device)
    res = report.resources
    assert res.extra["source"] == "cuobjdump --dump-resource-usage"
    static, dynamic = res.extra["static_shared_bytes"], res.extra["dynamic_shared_bytes"]
    assert res.shared_memory_bytes == static + dynamic
    assert "ptx" in report.artifacts and ".target sm_" + report.arch in report.artifacts["ptx"]


@pytest.mark.parametrize("device", ["mi300x", "mi355x"])
def test_amd_readout_matches_the_assembly(device, rmsnorm_report):
    report = rmsnorm_report(device)
    fields = parse_amdgcn(report.artifacts["amdgcn"])
    res = report.resources
    assert res.registers_per_thread == fields["total_vgprs"]
    assert res.spill_bytes == fields["scratch_bytes"]
    assert res.extra["occupancy_reported"] == fields["occupancy_reported"]
    # The model's own computation agrees with what the compiler states for this kernel.
    assert res.extra["occupancy_computed"] == res.extra["occupancy_reported"]
    assert any("compiler states" in n for n in report.notes)


def test_nvidia_spills_are_read(rmsnorm_fn):
    # maxnreg=32 leaves 2048/32 = 64 row values per thread with nowhere to live but the stack.
    ref = targets.kernel_ref_for(rmsnorm_fn, constexprs={"BLOCK_N": 2048})
    hw = hwmodels.get("h100")
    config = LaunchConfig(num_warps=1, extra={"maxnreg": 32})
    report = targets.for_device(hw).compile(ref, config, hw)
    assert report.resources.registers_per_thread <= 32
    assert report.resources.spill_bytes > 0
    assert any("spills" in n for n in report.notes)


def test_amd_spills_are_read(rmsnorm_fn):
    # waves_per_eu=8 caps VGPRs at 512/8 = 64, too few for 2048/64 = 32 values of x and of w.
    ref = targets.kernel_ref_for(rmsnorm_fn, constexprs={"BLOCK_N": 2048})
    hw = hwmodels.get("mi300x")
    cfg = LaunchConfig(num_warps=1, extra={"waves_per_eu": 8})
    report = targets.for_device(hw).compile(ref, cfg, hw)
    assert report.resources.registers_per_thread <= 64
    assert report.resources.spill_bytes > 0
    assert report.resources.spill_bytes == report.resources.extra["scratch_bytes"]


def test_parse_resource_usage_picks_the_named_function():
    text = (
        "\nResource usage:\n Common:\n  GLOBAL:28\n"
        " Function other:\n  REG:10 STACK:0 SHARED:0 LOCAL:0\n"
        " Function k:\n  REG:48 STACK:16 SHARED:1024 LOCAL:8 CONSTANT[0]:584\n"
    )
    fields = parse_resource_usage(text, "k")
    assert fields["REG"] == 48 and fields["STACK"] == 16 and fields["SHARED"] == 1024
    assert fields["LOCAL"] == 8 and fields["CONSTANT[0]"] == 584
    assert parse_resource_usage(text, "missing")["REG"] == 10
    assert parse_resource_usage("nothing here", "k") == {}


def test_parse_amdgcn_reads_comment_and_metadata_forms():
    text = "; NumVgprs: 40\n; NumAgprs: 8\n; TotalNumVgprs: 48\n; ScratchSize: 16\n; Occupancy: 6\n"
    text += "    .group_segment_fixed_size: 2048\n"
    fields = parse_amdgcn(text)
    assert fields == {
        "total_vgprs": 48, "arch_vgprs": 40, "agprs": 8, "scratch_bytes": 16,
        "occupancy_reported": 6, "static_lds_bytes": 2048,
    }
    # Metadata-only assembly: .vgpr_count stands in for TotalNumVgprs.
    assert parse_amdgcn("  .vgpr_count:     31\n")["total_vgprs"] == 31
