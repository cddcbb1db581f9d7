"""Roofline math: how close a timed kernel came to the device's speed of light.

For an op that must move `bytes_moved` bytes and do `flops` FLOPs, the fastest any kernel can
run on a device is

    floor_ms = max(bytes_moved / bandwidth, flops / flop_rate)

against two sets of ceilings from the hardware model: the datasheet (`hw.memory.bandwidth_gbps`,
`hw.dense_tflops[dtype]`) and, when present, the ceilings measured on real hardware
(`hw.measured_value("copy_bandwidth_gbps")`, `hw.measured_value("matmul_<dtype>_tflops")`).

A time below the datasheet floor (by more than a small margin for clock and counting slack) is
physically impossible: it is a measurement error or a cheat (work on another stream, a cached
result), and `exceeds_speed_of_light` says so. It is never reported as a win.

Units: `_gbps` is 1e9 bytes/s, `_tflops` 1e12 FLOP/s, `_ms` milliseconds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal

import torch

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)

# A datasheet floor beaten by more than this fraction is flagged. 5% leaves room for boost clocks
# above the datasheet's reference clock and for event-timer granularity on short kernels.
SOL_MARGIN = 0.05

Bound = Literal["memory", "compute"]
MathUnit = Literal["auto", "simt", "matrix"]

_TORCH_TO_KEY: dict[torch.dtype, str] = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float64: "fp64",
}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        _TORCH_TO_KEY[getattr(torch, _name)] = "fp8"

_STR_ALIASES: dict[str, str] = {
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "f32": "fp32",
    "tf32": "tf32",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "f16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8": "fp8",
    "fp4": "fp4",
    "fp64": "fp64",
    "float64": "fp64",
}


def dtype_key(dtype: torch.dtype | str) -> str:
    """Normalise a dtype to the hardware model's key ("fp32", "bf16", "fp8", ...).

    Args:
        dtype: a torch dtype, or a name such as "bf16", "bfloat16", "torch.bfloat16".

    Returns:
        The key used in `HardwareModel.dense_tflops`.

    Raises:
        ValueError: for a dtype the hardware models do not describe, naming it.
    """
    if isinstance(dtype, torch.dtype):
        key = _TORCH_TO_KEY.get(dtype)
        if key is None and "float8" in str(dtype):
            key = "fp8"
        if key is None:
            raise ValueError(f"roofline: dtype {dtype} has no hardware-model key; known: "
                             f"{sorted(set(_TORCH_TO_KEY.values()))}")
        return key
    name = str(dtype).lower().removeprefix("torch.")
    if name.startswith("float8"):
        return "fp8"
    if name not in _STR_ALIASES:
        raise ValueError(f"roofline: dtype {dtype!r} unknown; known: {sorted(_STR_ALIASES)}")
    return _STR_ALIASES[name]


def compute_peak_tflops(hw: HardwareModel, dtype: torch.dtype | str,
                        math: MathUnit = "auto") -> float | None:
    """Datasheet dense FLOP rate (TFLOP/s) that `dtype` math is judged against.

    "auto" uses the SIMT rate for fp32 (elementwise and reduction math) and the matrix-unit rate
    for 16-bit and narrower types; "matrix" on fp32 means tf32; "simt" always means fp32.

    Returns:
        TFLOP/s, or None when the device states no rate for that dtype.
    """
    key = dtype_key(dtype)
    if math == "simt":
        key = "fp32"
    elif math == "matrix" and key == "fp32":
        key = "tf32"
    return hw.peak_tflops(key)


def _fastest_legal_tflops(hw: HardwareModel, dtype: torch.dtype | str) -> float | None:
    """The highest rate a kernel on `dtype` data could legitimately reach (for the SOL gate).

    fp32 data may be multiplied as tf32 on matrix units (torch allows it on NVIDIA), so the gate
    uses the larger of the two: an honest tf32 matmul must never be accused of beating light.
    """
    key = dtype_key(dtype)
    rates = [hw.peak_tflops(key)]
    if key == "fp32":
        rates.append(hw.peak_tflops("tf32"))
    known = [r for r in rates if r]
    return max(known) if known else None


def _ms(amount: float, rate_per_s: float | None) -> float | None:
    if not rate_per_s or rate_per_s <= 0:
        return None
    return amount / rate_per_s * 1e3


@dataclass(frozen=True)
class Roofline:
    """How one timed run sits against the device's ceilings. Percentages are 0-100."""

    bytes_moved: int
    flops: int
    time_ms: float
    dtype: str  # hardware-model key, e.g. "bf16"
    achieved_gbps: float
    achieved_tflops: float
    datasheet_gbps: float
    datasheet_tflops: float | None  # rate for `dtype` per `math`; None: device states none
    measured_gbps: float | None  # hw.measured_value("copy_bandwidth_gbps")
    measured_tflops: float | None  # hw.measured_value(f"matmul_{dtype}_tflops")
    pct_datasheet_bw: float
    pct_measured_bw: float | None
    pct_datasheet_flops: float | None
    pct_measured_flops: float | None
    memory_floor_ms: float  # bytes / datasheet bandwidth
    compute_floor_ms: float  # flops / datasheet rate (0 when no FLOPs are counted)
    floor_ms: float  # max of the two: the datasheet speed of light
    measured_floor_ms: float | None  # same with measured ceilings (datasheet where none measured)
    pct_of_sol: float  # floor_ms / time_ms * 100 (the share of the speed of light reached)
    pct_of_measured_sol: float | None
    bound: Bound
    exceeds_speed_of_light: bool
    message: str  # one line for reports; says why a flagged result is not a win

    @property
    def pct_peak(self) -> float:
        """% of the binding datasheet ceiling (bandwidth when memory-bound, FLOP/s otherwise)."""
        if self.bound == "compute" and self.pct_datasheet_flops is not None:
            return self.pct_datasheet_flops
        return self.pct_datasheet_bw

    @property
    def pct_measured_peak(self) -> float | None:
        """% of the binding measured ceiling, or None when it was never measured."""
        if self.bound == "compute":
            return self.pct_measured_flops
        return self.pct_measured_bw


