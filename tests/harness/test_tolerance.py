"""The per-dtype, per-target tolerance policy."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.tolerance import Tolerance
from harness.tolerance import policy_table
from harness.tolerance import tolerance


def _hw(vendor: str, arch: str, rates: tuple[str, ...], name: str = "dev") -> SimpleNamespace:
    # Only the fields the policy reads; a full HardwareModel needs the YAML loader.
    return SimpleNamespace(
        name=name,
        vendor=vendor,
        build=SimpleNamespace(arch=arch),
        dense_tflops={r: 1.0 for r in rates},
    )


def _passes(tol: Tolerance, got: torch.Tensor, ref: torch.Tensor) -> bool:
    return bool(((got - ref).abs() <= tol.atol + tol.rtol * ref.abs()).all())


def test_precision_order() -> None:
    f32, f16, bf16 = (tolerance(d) for d in (torch.float32, torch.float16, torch.bfloat16))
    assert f32.rtol < f16.rtol < bf16.rtol
    assert all(t.why for t in (f32, f16, bf16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_correct_rounding_passes_and_small_bias_fails(dtype: torch.dtype) -> None:
    # A correctly rounded output must pass; a 2e-2 relative bias must fail (it is > every
    # policy's rtol, bf16 included), across a wide range of magnitudes.
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(4096, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(
        -3, 3, (4096,), generator=g
    )
    tol = tolerance(dtype)
    assert _passes(tol, ref.to(dtype).double(), ref)
    assert not _passes(tol, (ref * 1.02).to(dtype).double(), ref)


def test_integers_are_exact() -> None:
    t = tolerance(torch.int32)
    assert (t.atol, t.rtol) == (0.0, 0.0)


def test_unknown_float_dtype_is_named() -> None:
    with pytest.raises(ValueError, match="complex64"):
        tolerance(torch.complex64)


def test_tf32_only_on_matrix_units_of_nvidia() -> None:
    h100 = _hw("nvidia", "90", ("fp32", "tf32", "bf16"), "h100")
    plain = tolerance(torch.float32, h100)
    mma = tolerance(torch.float32, h100, uses_matrix_units=True)
    assert mma.rtol > plain.rtol and "tf32" in mma.why and "h100" in mma.why
    # fp16 is unaffected by the matrix-unit flag
    assert tolerance(torch.float16, h100, True).rtol == tolerance(torch.float16).rtol


def test_xf32_on_cdna3_only() -> None:
    mi300 = _hw("amd", "gfx942", ("fp32", "bf16"))
    mi355 = _hw("amd", "gfx950", ("fp32", "bf16"))
    m4 = _hw("apple", "apple-m4", ("fp32", "fp16"))
    assert "xf32" in tolerance(torch.float32, mi300, True).why
    assert tolerance(torch.float32, mi355, True).rtol == tolerance(torch.float32).rtol
    assert tolerance(torch.float32, m4, True).rtol == tolerance(torch.float32).rtol


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="this torch has no fp8 dtypes")
def test_fp8_looser_than_bf16() -> None:
    assert tolerance(torch.float8_e4m3fn).rtol > tolerance(torch.bfloat16).rtol
    assert tolerance(torch.float8_e5m2).rtol > tolerance(torch.float8_e4m3fn).rtol


def test_policy_table_describes_every_entry() -> None:
    rows = policy_table()
    assert len(rows) >= 4
    assert all("atol=" in t.describe() and "rtol=" in t.describe() for t in rows)
