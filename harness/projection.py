"""Projected kernel time on a device we may not have: a small, documented analytic model.

    time = launch + sum over waves of max(memory_time(wave), compute_time(wave))     [x calibration]

Inputs are the op's bytes and FLOPs, the launch grid, and (when the kernel was cross-compiled)
its occupancy. Everything device-specific comes from the hardware model.

1. Effective ceilings. Bandwidth is the measured copy bandwidth (`copy_bandwidth_gbps`) when the
   model has one, else the datasheet x `DEFAULT_BW_EFFICIENCY`; FLOP/s likewise from
   `matmul_<dtype>_tflops` or datasheet x `DEFAULT_FLOP_EFFICIENCY`.
2. Waves. With occupancy, `units x blocks_per_unit` blocks are resident at once; the grid runs in
   ceil(grid / resident) waves, each block doing 1/grid of the bytes and FLOPs. A partial last
   wave still costs a full block's time on the units it occupies (wave quantization: grid 133 on
   132 SMs at 1 block/SM takes two block-times, not 133/132).
3. Bytes in flight (Little's law). To sustain bandwidth B with memory latency L, B x L bytes must
   be in flight. A wave of n blocks of w warps each keeps about n x w x `bytes_in_flight_per_warp`
   bytes outstanding, so its bandwidth is min(B, that / L). This derates low-occupancy kernels and
   small grids, and lets a lone tail block stream faster than 1/units of the device.
   `bytes_in_flight_per_warp` defaults to warp_size x 16 B (one 128-bit load per lane) x 2
   outstanding loads; L defaults to `DEFAULT_MEMORY_LATENCY_NS`. Neither is in the hardware model
   today: both are stated assumptions, and calibration absorbs what they get wrong.
4. Compute per wave: the busiest unit runs ceil(n / units) blocks at 1/units of the device rate.
5. Launch: a fixed `launch_overhead_us` (event-timed launches cost a few microseconds).
6. Calibration: `calibrate` fits one scale on (measured, projected) pairs from one device;
   it multiplies the throughput part (not the launch term) when projecting for another.
7. Transfer (`transfer`, below): when a kernel was measured on another device, carry that time
   over through both devices' copy curves instead of building it from first principles; validated
   H100 <-> H200 by bench/validate_projection.py (results/projection-validation.md).

Without occupancy the model assumes enough resident blocks to saturate the device (no wave or
Little's-law terms), except that a grid smaller than the unit count leaves units idle for compute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal

import torch

from harness.roofline import MathUnit
from harness.roofline import compute_peak_tflops
from harness.roofline import dtype_key

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from targets.base import Occupancy

# H100 SXM measured copy reaches 3006 of 3352 GB/s (0.897); MI300X copies typically reach ~0.8 of
# 5.3 TB/s. 0.85 sits between for devices that have no measured ceiling yet.
DEFAULT_BW_EFFICIENCY = 0.85
# cuBLAS bf16 8192^3 on H100 reaches 680 of 989 TFLOP/s (0.69).
DEFAULT_FLOP_EFFICIENCY = 0.70
# Loaded HBM latency on current datacenter GPUs is ~500-900 ns; 700 ns is a middle value.
DEFAULT_MEMORY_LATENCY_NS = 700.0
DEFAULT_LAUNCH_OVERHEAD_US = 3.0
BYTES_PER_LANE_LOAD = 16  # one 128-bit vector load
LOADS_IN_FLIGHT_PER_WARP = 2

Bound = Literal["memory", "compute", "launch"]


@dataclass(frozen=True)
class Calibration:
    """One multiplicative correction fitted on a device where both numbers exist.

    scale: measured / projected throughput time (geometric mean over the pairs).
    spread: geometric standard deviation of those ratios (1.0 = every pair agreed).
    """

    scale: float
    spread: float
    n: int
    device: str = ""


@dataclass(frozen=True)
class Projection:
    """A predicted time; never a measurement. `label` is always "projected"."""

    time_ms: float
    bound: Bound
    breakdown: dict[str, Any] = field(default_factory=dict)
    label: str = "projected"

    def __post_init__(self) -> None:
        if self.label != "projected":
            raise ValueError(f"Projection.label must be 'projected', got {self.label!r}")


def _effective_rates(hw: HardwareModel, dtype: torch.dtype | str,
                     math_unit: MathUnit = "auto") -> tuple[float, str, float | None, str]:
    key = dtype_key(dtype)
    meas_bw = hw.measured_value("copy_bandwidth_gbps")
    if meas_bw:
        bw, bw_src = meas_bw, "measured copy_bandwidth_gbps"
    else:
        bw = hw.peak_bandwidth_gbps * DEFAULT_BW_EFFICIENCY
        bw_src = f"datasheet x {DEFAULT_BW_EFFICIENCY}"
    # Measured matmul ceilings apply to matrix-unit math only, never to SIMT (norms, softmax).
    meas_fl = hw.measured_value(f"matmul_{key}_tflops") if math_unit != "simt" else None
    if meas_fl:
        fl, fl_src = meas_fl, f"measured matmul_{key}_tflops"
    else:
        peak = compute_peak_tflops(hw, key, math_unit)
        fl = peak * DEFAULT_FLOP_EFFICIENCY if peak else None
        unit = "fp32 SIMT" if math_unit == "simt" else key
        fl_src = f"datasheet {unit} x {DEFAULT_FLOP_EFFICIENCY}" if peak else f"no {unit} rate"
    return bw, bw_src, fl, fl_src


def project(bytes_moved: int, flops: int, hw: HardwareModel, dtype: torch.dtype | str, *,
            grid: int, occupancy: Occupancy | None = None,
            calibration: Calibration | None = None,
            launch_overhead_us: float = DEFAULT_LAUNCH_OVERHEAD_US,
            memory_latency_ns: float = DEFAULT_MEMORY_LATENCY_NS,
            bytes_in_flight_per_warp: int | None = None,
            math_unit: MathUnit = "auto") -> Projection:
    """Predict a kernel's time on `hw` (see the module docstring for the model).

    Args:
        bytes_moved: bytes the kernel reads plus writes.
        flops: FLOPs it does (0 for data movement).
        hw: the device to project for.
        dtype: data type (sets the FLOP rate).
        math_unit: "simt" for element-wise/reduction math (done in fp32 on the SIMT units
            whatever the I/O dtype), "matrix" for matmuls, "auto" to pick by dtype.
        grid: total blocks (programs) launched; must be >= 1.
        occupancy: resident blocks and warps per unit from the cross-compiled kernel
            (`targets.occupancy.compute`); enables the wave and bytes-in-flight terms.
        calibration: a fitted correction, usually from another device.
        launch_overhead_us: fixed per-launch cost in microseconds.
        memory_latency_ns: loaded memory latency for the bytes-in-flight term.
        bytes_in_flight_per_warp: outstanding bytes per warp; default warp_size x 16 x 2.

    Returns:
        A `Projection` labelled "projected" with its breakdown (every term, in ms, and the
        assumptions used).

    Raises:
        ValueError: grid < 1, negative bytes/FLOPs, or an occupancy with no resident blocks.
    """
    if grid < 1:
        raise ValueError(f"projection.project: grid must be >= 1, got {grid}")
    if bytes_moved < 0 or flops < 0:
        raise ValueError(f"projection.project: bytes and flops must be >= 0, "
                         f"got {bytes_moved}, {flops}")
    units = int(hw.compute_units.value)
    bw_gbps, bw_src, tflops, fl_src = _effective_rates(hw, dtype, math_unit)
    if flops and tflops is None:
        raise ValueError(f"projection.project: {hw.name} states no FLOP rate for "
                         f"{dtype_key(dtype)}")
    bw_bytes_per_ns = bw_gbps  # 1 GB/s == 1 byte/ns
    flop_per_ns = (tflops or 0.0) * 1e3
    breakdown: dict[str, Any] = {
        "device": hw.name,
        "eff_bandwidth_gbps": bw_gbps,
        "bandwidth_source": bw_src,
        "eff_tflops": tflops,
        "flops_source": fl_src,
        "grid": grid,
        "compute_units": units,
    }

    if occupancy is None:
        memory_ns = bytes_moved / bw_bytes_per_ns
        idle = max(1.0, units / grid)  # a grid smaller than the device leaves units idle
        compute_ns = flops / flop_per_ns * idle if flops else 0.0
        breakdown.update(memory_ms=memory_ns * 1e-6, compute_ms=compute_ns * 1e-6,
                         waves=None, occupancy="not given: assumed saturating")
        throughput_ns = max(memory_ns, compute_ns)
        bound: Bound = "compute" if compute_ns > memory_ns else "memory"
    else:
        bpu = int(occupancy.blocks_per_unit)
        if bpu < 1:
            raise ValueError(f"projection.project: occupancy.blocks_per_unit must be >= 1 "
                             f"(the kernel does not fit on {hw.name}), got {bpu}")
        warps_per_block = max(1, occupancy.warps_per_unit // bpu)
        per_warp = bytes_in_flight_per_warp or hw.warp_size * BYTES_PER_LANE_LOAD * \
            LOADS_IN_FLIGHT_PER_WARP
        resident = units * bpu
        waves = math.ceil(grid / resident)
        bytes_per_block = bytes_moved / grid
        flops_per_block = flops / grid
        memory_ns = compute_ns = throughput_ns = 0.0
        derates = []
        full_waves, tail = divmod(grid, resident)
        # Every full wave costs the same; compute it once, then the partial tail wave.
        for n, count in ((resident, full_waves), (tail, 1)):
            if n == 0 or count == 0:
                continue
            in_flight = n * warps_per_block * per_warp
            wave_bw = min(bw_bytes_per_ns, in_flight / memory_latency_ns)
            derates.append(wave_bw / bw_bytes_per_ns)
            mem = n * bytes_per_block / wave_bw
            cmp_ = (math.ceil(n / units) * flops_per_block * units / flop_per_ns
                    if flops else 0.0)
            memory_ns += mem * count
            compute_ns += cmp_ * count
            throughput_ns += max(mem, cmp_) * count
        bound = "compute" if compute_ns > memory_ns else "memory"
        breakdown.update(
            memory_ms=memory_ns * 1e-6,
            compute_ms=compute_ns * 1e-6,
            waves=waves,
            resident_blocks=resident,
            wave_efficiency=grid / (waves * resident),
            warps_per_block=warps_per_block,
            bytes_in_flight_per_warp=per_warp,
            memory_latency_ns=memory_latency_ns,
            bandwidth_derate_full_wave=derates[0],
            bandwidth_derate_last_wave=derates[-1],
        )

    scale = calibration.scale if calibration is not None else 1.0
    throughput_ms = throughput_ns * 1e-6
    launch_ms = launch_overhead_us * 1e-3
    time_ms = throughput_ms * scale + launch_ms
    if launch_ms > throughput_ms * scale:
        bound = "launch"
    breakdown.update(throughput_ms=throughput_ms, launch_ms=launch_ms,
                     calibration_scale=scale,
                     calibration_device=calibration.device if calibration else None)
    return Projection(time_ms=time_ms, bound=bound, breakdown=breakdown)


def _throughput_ms(projected: Projection | float) -> tuple[float, float]:
    """(throughput part, launch part) of a projection; a bare float is all throughput."""
    if isinstance(projected, Projection):
        launch = float(projected.breakdown.get("launch_ms", 0.0))
        scale = float(projected.breakdown.get("calibration_scale", 1.0))
        return (projected.time_ms - launch) / scale, launch
    return float(projected), 0.0


def calibrate(pairs: Sequence[tuple[float, Projection | float]], *,
              device: str = "") -> Calibration:
    """Fit a scale from (measured_ms, projection) pairs taken on one device.

    The scale is the geometric mean of (measured - launch) / projected throughput time, so one
    outlier pulls it less than an arithmetic mean would. Pass `Projection`s made *without* a
    calibration (or with one: it is divided out).

    Args:
        pairs: (measured median ms, `Projection` or projected ms) for kernels timed on `device`.
        device: the device the pairs came from (kept for the record).

    Returns:
        A `Calibration` with the scale, its geometric spread and the pair count.

    Raises:
        ValueError: no pairs, or a pair whose measured time does not exceed its launch term.
    """
    if not pairs:
        raise ValueError("projection.calibrate: needs at least one (measured, projected) pair")
    logs = []
    for measured, projected in pairs:
        through, launch = _throughput_ms(projected)
        if measured <= launch or through <= 0:
            raise ValueError(f"projection.calibrate: pair ({measured} ms measured, {through} ms "
                             f"projected + {launch} ms launch) cannot be fitted")
        logs.append(math.log((measured - launch) / through))
    mean = sum(logs) / len(logs)
    var = sum((x - mean) ** 2 for x in logs) / len(logs)
    return Calibration(scale=math.exp(mean), spread=math.exp(math.sqrt(var)), n=len(logs),
                       device=device)


def error_pct(projected: Projection | float, measured_ms: float) -> float:
    """Signed projection error in percent: (projected - measured) / measured x 100.

    Raises:
        ValueError: when measured_ms is not positive.
    """
    if not measured_ms > 0:
        raise ValueError(f"projection.error_pct: measured_ms must be > 0, got {measured_ms}")
    p = projected.time_ms if isinstance(projected, Projection) else float(projected)
    return (p - measured_ms) / measured_ms * 100.0
