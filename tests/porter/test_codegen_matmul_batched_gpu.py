"""Matmuls of more than two dims on a GPU (the generated kernels compiled, not interpreted),
against float64 within the judge's tolerance: KernelBench level 1's 10 (3-D @ 2-D, the leading
dims flattened into M), 11 (the einsum bijl,lk->bijk) and 3 (bmm, the batch on grid axis 2) at
reduced sizes, fp32 (the default tf32x3 configs and exact fp32) and bf16 (a flattened bf16
matmul may take the persistent TMA kernel), and a bmm with a per-batch bias epilogue.
Correctness only: KernelBench's timings are bench.kernelbench_gpu's.

    python -m pytest -q tests/porter/test_codegen_matmul_batched_gpu.py
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hwmodels
from harness.tolerance import tolerance
from porter.codegen import generate
from porter.codegen import load_generated_module

pytestmark = pytest.mark.gpu


def matmul(a, b):
    return torch.matmul(a, b)


def einsum4d(a, b):
    return torch.einsum("bijl,lk->bijk", a, b)


def bmm(a, b):
    return torch.bmm(a, b)


def bmm_batch_bias(a, b, bias):
    return torch.relu(torch.bmm(a, b) + bias)


CASES = {  # reduced forms of KernelBench's shapes (odd sizes where they are round there)
    "kb10": (matmul, ((4, 257, 520), (520, 200))),
    "kb11": (einsum4d, ((2, 16, 33, 64), (64, 96))),
    "kb3": (bmm, ((8, 130, 264), (8, 264, 520))),
    "bias": (bmm_batch_bias, ((8, 130, 264), (8, 264, 520), (8, 1, 520))),
}


def _x_tol(fn: Any, got: torch.Tensor, inputs: tuple[torch.Tensor, ...],
           dtype: torch.dtype) -> float:
    want = fn(*(t.double() for t in inputs))
    tol = tolerance(dtype)
    return float(((got.double() - want).abs() / (tol.atol + tol.rtol * want.abs())).max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_matmuls_match_float64_compiled(case: str, dtype: torch.dtype) -> None:
    fn, shapes = CASES[case]
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = tuple((torch.rand(*s, generator=gen, device="cuda") - 0.25).to(dtype)
                   for s in shapes)
    op = generate(fn, tuple(t.cpu() for t in inputs), name=f"{case}_gpu_{str(dtype)[6:]}")
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=False)
    hw = hwmodels.get("h100")
    default = op.default_config(hw, inputs)
    configs = [None, default] + [c for c in op.variant_space(hw, inputs)[1:4]]
    if dtype == torch.float32:
        configs.append({**default, "ieee": True, "tf32x3": False})
    for cfg in configs:
        got = mod.launch(*inputs, config=cfg)
        torch.cuda.synchronize()
        assert _x_tol(fn, got, inputs, dtype) <= 1, cfg
