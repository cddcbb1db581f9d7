"""Projection model: ceilings, wave quantization, bytes in flight, launch term, calibration."""

from __future__ import annotations

import dataclasses

import pytest

import hwmodels
from harness import projection
from targets.base import Occupancy


@pytest.fixture(scope="module")
def h100() -> hwmodels.HardwareModel:
    return hwmodels.get("h100")


def _occ(blocks: int, warps_per_block: int, hw) -> Occupancy:
    warps = blocks * warps_per_block
    return Occupancy(blocks_per_unit=blocks, warps_per_unit=warps,
                     fraction=warps / hw.limits.max_warps_per_unit.value, limited_by="blocks")


def test_memory_bound_uses_measured_bandwidth(h100):
    p = projection.project(10**9, 0, h100, "bf16", grid=100_000)
    expected = 1e9 / 3073.3e9 * 1e3 + projection.DEFAULT_LAUNCH_OVERHEAD_US * 1e-3
    assert p.time_ms == pytest.approx(expected)
    assert p.bound == "memory"
    assert p.label == "projected"
    assert p.breakdown["bandwidth_source"] == "measured copy_bandwidth_gbps"


def test_datasheet_times_default_efficiency_without_measurements(h100):
    bare = dataclasses.replace(h100, measured=())
    p = projection.project(10**9, 0, bare, "bf16", grid=100_000, launch_overhead_us=0)
    eff = projection.DEFAULT_BW_EFFICIENCY
    assert p.breakdown["eff_bandwidth_gbps"] == pytest.approx(3352 * eff)
    assert p.time_ms == pytest.approx(1e9 / (3352e9 * projection.DEFAULT_BW_EFFICIENCY) * 1e3)
    c = projection.project(0, 10**12, bare, "bf16", grid=100_000, launch_overhead_us=0)
    assert c.bound == "compute"
    assert c.time_ms == pytest.approx(1e12 / (989.4e12 * projection.DEFAULT_FLOP_EFFICIENCY) * 1e3)


def test_wave_quantization_133_blocks_on_132_sms(h100):
    per_block = 10**9  # FLOPs per block, compute-bound
    occ = _occ(1, 8, h100)
    one = projection.project(0, per_block * 132, h100, "bf16", grid=132, occupancy=occ,
                             launch_overhead_us=0)
    two = projection.project(0, per_block * 133, h100, "bf16", grid=133, occupancy=occ,
                             launch_overhead_us=0)
    assert one.breakdown["waves"] == 1
    assert two.breakdown["waves"] == 2
    # The lone 133rd block costs a whole block-time: twice the 132-block time, not 133/132.
    assert two.time_ms == pytest.approx(2 * one.time_ms)
    assert two.breakdown["wave_efficiency"] == pytest.approx(133 / 264)
    # Without occupancy the model cannot know the waves and assumes saturation.
    flat = projection.project(0, per_block * 133, h100, "bf16", grid=133, launch_overhead_us=0)
    assert flat.time_ms == pytest.approx(one.time_ms * 133 / 132)


def test_low_occupancy_derates_bandwidth_littles_law(h100):
    nbytes = 2 * 10**9
    full = projection.project(nbytes, 0, h100, "bf16", grid=132 * 16 * 50,
                              occupancy=_occ(16, 4, h100), launch_overhead_us=0)
    low = projection.project(nbytes, 0, h100, "bf16", grid=132 * 50,
                             occupancy=_occ(1, 4, h100), launch_overhead_us=0)
    assert full.breakdown["bandwidth_derate_full_wave"] == pytest.approx(1.0)
    assert full.time_ms == pytest.approx(nbytes / 3073.3e9 * 1e3)
    # 132 SMs x 4 warps x (32 lanes x 16 B x 2 loads) in flight over 700 ns.
    in_flight = 132 * 4 * 32 * 16 * 2
    derate = in_flight / (3073.3 * projection.DEFAULT_MEMORY_LATENCY_NS)
    assert low.breakdown["bandwidth_derate_full_wave"] == pytest.approx(derate)
    assert low.time_ms == pytest.approx(full.time_ms / derate)
    assert low.time_ms > 3 * full.time_ms


def test_launch_bound_tiny_kernel(h100):
    p = projection.project(4096, 0, h100, "fp32", grid=1)
    assert p.bound == "launch"
    assert p.time_ms >= projection.DEFAULT_LAUNCH_OVERHEAD_US * 1e-3


def test_label_is_always_projected():
    with pytest.raises(ValueError, match="projected"):
        projection.Projection(time_ms=1.0, bound="memory", label="measured")


def test_calibration_round_trip_across_devices(h100):
    h200 = hwmodels.get("h200")
    true_scale = 1.3
    sizes = [2**26, 2**28, 3 * 2**28, 2**30]
    pairs = []
    for n in sizes:
        p = projection.project(n, 0, h100, "bf16", grid=65536)
        measured = p.breakdown["throughput_ms"] * true_scale + p.breakdown["launch_ms"]
        pairs.append((measured, p))
    cal = projection.calibrate(pairs, device="h100")
    assert cal.scale == pytest.approx(true_scale)
    assert cal.spread == pytest.approx(1.0)
    assert cal.n == len(sizes)
    # Applied on the device it came from, it reproduces the measurements...
    for (measured, _), n in zip(pairs, sizes, strict=True):
        again = projection.project(n, 0, h100, "bf16", grid=65536, calibration=cal)
        assert projection.error_pct(again, measured) == pytest.approx(0.0, abs=1e-9)
    # ...and applied to another device it scales that device's throughput term only.
    raw = projection.project(2**30, 0, h200, "bf16", grid=65536)
    cal200 = projection.project(2**30, 0, h200, "bf16", grid=65536, calibration=cal)
    assert cal200.time_ms == pytest.approx(raw.breakdown["throughput_ms"] * true_scale
                                           + raw.breakdown["launch_ms"])
    assert cal200.breakdown["calibration_device"] == "h100"
    # Re-fitting on already-calibrated projections divides the old scale out.
    recal = projection.project(sizes[0], 0, h100, "bf16", grid=65536, calibration=cal)
    assert projection.calibrate([(pairs[0][0], recal)]).scale == pytest.approx(true_scale)


def test_calibration_spread_reflects_disagreement():
    cal = projection.calibrate([(2.0, 1.0), (0.5, 1.0)])
    assert cal.scale == pytest.approx(1.0)
    assert cal.spread == pytest.approx(2.0)


def test_error_pct_sign():
    assert projection.error_pct(1.1, 1.0) == pytest.approx(10.0)
    assert projection.error_pct(0.75, 1.0) == pytest.approx(-25.0)
    with pytest.raises(ValueError):
        projection.error_pct(1.0, 0.0)


def test_bad_arguments(h100):
    with pytest.raises(ValueError, match="grid"):
        projection.project(1, 0, h100, "bf16", grid=0)
    with pytest.raises(ValueError, match="at least one"):
        projection.calibrate([])
    with pytest.raises(ValueError, match="does not fit"):
        projection.project(1, 0, h100, "bf16", grid=4,
                           occupancy=Occupancy(0, 0, 0.0, "shared_memory"))
