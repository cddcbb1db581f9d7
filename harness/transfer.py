"""Transfer: a time measured on one device, projected for another through both devices' copy
curves (`SizeCurve`), with the fitted model of what does not scale with bandwidth
(`fit_transfer`) and, for a device with no run, a copy model from its hardware model
(`CopyModel`). Validated by bench/validate_projection.py. `harness.projection` re-exports these.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal

from harness.projection import Bound
from harness.projection import Projection

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

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
