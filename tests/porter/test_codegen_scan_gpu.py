"""The scan family on a GPU: the generated kernels compiled (not interpreted) at KernelBench's
row length (32768, every lane full), an odd one (32767: masked lanes, one-element loads) and
16384 (one block), for each form of KernelBench 89-93, against float64. Per case the default
config and the search's configs holding the most and the fewest values per thread.

    python -m pytest -q tests/porter/test_codegen_scan_gpu.py
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hwmodels
from bench.configs import max_rel_err
from porter.codegen import generate
from porter.codegen import load_generated_module
from tests.porter.scan_ops import cumprod
from tests.porter.scan_ops import cumsum
from tests.porter.scan_ops import cumsum_exclusive
from tests.porter.scan_ops import cumsum_reverse
from tests.porter.scan_ops import masked_cumsum

pytestmark = pytest.mark.gpu

TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}  # max|err| / max|ref|
# a product's rounding errors compound over the row: ~1.9e-5 at 32768 factors near 1 in the
# interpreter's sequential fp32 cumprod (300 ulp); the GPU's scan tree rounds fewer times in a row
PROD_TOL = 1e-4
ROWS = 256


def _inputs(fn, cols: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device="cuda").manual_seed(cols)
    x = torch.rand(ROWS, cols, generator=gen, device="cuda")  # KernelBench's torch.rand
    if fn is cumprod:
        x = 1 + 0.001 * (x - 0.5)  # factors near 1: the products stay O(1) along the row
    if fn is masked_cumsum:
        return x.to(dtype), torch.rand(ROWS, cols, generator=gen, device="cuda") > 0.5
    return (x.to(dtype),)


def _configs(op: Any, inputs: tuple[torch.Tensor, ...]) -> list[dict[str, Any]]:
    space = op.variant_space(hwmodels.get("h100"), inputs)

    def per_thread(c: dict[str, Any]) -> float:
        return c["ROWS"] * c["BLOCK_N"] / c["num_warps"]

    picked = [space[0], max(space, key=per_thread), min(space, key=per_thread)]
    return [c for i, c in enumerate(picked) if c not in picked[:i]]


@pytest.mark.parametrize("cols", [32768, 32767, 16384])
@pytest.mark.parametrize("fn", [cumsum, cumprod, cumsum_reverse, cumsum_exclusive,
                                masked_cumsum], ids=lambda f: f.__name__)
def test_scan_kernels_match_float64_on_the_gpu(fn, cols: int) -> None:
    dtype = torch.float32
    inputs = _inputs(fn, cols, dtype)
    op = generate(fn, tuple(t.cpu()[:2, :64] for t in inputs), name=f"gpu_{fn.__name__}")
    module = load_generated_module(op.triton_module_source(), op.name, interpret=False)
    ref = fn(*(t.double() if t.dtype.is_floating_point else t for t in inputs))
    for cfg in _configs(op, inputs):
        got = module.launch(*inputs, config=cfg)
        torch.cuda.synchronize()
        tol = PROD_TOL if fn is cumprod else TOL[dtype]
        assert max_rel_err(got, ref) <= tol, (cfg, max_rel_err(got, ref))


def test_bf16_scan_on_the_gpu() -> None:
    inputs = _inputs(cumsum_reverse, 32768, torch.bfloat16)
    op = generate(cumsum_reverse, tuple(t.cpu()[:2, :64] for t in inputs), name="gpu_bf16")
    module = load_generated_module(op.triton_module_source(), op.name, interpret=False)
    got = module.launch(*inputs)
    assert got.dtype == torch.bfloat16
    assert max_rel_err(got, cumsum_reverse(inputs[0].double())) <= TOL[torch.bfloat16]
