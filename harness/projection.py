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

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
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


# -- Transfer: a time measured on one device, projected for another ---------------------------
#
# `project()` above builds a time from first principles; `transfer()` starts from a time measured
# on a calibration device and carries it to a target, which is what `porter compare` needs for a
# device it has no measurement on. The model (bench/validate_projection.py checks it on the
# suite's H100 and H200 runs, both directions; results/projection-validation.md has the numbers):
#
# 1. Each device has a reference curve: the time of a same-size device copy as a function of the
#    bytes moved (`SizeCurve`; for matmuls, cuBLAS's matmul alone as a function of FLOPs). It
#    carries what a single bandwidth number cannot: the launch ramp and tail at tens of MB, and
#    the last-level cache holding part of a working set near its size.
# 2. A kernel whose time on the calibration device tracks the copy at its size (time / copy no
#    more than LATENCY_SIGMAS spreads above its op's ratio at sizes >= 4 x LLC, where only
#    bandwidth binds) keeps that ratio: target time = ratio x target copy time at the same size.
# 3. A kernel slower than that is latency-bound at this size (too few waves to hide memory
#    latency, a reduction's serial chain): that time belongs to the SMs, not to the memory, so it
#    carries over scaled by waves and clock (`grid`, compute units, boost clock), and the target's
#    bandwidth time is a floor under it.
# What the model is fitted on (`fit_transfer`): the calibration device's own rows and copies only.

# A row is latency-bound when its time/copy ratio exceeds its op's bandwidth-bound ratio by more
# than this many (pooled, log) standard deviations of those ratios: 3 keeps the ordinary scatter
# between configs (about 1.5% on the H100 run) on the bandwidth side.
LATENCY_SIGMAS = 3.0
# Sizes at or above this many LLCs are bandwidth-bound for every kernel in the suite: the ratio fit
# uses only them.
BANDWIDTH_BOUND_LLC_MULTIPLE = 4
# An op with no row that large on the calibration device: assume it tracks the copy (ratio 1) with
# this spread.
DEFAULT_RATIO_SPREAD = 1.03


@dataclass(frozen=True)
class SizeCurve:
    """A device's time for a reference workload as a function of the amount of work.

    For memory-bound ops the workload is a device copy and the amount bytes moved (read + write);
    for matmuls it is cuBLAS's matmul alone and the amount FLOPs. Between measured amounts the
    curve is piecewise linear in log-log; above the largest it grows in proportion (bandwidth or
    FLOP rate saturated); below the smallest it stays at the smallest's time (`below="flat"`: a
    copy's launch and latency floor) or shrinks in proportion (`below="proportional"`: a matmul,
    whose smaller sizes the suite does not time).

    points: (amount, median ms), sorted, one per amount.
    """

    device: str
    points: tuple[tuple[float, float], ...]
    source: str = ""
    below: Literal["flat", "proportional"] = "flat"

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError(f"SizeCurve({self.device!r}): needs at least one point")
        if any(a <= 0 or t <= 0 for a, t in self.points):
            raise ValueError(f"SizeCurve({self.device!r}): amounts and times must be > 0")

    @classmethod
    def from_samples(cls, device: str, samples: Sequence[tuple[float, float]],
                     source: str = "", below: Literal["flat", "proportional"] = "flat"
                     ) -> SizeCurve:
        """Build a curve from (amount, ms) samples; samples of the same amount -> their median.

        Raises:
            ValueError: no samples, or a non-positive amount or time.
        """
        by_amount: dict[float, list[float]] = {}
        for amount, ms in samples:
            by_amount.setdefault(float(amount), []).append(float(ms))
        pts = tuple((a, _median(v)) for a, v in sorted(by_amount.items()))
        return cls(device=device, points=pts, source=source, below=below)

    def time_ms(self, amount: float) -> float:
        """The reference workload's time at `amount` (see the class docstring)."""
        pts = self.points
        if amount <= pts[0][0]:
            return pts[0][1] * (amount / pts[0][0] if self.below == "proportional" else 1.0)
        if amount >= pts[-1][0]:
            return pts[-1][1] * amount / pts[-1][0]
        for (a0, t0), (a1, t1) in itertools.pairwise(pts):
            if a0 <= amount <= a1:
                f = (math.log(amount) - math.log(a0)) / (math.log(a1) - math.log(a0))
                return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
        raise AssertionError("unreachable: points are sorted")

    def excluding(self, amount: float, rel: float = 0.02) -> SizeCurve:
        """The curve without its points within `rel` of `amount` (leave-one-size-out checks)."""
        kept = tuple(p for p in self.points if abs(p[0] / amount - 1.0) > rel)
        if not kept:
            raise ValueError(f"SizeCurve({self.device!r}): nothing left without {amount}")
        return replace(self, points=kept, source=f"{self.source} without ~{amount:.4g}")

    def scaled(self, factor: float, device: str, source: str) -> SizeCurve:
        """Every time multiplied by `factor`: a relative's curve standing in for a device that
        has none (`factor` = relative's ceiling / this device's ceiling)."""
        return SizeCurve(device=device, points=tuple((a, t * factor) for a, t in self.points),
                         source=source, below=self.below)


