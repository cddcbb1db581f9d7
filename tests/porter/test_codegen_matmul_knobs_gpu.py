"""The tiled matmul's knobs (SWAP_AB, SPLIT_K, PAD_K, EVEN_K) on a GPU: the generated kernels
compiled (not interpreted), against float64 within fp32's judge tolerance, at reduced forms of
KernelBench's 6 (long K, few tiles) and 8 (odd K and row strides), with a bias + GELU epilogue
so that the split-K reduce kernel's epilogue runs compiled too. Correctness only: the timings
are bench/matmul_knobs.py's.

    python -m pytest -q tests/porter/test_codegen_matmul_knobs_gpu.py
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import hwmodels
from harness.tolerance import tolerance
from porter.codegen import generate
from porter.codegen import load_generated_module

pytestmark = pytest.mark.gpu


def linear_gelu(a, b, bias):
    return F.gelu(a @ b + bias)


@pytest.fixture(scope="module")
def op_mod() -> tuple[Any, Any]:
    small = (torch.rand(48, 80), torch.rand(80, 112), torch.rand(112))
    op = generate(linear_gelu, small, name="mm_knobs_gpu")
    return op, load_generated_module(op.triton_module_source(), op.name, interpret=False)


def _x_tol(got: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> float:
    want = linear_gelu(*(t.double() for t in inputs))
    tol = tolerance(torch.float32)
    return float(((got.double() - want).abs() / (tol.atol + tol.rtol * want.abs())).max())


@pytest.mark.parametrize("m,k,n,extras", [
    (256, 131072, 256, ({}, {"SPLIT_K": 1}, {"SPLIT_K": 16, "SWAP_AB": False},
                        {"SPLIT_K": 7, "SWAP_AB": True}, {"SPLIT_K": 64, "EVEN_K": True})),
    (1031, 2949, 1001, ({}, {"PAD_K": False}, {"PAD_K": False, "SWAP_AB": True},
                        {"PAD_K": True, "SPLIT_K": 3}, {"PAD_K": False, "B_KMAJOR": False})),
])
def test_knobs_match_float64_compiled(op_mod, m: int, k: int, n: int,
                                      extras: tuple[dict[str, Any], ...]) -> None:
    op, mod = op_mod
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = tuple(torch.rand(*s, generator=gen, device="cuda") for s in ((m, k), (k, n), (n,)))
    default = op.default_config(hwmodels.get("h100"), inputs)
    for extra in extras:
        cfg = {**default, **extra}
        got = mod.launch(*inputs, config=cfg)
        torch.cuda.synchronize()
        assert _x_tol(got, inputs) <= 1, cfg
