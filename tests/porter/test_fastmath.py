"""The 16-bit erf/GELU formula (porter/codegen/fastmath.py): fitted, accurate, and used only
where every output is fp16/bf16. Exhaustive over the 65536 values of each 16-bit dtype."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from porter.codegen import fastmath
from porter.codegen import generate
from porter.codegen import load_generated_module

SQRT1_2 = np.float32(1.0 / math.sqrt(2.0))


def all_values(dtype: torch.dtype) -> torch.Tensor:
    """Every finite value of a 16-bit float dtype."""
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    return x[torch.isfinite(x.float())]


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in representable 16-bit values (+0 and -0 are one apart: fine here)."""
    def ordered(t: torch.Tensor) -> torch.Tensor:
        i = t.view(torch.int16).int()
        return torch.where(i < 0, -32768 - i, i)
    return (ordered(a) - ordered(b)).abs()


def exact_gelu(x: torch.Tensor) -> torch.Tensor:
    """0.5 x erfc(-x / sqrt 2) in float64 with math.erfc: right in the negative tail too, where
    float64 F.gelu's 1 + erf cancels to 0."""
    return torch.tensor([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x.double().tolist()],
                        dtype=torch.float64)


def model_gelu(x: torch.Tensor) -> torch.Tensor:
    """The kernel's formula (porter_one_plus_erf with LOWP) in numpy float32."""
    xn = x.float().numpy()
    y = xn * SQRT1_2
    with np.errstate(over="ignore"):
        e = fastmath.erfc_pos(np.abs(y))
    return torch.from_numpy(np.float32(0.5) * xn * np.where(y < 0, e, np.float32(2.0) - e))


def test_coefficients_are_the_fit() -> None:
    assert np.allclose(fastmath.fit_erfc(), fastmath.ERFC_COEFFS, rtol=0, atol=1e-7)


def test_erfc_relative_error_on_normal_range() -> None:
    z = np.linspace(0.0, 9.0, 90_001)  # erfc(9.0) ~ 4e-37: still a normal fp32
    want = np.array([math.erfc(v) for v in z])
    for dtype, bound in ((np.float64, 1e-5), (np.float32, 5e-5)):
        got = fastmath.erfc_pos(z, dtype=dtype).astype(np.float64)
        assert np.max(np.abs(got / want - 1.0)) < bound, dtype


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gelu_within_one_ulp_everywhere(dtype: torch.dtype) -> None:
    x = all_values(dtype)
    want = exact_gelu(x).to(dtype)
    got = model_gelu(x).to(dtype)
    dist = ulp_distance(got, want)
    assert int(dist.max()) <= 1
    assert float((dist > 0).float().mean()) < 0.01  # almost all correctly rounded


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gelu_helper_within_one_ulp_everywhere(dtype: torch.dtype) -> None:
    """porter_gelu's LOWP form (the 1/2 and 1/sqrt 2 folded in, max(x, 0) - |x| h) keeps the
    accuracy of the op-by-op formula."""
    x = all_values(dtype)
    want = exact_gelu(x).to(dtype)
    got = torch.from_numpy(fastmath.gelu_lowp(x.float().numpy())).to(dtype)
    dist = ulp_distance(got, want)
    assert int(dist.max()) <= 1
    assert float((dist > 0).float().mean()) < 0.01
    assert float((dist > 0).float().mean()) <= float(
        (ulp_distance(model_gelu(x).to(dtype), want) > 0).float().mean())


def _erf_gelu(x: torch.Tensor) -> torch.Tensor:
    return x * 0.5 * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))


def _tanh_gelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x, approximate="tanh")


@pytest.mark.parametrize(("fn", "whole"), [(torch.nn.functional.gelu, True), (_erf_gelu, True),
                                           (_tanh_gelu, False)])
def test_emitter_takes_the_gelu_helper_for_the_whole_pattern(fn, whole: bool) -> None:
    """F.gelu and the same formula written out become one porter_gelu call (with no dead
    temporaries beside it); the tanh form is another function and is left alone."""
    src = generate(fn, (torch.randn(4, 8),), name="gelu_pattern").triton_module_source()
    kernel = src[src.index("def _gelu_pattern_flat_block"):]
    assert ("porter_gelu(" in kernel) is whole
    if whole:
        assert "* 0.5)" not in kernel and "porter_one_plus_erf(" not in kernel