@dataclass(frozen=True)
class TransferFit:
    """What `fit_transfer` learned on the calibration device.

    ratio: op -> median of (kernel time / reference-curve time) over its bandwidth-bound rows.
    log_spread: pooled standard deviation of log(time / curve / ratio) over those rows.
    """

    device: str
    ratio: dict[str, float]
    log_spread: float
    n: int
    llc_bytes: int

    def ratio_for(self, op: str) -> float:
        return self.ratio.get(op, 1.0)

    def latency_threshold(self, op: str) -> float:
        """time / curve above which a row of `op` counts as latency-bound."""
        spread = self.log_spread if self.n >= 2 else math.log(DEFAULT_RATIO_SPREAD)
        return self.ratio_for(op) * math.exp(LATENCY_SIGMAS * spread)


def fit_transfer(rows: Sequence[tuple[str, float, float]], curve: SizeCurve, *, llc_bytes: int,
                 device: str = "") -> TransferFit:
    """Fit the transfer model on one device's rows (never on the target's).

    Args:
        rows: (op, bytes moved, measured ms) for memory-bound kernels timed on `device`.
        curve: `device`'s copy curve (`SizeCurve` over bytes).
        llc_bytes: `device`'s last-level cache size; rows >= 4 x it make the fit.
        device: the calibration device's name.

    Returns:
        A `TransferFit`; ops with no bandwidth-bound row get ratio 1 (`ratio_for`).
    """
    by_op: dict[str, list[float]] = {}
    for op, nbytes, ms in rows:
        if nbytes >= BANDWIDTH_BOUND_LLC_MULTIPLE * llc_bytes:
            by_op.setdefault(op, []).append(ms / curve.time_ms(nbytes))
    ratio = {op: _median(v) for op, v in by_op.items()}
    resid = [math.log(r / ratio[op]) for op, v in by_op.items() for r in v]
    spread = math.sqrt(sum(x * x for x in resid) / len(resid)) if resid else 0.0
    return TransferFit(device=device, ratio=ratio, log_spread=spread, n=len(resid),
                       llc_bytes=int(llc_bytes))


def _waves(grid: int, units: int, blocks_per_unit: int) -> int:
    return math.ceil(grid / (units * max(1, blocks_per_unit)))


def transfer(measured_ms: float, amount: float, *, op: str, cal_curve: SizeCurve,
             target_curve: SizeCurve, fit: TransferFit | None = None,
             compute_bound: bool = False, cal_hw: HardwareModel | None = None,
             target_hw: HardwareModel | None = None, grid: int | None = None,
             blocks_per_unit: int = 1) -> Projection:
    """Carry a time measured on the calibration device to a target (module notes above).

    Args:
        measured_ms: the kernel's median time on the calibration device.
        amount: bytes moved (memory-bound) or FLOPs (`compute_bound`), the curves' unit.
        op: the op's name (its bandwidth-bound ratio in `fit`).
        cal_curve: the calibration device's reference curve.
        target_curve: the target's (measured, or a relative's `scaled`).
        fit: `fit_transfer`'s result; None treats every row as tracking its curve.
        compute_bound: a matmul-like row: scale by the curves alone, no latency branch.
        cal_hw, target_hw: hardware models, for the latency branch's wave and clock scaling
            (omitted: the same SMs and clock on both, as for H100 and H200); with `target_hw`
            a memory-bound result is never below its datasheet speed of light.
        grid: programs launched, for wave quantization in the latency branch (omitted: scale by
            the compute-unit ratio, as if the grid filled many waves).
        blocks_per_unit: resident programs per SM/CU, with `grid`.

    Returns:
        A `Projection` (bound "memory", "compute" or "launch" for the latency branch) whose
        breakdown names the branch, the ratio and both curve times.

    Raises:
        ValueError: a non-positive time or amount.
    """
    if not measured_ms > 0 or not amount > 0:
        raise ValueError(f"projection.transfer: measured_ms and amount must be > 0, got "
                         f"{measured_ms}, {amount}")
    cal_ref = cal_curve.time_ms(amount)
    tgt_ref = target_curve.time_ms(amount)
    ratio = measured_ms / cal_ref
    breakdown: dict[str, Any] = {
        "calibration_device": cal_curve.device, "device": target_curve.device,
        "cal_reference_ms": cal_ref, "target_reference_ms": tgt_ref, "ratio": ratio,
        "target_curve_source": target_curve.source,
    }
    # Rows as large as the fit's (>= 4 x LLC) are bandwidth-bound by definition, whatever ratio.
    latency = (not compute_bound and fit is not None and ratio > fit.latency_threshold(op)
               and amount < BANDWIDTH_BOUND_LLC_MULTIPLE * fit.llc_bytes)
    # Never faster than the target's datasheet speed of light: a curve carried to a device with a
    # much larger cache (a 256 MB Infinity Cache from a 50 MB L2) could otherwise promise it.
    sol_ms = (amount / (target_hw.peak_bandwidth_gbps * 1e6)
              if target_hw is not None and not compute_bound else 0.0)
    breakdown["speed_of_light_ms"] = sol_ms
    if not latency:
        bound: Bound = "compute" if compute_bound else "memory"
        breakdown["branch"] = "tracks the reference curve"
        if ratio * tgt_ref < sol_ms:
            breakdown["branch"] = "tracks the reference curve, held at the speed of light"
        return Projection(time_ms=max(ratio * tgt_ref, sol_ms), bound=bound,
                          breakdown=breakdown)
    # Latency-bound: the time is the SMs' (waves x per-wave latency), scaled by waves and clock.
    scale = 1.0
    if cal_hw is not None and target_hw is not None:
        cu_cal, cu_tgt = int(cal_hw.compute_units.value), int(target_hw.compute_units.value)
        if grid:
            scale = (_waves(grid, cu_tgt, blocks_per_unit) /
                     _waves(grid, cu_cal, blocks_per_unit))
        else:
            scale = cu_cal / cu_tgt
        scale *= cal_hw.boost_clock_mhz.value / target_hw.boost_clock_mhz.value
    floor = max(fit.ratio_for(op) * tgt_ref if fit is not None else tgt_ref, sol_ms)
    time_ms = max(measured_ms * scale, floor)
    breakdown.update(branch="latency-bound: the SMs' time carried over, the target's "
                     "bandwidth time as a floor", wave_clock_scale=scale, bandwidth_floor_ms=floor)
    return Projection(time_ms=time_ms, bound="launch" if time_ms > floor else "memory",
                      breakdown=breakdown)


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    if n == 0:
        raise ValueError("projection: median of nothing")
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