def analyze(bytes_moved: int, flops: int, time_ms: float, hw: HardwareModel,
            dtype: torch.dtype | str, *, math: MathUnit = "auto",
            margin: float = SOL_MARGIN) -> Roofline:
    """Place one measured time on the device's roofline.

    Args:
        bytes_moved: bytes the op must read plus write (declared by the spec or `derive_bytes`).
        flops: FLOPs the op must do (0 for pure data movement).
        time_ms: the measured (median) time in milliseconds; must be > 0.
        hw: the device's hardware model.
        dtype: the data type the op runs in (torch dtype or name).
        math: which FLOP rate to judge against ("auto": SIMT for fp32, matrix units otherwise).
        margin: fraction below the datasheet floor tolerated before flagging (default 5%).

    Returns:
        A `Roofline` with achieved rates, % of datasheet and measured ceilings, the bound and the
        speed-of-light flag.

    Raises:
        ValueError: for a non-positive time or negative bytes/FLOPs.
    """
    if not time_ms > 0:
        raise ValueError(f"roofline.analyze: time_ms must be > 0, got {time_ms}")
    if bytes_moved < 0 or flops < 0:
        raise ValueError(f"roofline.analyze: bytes_moved and flops must be >= 0, "
                         f"got {bytes_moved}, {flops}")
    key = dtype_key(dtype)
    seconds = time_ms * 1e-3
    achieved_gbps = bytes_moved / seconds / 1e9
    achieved_tflops = flops / seconds / 1e12

    ds_gbps = hw.peak_bandwidth_gbps
    ds_tflops = compute_peak_tflops(hw, key, math)
    meas_gbps = hw.measured_value("copy_bandwidth_gbps")
    meas_tflops = hw.measured_value(f"matmul_{key}_tflops")

    memory_floor = _ms(bytes_moved, ds_gbps * 1e9) or 0.0
    if flops and ds_tflops is None:
        log.info("roofline: %s states no %s rate; compute floor left at 0", hw.name, key)
    compute_floor = (_ms(flops, ds_tflops * 1e12) if ds_tflops else None) or 0.0
    floor = max(memory_floor, compute_floor)
    bound: Bound = "compute" if compute_floor > memory_floor else "memory"

    # Measured floor: measured ceilings where they exist, the datasheet elsewhere.
    m_mem = _ms(bytes_moved, meas_gbps * 1e9) if meas_gbps else memory_floor
    m_cmp = _ms(flops, meas_tflops * 1e12) if (meas_tflops and flops) else compute_floor
    measured_floor = max(m_mem or 0.0, m_cmp or 0.0) if (meas_gbps or meas_tflops) else None

    # The gate uses the most generous legal ceilings, so it never accuses honest code.
    gate_tflops = _fastest_legal_tflops(hw, key)
    gate_compute = (_ms(flops, gate_tflops * 1e12) if gate_tflops else None) or 0.0
    gate_floor = max(memory_floor, gate_compute)
    exceeds = gate_floor > 0 and time_ms < gate_floor * (1.0 - margin)

    pct_of_sol = floor / time_ms * 100.0
    if exceeds:
        message = (f"IMPOSSIBLE: {time_ms:.4g} ms is below the {hw.name} datasheet floor "
                   f"{gate_floor:.4g} ms ({bytes_moved} B, {flops} FLOP); a measurement error "
                   f"or a cheat (work on another stream, skipped work), not a win")
    else:
        message = (f"{bound}-bound: {achieved_gbps:.1f} GB/s, {achieved_tflops:.2f} TFLOP/s, "
                   f"{pct_of_sol:.1f}% of the {hw.name} datasheet speed of light")

    return Roofline(
        bytes_moved=int(bytes_moved),
        flops=int(flops),
        time_ms=float(time_ms),
        dtype=key,
        achieved_gbps=achieved_gbps,
        achieved_tflops=achieved_tflops,
        datasheet_gbps=ds_gbps,
        datasheet_tflops=ds_tflops,
        measured_gbps=meas_gbps,
        measured_tflops=meas_tflops,
        pct_datasheet_bw=achieved_gbps / ds_gbps * 100.0,
        pct_measured_bw=achieved_gbps / meas_gbps * 100.0 if meas_gbps else None,
        pct_datasheet_flops=achieved_tflops / ds_tflops * 100.0 if ds_tflops else None,
        pct_measured_flops=achieved_tflops / meas_tflops * 100.0 if meas_tflops else None,
        memory_floor_ms=memory_floor,
        compute_floor_ms=compute_floor,
        floor_ms=floor,
        measured_floor_ms=measured_floor,
        pct_of_sol=pct_of_sol,
        pct_of_measured_sol=(measured_floor / time_ms * 100.0
                             if measured_floor is not None else None),
        bound=bound,
        exceeds_speed_of_light=exceeds,
        message=message,
    )


def _tensors(obj: Any) -> Iterable[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def derive_bytes(inputs: Any, outputs: Any) -> int:
    """Bytes an op must move when it declares none: every input read once, every output written
    once.

    Python scalars count 0. A tensor passed twice (the same storage as input and output, e.g. an
    in-place op) is counted each time it appears, since it is both read and written.

    Args:
        inputs: a tensor, or a (nested) tuple/list/dict of tensors and scalars.
        outputs: the same for the outputs.

    Returns:
        Total bytes (sum of `tensor.nbytes`).
    """
    return sum(t.numel() * t.element_size() for t in _tensors(inputs)) + sum(
        t.numel() * t.element_size() for t in _tensors(outputs))