def test_gelu_before_a_reduction_matches_the_reference() -> None:
    """The helper's masked-lane value (gelu(0) = 0) is what lets a row sum skip its select:
    the sum over a row with a masked tail is still right."""
    def ref(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x).sum(-1)

    x = torch.randn(5, 37, dtype=torch.float32)
    op = generate(ref, (x,), name="gelu_rowsum")
    src = op.triton_module_source()
    start = src.index("def _gelu_rowsum_single_pass_kernel")
    single = src[start:src.index("def _gelu_rowsum_looped")]
    assert "porter_gelu(" in single and "tl.where" not in single  # no select: gelu(0) = 0
    module = load_generated_module(src, "gelu_rowsum", interpret=True)
    torch.testing.assert_close(module.launch(x).double(), ref(x.double()), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_erf_within_one_ulp_everywhere(dtype: torch.dtype) -> None:
    """porter_erf's LOWP branch: Taylor series near 0, 1 - erfc beyond."""
    x = all_values(dtype)
    xn = x.float().numpy()
    y2 = np.minimum(xn * xn, 1.0)  # the Taylor branch only serves |x| < 0.5
    small = np.full_like(xn, np.float32(fastmath.ERF_TAYLOR[-1]))
    for c in reversed(fastmath.ERF_TAYLOR[:-1]):
        small = small * y2 + np.float32(c)
    small = xn * small
    with np.errstate(over="ignore"):
        e = fastmath.erfc_pos(np.abs(xn))
    got = np.where(np.abs(xn) < 0.5, small, np.where(xn < 0, e - 1, 1 - e))
    want = torch.tensor([math.erf(v) for v in x.double().tolist()]).to(dtype)
    assert int(ulp_distance(torch.from_numpy(got).to(dtype), want).max()) <= 1


def test_generated_gelu_takes_the_formula_only_for_16_bit_outputs() -> None:
    """The generated kernel (interpreter) on every bf16 input follows the formula, and with an
    fp32 output it is erf to fp32 accuracy, not the formula."""
    op = generate(torch.nn.functional.gelu, (torch.randn(4, 8),), name="gelu_fastmath")
    assert "porter_gelu(" in op.triton_module_source()
    module = load_generated_module(op.triton_module_source(), "gelu_fastmath", interpret=True)
    x = all_values(torch.bfloat16).reshape(-1, 256)  # 65280 = 255 x 256 values
    got = module.launch(x)
    got, x = got.flatten(), x.flatten()
    tiny = torch.finfo(torch.float32).tiny  # subnormal inputs and results may be flushed
    normal = (x.float().abs() >= tiny) & (exact_gelu(x).abs() >= 2 * tiny)
    # Within one ulp, not bit-equal: the interpreter's fp32 -> bf16 store may round differently
    # from torch's round-to-nearest (the exhaustive tests above pin the formula itself).
    helper = torch.from_numpy(fastmath.gelu_lowp(x[normal].float().numpy()))
    assert int(ulp_distance(got[normal], helper.to(torch.bfloat16)).max()) <= 1
    assert int(ulp_distance(got[normal], exact_gelu(x[normal]).to(torch.bfloat16)).max()) <= 2
    x32 = torch.linspace(-6, 6, 4097).reshape(1, -1)
    got32 = module.launch(x32)
    want32 = 0.5 * x32.double() * (1.0 + torch.erf(x32.double() * (1.0 / math.sqrt(2.0))))
    assert torch.allclose(got32.double(), want32, rtol=1e-6, atol=1e-7)
    assert not torch.equal(got32, torch.from_numpy(fastmath.gelu_lowp(x32.numpy())))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_compiled_gelu_within_one_ulp_on_the_gpu(dtype: torch.dtype) -> None:
    """On the device the formula runs on approximate rsqrt/exp2 units: every input still within
    one ulp of the exact GELU (normal range), and no worse than eager anywhere."""
    op = generate(torch.nn.functional.gelu, (torch.randn(4, 8),), name="gelu_fastmath_gpu")
    module = load_generated_module(op.triton_module_source(), "gelu_fastmath_gpu", interpret=False)
    x = all_values(dtype)
    x = x[: x.numel() // 256 * 256].reshape(-1, 256)
    got = module.launch(x.cuda()).cpu().flatten()
    eager = torch.nn.functional.gelu(x.cuda()).cpu().flatten()
    x = x.flatten()
    exact = exact_gelu(x)
    normal = (x.float().abs() >= 1e-37) & (exact.abs() >= 1e-37)
    assert int(ulp_distance(got[normal], exact[normal].to(dtype)).max()) <= 1
    ours_off = ulp_distance(got[normal], exact[normal].to(dtype)) > 0
    eager_off = ulp_distance(eager[normal], exact[normal].to(dtype)) > 0
    assert int(ours_off.sum()) <= int(eager_off.sum()) + normal.sum() // 100


@pytest.mark.parametrize("op", ["softmax", "cross_entropy"])
def test_generated_exp_is_the_ftz_exp2(op: str) -> None:
    """exp is written as tl.exp2(x * log2 e) (ex2.approx.ftz on NVIDIA: no per-element
    subnormal fix-up, bench/NOTES.md item 30), never tl.exp, in every kernel of the op."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / op / "spec.py"
    mod_spec = importlib.util.spec_from_file_location(f"spec_{op}", path)
    spec = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(spec)
    inputs = spec.make_inputs((7, 129), torch.float32, "cpu", torch.Generator().manual_seed(0))
    src = generate(spec.reference, tuple(inputs), name=f"exp_{op}").triton_module_source()
    assert "tl.exp(" not in src
    assert src.count("tl.exp2(") >= 4  # the single pass, the looped kernel's two, ...