@dataclass(frozen=True)
class CopyModel:
    """A device copy's time vs size, in three physical terms (fitted by `fit_copy_model`):

        time = fixed + (bytes - min(bytes / 2, dirty_fraction x LLC)) / bandwidth

    fixed: the launch ramp and drain on the device's SMs (ms); the suite's times exclude host
    launch, so this is on-device latency. dirty_fraction: the share of the LLC that still holds
    the copy's last writes when it ends (a write-back cache writes them after the timer stops;
    never more than the written half). bandwidth: the large-size rate (GB/s).
    """

    fixed_ms: float
    dirty_fraction: float
    bandwidth_gbps: float
    llc_bytes: int
    device: str = ""

    def time_ms(self, nbytes: float) -> float:
        dram = nbytes - min(nbytes / 2.0, self.dirty_fraction * self.llc_bytes)
        return self.fixed_ms + dram / (self.bandwidth_gbps * 1e6)

    def for_device(self, hw: HardwareModel, bandwidth_factor: float) -> CopyModel:
        """The same SM-side terms on another device: its LLC, bandwidth x `bandwidth_factor`."""
        return replace(self, llc_bytes=hw.llc_bytes, device=hw.name,
                       bandwidth_gbps=self.bandwidth_gbps * bandwidth_factor)

    def curve(self, amounts: Sequence[float], source: str) -> SizeCurve:
        return SizeCurve(device=self.device, points=tuple(
            (float(a), self.time_ms(a)) for a in sorted(set(amounts))), source=source)


def fit_copy_model(curve: SizeCurve, llc_bytes: int) -> CopyModel:
    """Fit `CopyModel` to a measured copy curve: least squares in relative error, the dirty
    fraction on a 1% grid in [0, 1], fixed and 1/bandwidth linear for each.

    Raises:
        ValueError: fewer than 3 points, or no fit with positive terms.
    """
    pts = curve.points
    if len(pts) < 3:
        raise ValueError(f"fit_copy_model({curve.device!r}): needs >= 3 sizes, has {len(pts)}")
    best: tuple[float, float, float, float] | None = None
    for step in range(101):
        frac = step / 100.0
        xs = [b - min(b / 2.0, frac * llc_bytes) for b, _ in pts]
        ys = [t for _, t in pts]
        ws = [1.0 / (t * t) for t in ys]  # relative error
        s00 = sum(ws)
        s01 = sum(w * x for w, x in zip(ws, xs, strict=True))
        s11 = sum(w * x * x for w, x in zip(ws, xs, strict=True))
        r0 = sum(w * y for w, y in zip(ws, ys, strict=True))
        r1 = sum(w * x * y for w, x, y in zip(ws, xs, ys, strict=True))
        det = s00 * s11 - s01 * s01
        if det <= 0:
            continue
        fixed = (r0 * s11 - r1 * s01) / det
        slope = (s00 * r1 - s01 * r0) / det
        if fixed < 0 or slope <= 0:
            continue
        err = sum(w * (y - fixed - x * slope) ** 2 for w, x, y in zip(ws, xs, ys, strict=True))
        if best is None or err < best[0]:
            best = (err, frac, fixed, slope)
    if best is None:
        raise ValueError(f"fit_copy_model({curve.device!r}): no fit with positive terms")
    _, frac, fixed, slope = best
    return CopyModel(fixed_ms=fixed, dirty_fraction=frac, bandwidth_gbps=1.0 / slope / 1e6,
                     llc_bytes=int(llc_bytes), device=curve.device)
