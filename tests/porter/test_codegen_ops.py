"""Pointwise ops, multi-dim layer norm and the robust L2 norm, under the interpreter.

Each case runs the generated module on small odd shapes and compares it with the same
reference evaluated in float64 (helpers shared with test_codegen).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import math  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from porter.codegen import generate  # noqa: E402
from tests.porter.test_codegen import _ref64  # noqa: E402
from tests.porter.test_codegen import assert_close  # noqa: E402
from tests.porter.test_codegen import check  # noqa: E402
from tests.porter.test_codegen import rand  # noqa: E402
from tests.porter.test_codegen import run_generated  # noqa: E402

FP32 = torch.float32

UNARY = {
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "elu": lambda x: F.elu(x, alpha=0.7),
    "selu": lambda x: torch.selu(x),
    "celu": lambda x: F.celu(x, alpha=1.5),
    "hardswish": lambda x: F.hardswish(x),
    "hardsigmoid": lambda x: F.hardsigmoid(x),
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    "log1p": lambda x: torch.log1p(x.abs()),
    "expm1": lambda x: torch.expm1(x),
    "sign": lambda x: torch.sign(x),
    "reciprocal": lambda x: torch.reciprocal(x + 5.0),
    "clamp_min_max": lambda x: torch.clamp_max(torch.clamp_min(x, -0.5), 0.25),
    "isnan_where": lambda x: torch.where(torch.isnan(x.log()), 0.0, x.log()),
    "isinf_where": lambda x: torch.where(torch.isinf(1.0 / (x > 0.5).float()), 7.0, x),
}


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_ops_match_float64(name: str) -> None:
    check(UNARY[name], (rand(5, 37),), name, FP32)


def test_binary_and_logical_ops() -> None:
    def fn(x, y):
        both = torch.logical_and(x > 0, y > 0)
        either = torch.logical_or(x > 0, y > 0)
        one = torch.logical_xor(x > 0, y > 0)
        return torch.where(one, torch.maximum(x, y), torch.minimum(x, y)) + both.float() \
            + 2.0 * either.float() + torch.logical_not(x > 0.5).float()
    check(fn, (rand(3, 41), rand(3, 41, seed=1)), "logic", FP32)


def test_isnan_kl_div_pattern() -> None:
    # F.kl_div lowers through isnan (xlogy's NaN handling); the targets hold exact zeros.
    def kl(p, t):
        return F.kl_div(torch.log(p), t, reduction="batchmean")
    p = torch.softmax(rand(6, 29), dim=-1)
    t = torch.softmax(rand(6, 29, seed=1), dim=-1)
    t[:, ::4] = 0.0
    check(kl, (p, t), "kl", FP32)


def test_log1p_expm1_keep_tiny_values() -> None:
    # exp(x) - 1 and log(1 + x) lose every bit at |x| ~ 1e-7; the generated forms must not.
    x = torch.tensor([[1e-7, -3e-6, 2e-4, -1e-3, 0.5, -30.0, 80.0, 0.0]])
    for fn, name in ((torch.expm1, "expm1_tiny"), (torch.log1p, "log1p_tiny")):
        xin = x if fn is torch.expm1 else x.clamp_min(-0.9)
        _, got = run_generated(fn, (xin,), name)
        ref = fn(xin.double())
        rel = ((got[0].double() - ref).abs() / ref.abs().clamp_min(1e-30))
        finite = torch.isfinite(ref)
        assert (rel[finite] < 1e-5).all(), (got[0], ref)
        assert torch.equal(torch.isinf(got[0]), torch.isinf(ref))


def test_layer_norm_over_three_trailing_dims() -> None:
    def ln(x, w, b):
        return F.layer_norm(x, x.shape[1:], w, b, 1e-5)
    x = rand(3, 4, 5, 7)
    w, b = rand(4, 5, 7, seed=1), rand(4, 5, 7, seed=2)
    op = check(ln, (x, w, b), "ln3", FP32)
    assert op.family == "rowwise"
    # the same module at another shape (sizes traced symbolically)
    x2 = rand(2, 3, 6, 5, seed=3)
    w2, b2 = rand(3, 6, 5, seed=4), rand(3, 6, 5, seed=5)
    from porter.codegen import load_generated_module
    mod = load_generated_module(op.triton_module_source(), "ln3b", interpret=True)
    assert_close((mod.launch(x2, w2, b2),), _ref64(ln, (x2, w2, b2)), FP32)
    for strategy in ("looped",):
        cfg = {**op.default_config(None, (x, w, b)), "strategy": strategy, "BLOCK_N": 32}
        _, got = run_generated(ln, (x, w, b), "ln3c", config=cfg)
        assert_close(got, _ref64(ln, (x, w, b)), FP32)


def test_layer_norm_two_dims_no_affine() -> None:
    def ln(x):
        return F.layer_norm(x, x.shape[-2:])
    check(ln, (rand(5, 3, 9),), "ln2", FP32)


@pytest.mark.parametrize("strategy", ["single_pass", "looped"])
def test_l2_norm_survives_tiny_and_huge_rows(strategy: str) -> None:
    def l2(x):
        return x / torch.norm(x, p=2, dim=1, keepdim=True)
    tiny = torch.finfo(torch.float32).tiny
    x = rand(4, 45)
    x[0] *= tiny  # sum(x^2) underflows to 0 in fp32
    x[1] *= 1e30  # sum(x^2) overflows to inf in fp32
    x[2] = 0.0    # 0 / 0 = NaN, as in PyTorch
    op = generate(l2, (x,), name="l2")
    # the looped kernel folds max|x| and the scaled sum of squares into one pass
    assert "s_acc = s_acc * ratio * ratio + q * q" in op.triton_module_source()
    cfg = {**op.default_config(None, (x,)), "strategy": strategy}
    if strategy == "looped":
        cfg["BLOCK_N"] = 16
    _, got = run_generated(l2, (x,), "l2" + strategy, config=cfg)
    ref = _ref64(l2, (x,))
    assert torch.isnan(got[0][2]).all() and torch.isnan(ref[0][2]).all()
    assert_close((got[0][[0, 1, 3]],), (ref[0][[0, 1, 3]],), FP32)
    assert not math.isnan(got[0][0, 0].item())


@pytest.mark.parametrize("name", ["elu", "log1p", "expm1", "leaky_relu"])
def test_metal_source_for_new_ops(name: str) -> None:
    op = generate(UNARY[name], (rand(4, 33),), name="m_" + name)
    src = op.metal_source()
    assert src is not None and "tl." not in src


def test_metal_source_for_multi_dim_layer_norm() -> None:
    def ln(x, w):
        return F.layer_norm(x, x.shape[1:], w)
    op = generate(ln, (rand(2, 3, 4, 5), rand(3, 4, 5, seed=1)), name="m_ln3")
    src = op.metal_source()
    assert src is not None and "tl." not in src
    assert "//" not in src.replace("// ", "")  # C integer division is `/`
