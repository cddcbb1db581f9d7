"""Per-dtype, per-target tolerance policy used by `harness.check`.

An element passes when `|out - ref| <= atol + rtol * |ref|`, with `ref` computed in float64
(CPU) or float32 (GPU) from upcast copies of the very inputs the candidate saw. Inputs are
therefore exact in both; the error budget only has to cover the kernel's own arithmetic and the
final rounding to the output dtype:

- fp32: accumulation-order differences in reductions (a few ulps of 2^-24, grown by sqrt(n)).
- tf32 (fp32 fed to NVIDIA tensor cores, Triton's default `input_precision`): operands are
  rounded to a 10-bit mantissa before the multiply, so products carry ~2^-11 relative error.
- fp16 / bf16: the output rounding alone is half an ulp (2^-11 / 2^-8 relative); we allow about
  two of those so a kernel that rounds an intermediate once more still passes, while a kernel off
  by a real bias (>= ~1e-2 relative in bf16, >= ~2e-3 in fp16) fails.
- fp8 (e4m3 / e5m2): 3 / 2 mantissa bits, same rule.

`atol` covers outputs near zero, where relative error is meaningless (e.g. a softmax entry of
1e-30 whose exact value underflows).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel


@dataclass(frozen=True)
class Tolerance:
    """An absolute/relative tolerance with the reason it has these values."""

    atol: float
    rtol: float
    why: str

    def describe(self) -> str:
        """One line for reports: `atol=1e-05 rtol=1e-05 (fp32: ...)`."""
        return f"atol={self.atol:.0e} rtol={self.rtol:.0e} ({self.why})"


# dtype -> (atol, rtol, why). The base policy, independent of the target.
_BASE: dict[torch.dtype, tuple[float, float, str]] = {
    torch.float64: (1e-10, 1e-10, "fp64: reference precision; only reduction order differs"),
    torch.float32: (1e-5, 1e-5, "fp32: reduction-order differences of a few ulps (2^-24)"),
    torch.float16: (1e-4, 1e-3, "fp16: ~2 half-ulps of the output rounding (2^-11 each)"),
    torch.bfloat16: (1e-3, 8e-3, "bf16: ~2 half-ulps of the output rounding (2^-8 each)"),
}
# fp8 dtypes exist only in newer torch builds; look them up by name so import never fails.
for _name, _atol, _rtol, _why in (
    ("float8_e4m3fn", 2e-2, 1.25e-1, "fp8 e4m3: ~2 half-ulps of the output rounding (2^-4 each)"),
    ("float8_e4m3fnuz", 2e-2, 1.25e-1, "fp8 e4m3fnuz (AMD): ~2 half-ulps (2^-4 each)"),
    ("float8_e5m2", 4e-2, 2.5e-1, "fp8 e5m2: ~2 half-ulps of the output rounding (2^-3 each)"),
    ("float8_e5m2fnuz", 4e-2, 2.5e-1, "fp8 e5m2fnuz (AMD): ~2 half-ulps (2^-3 each)"),
):
    _dt = getattr(torch, _name, None)
    if _dt is not None:
        _BASE[_dt] = (_atol, _rtol, _why)

# tf32: 10-bit mantissa operands on NVIDIA tensor cores (and xf32 on AMD CDNA3 matrix cores).
_TF32 = (
    5e-3,
    5e-3,
    "tf32 on {unit}: fp32 operands rounded to a 10-bit mantissa before the multiply",
)


def tolerance(
    dtype: torch.dtype,
    hw: HardwareModel | None = None,
    uses_matrix_units: bool = False,
) -> Tolerance:
    """The tolerance policy for outputs of `dtype` on the device `hw`.

    Args:
        dtype: the candidate's output dtype (also the dtype of its floating inputs).
        hw: the target device's hardware model; None means "no device-specific override"
            (CPU / interpreter runs).
        uses_matrix_units: the kernel feeds fp32 operands to matrix units (tl.dot with the
            default input precision). Only then does the tf32/xf32 policy apply, and only on
            devices that have that mode.

    Returns:
        A `Tolerance(atol, rtol, why)`. Integer and bool dtypes get exact comparison.

    Raises:
        ValueError: for a floating dtype the policy does not know (names the dtype).
    """
    if not dtype.is_floating_point and not dtype.is_complex:
        return Tolerance(0.0, 0.0, f"{_dtype_name(dtype)}: integers compare exactly")
    if dtype not in _BASE:
        known = ", ".join(_dtype_name(d) for d in _BASE)
        raise ValueError(f"no tolerance policy for dtype {_dtype_name(dtype)}; known: {known}")
    atol, rtol, why = _BASE[dtype]
    if dtype == torch.float32 and uses_matrix_units and hw is not None:
        unit = _fp32_matrix_unit(hw)
        if unit is not None:
            atol, rtol, why = _TF32[0], _TF32[1], _TF32[2].format(unit=unit)
    if hw is not None:
        why = f"{why}; target {hw.name}"
    return Tolerance(atol, rtol, why)


def _fp32_matrix_unit(hw: HardwareModel) -> str | None:
    """Name of the reduced-precision fp32 matrix mode `hw` runs tl.dot(fp32) in, or None."""
    if hw.vendor == "nvidia" and "tf32" in hw.dense_tflops:
        return f"{hw.name} tensor cores"
    # xf32 exists on CDNA3 (gfx942) only; gfx950 dropped it and runs fp32 dots exactly.
    if hw.vendor == "amd" and hw.build.arch.startswith("gfx942"):
        return f"{hw.name} matrix cores (xf32)"
    return None


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def policy_table(
    hw: HardwareModel | None = None, uses_matrix_units: bool = False
) -> list[Tolerance]:
    """Every dtype's tolerance under one target, for reports and docs."""
    return [tolerance(d, hw, uses_matrix_units) for d in _BASE]
