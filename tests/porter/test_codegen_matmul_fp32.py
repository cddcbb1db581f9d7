"""fp32 matmuls over a long K (the matmul_epilogue family's tiled kernel, porter/templates/
triton_matmul.py.j2): the sum in partial accumulators of ACC_CHUNK K blocks each
(`heuristics.acc_chunk`), under the interpreter and in the configs the search builds.

One fp32 accumulator over K = 524288 rounds every step at the size of the whole sum; a numpy
model of that sequential sum (test below) is off by ~1e-4 relative, ten times fp32's tolerance,
as KernelBench's 6_Matmul_with_large_K_dimension_ was on the H100 (8.6e-5), where partial sums of
4096 leave ~1e-6.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import hwmodels  # noqa: E402
from porter.codegen import generate  # noqa: E402
from porter.codegen import heuristics  # noqa: E402
from tests.porter.test_codegen import _ref64  # noqa: E402
from tests.porter.test_codegen import assert_close  # noqa: E402
from tests.porter.test_codegen import run_generated  # noqa: E402


def matmul(a, b):
    return a @ b


def _rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("chunk", [0, 1, 3, 19, 40])
def test_partial_accumulators_sum_every_k_block(chunk: int) -> None:
    # K = 300 in 19 blocks of 16: partials of `chunk` blocks, the last one short (3: six of
    # three and one of one); 0 is one accumulator, 40 more blocks than K has
    ex = (_rand(20, 300, seed=0), _rand(300, 24, seed=1))
    cfg = {"strategy": "tiled", "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2,
           "num_warps": 1, "num_stages": 1, "ACC_CHUNK": chunk}
    _, got = run_generated(matmul, ex, f"mm_chunk{chunk}", config=cfg, use_out=True)
    assert_close(got, _ref64(matmul, ex), torch.float32)


def test_the_launcher_chunks_a_long_k_only() -> None:
    op = generate(matmul, (_rand(32, 64, seed=0), _rand(64, 16, seed=1)), name="mm_rule")
    src = op.triton_module_source()
    assert "ACC_CHUNK" in src and "def acc_chunk" in src
    hw = hwmodels.get("h100")

    def chunk(m: int, n: int, k: int) -> int:
        big = (torch.empty(m, k, device="meta"), torch.empty(k, n, device="meta"))
        cfg = op.default_config(hw, big)
        # KernelBench's 6 and 4 split K (a reduce kernel comes too); each split is long
        ref = next(r for r in op.kernel_refs(big, cfg) if r.name.endswith("_matmul_kernel"))
        return ref.constexprs["ACC_CHUNK"]

    # KernelBench's 6_Matmul_with_large_K and 4_Matrix_vector_multiplication split K into
    # ranges of 8192 (a reduce kernel comes too): one accumulator each
    assert chunk(256, 256, 524288) == 0
    assert chunk(2048, 1, 1048576) == 0
    assert chunk(4096, 4096, 16384) == 4096 // 32  # enough tiles: K not split, but chunked
    assert chunk(2048, 4096, 8192) == 0  # 2_Standard_matrix_multiplication, as it was
    # the search keeps long-K tiles at <= 32 accumulator values per thread (two tiles of them)
    # and BLOCK_K 32: more spilled on sm_90
    big = (torch.empty(256, 524288, device="meta"), torch.empty(524288, 256, device="meta"))
    space = op.variant_space(hw, big)
    assert space and all(c["BLOCK_M"] * c["BLOCK_N"] <= 32 * 32 * c["num_warps"] and
                         c["BLOCK_K"] <= 32 for c in space if c.get("SPLIT_K") != 64)


def test_bf16_matmul_has_no_partial_accumulators() -> None:
    bf = generate(matmul, (_rand(32, 64, seed=0).bfloat16(), _rand(64, 16, seed=1).bfloat16()),
                  name="mm_rule16")
    assert "ACC_CHUNK" not in bf.triton_module_source()
    # a matmul_rowwise stage takes the knob whatever its dtype; 16-bit operands keep it at 0
    assert heuristics.acc_chunk(524288, 32, 2) == 0


def test_sequential_fp32_sum_model_misses_the_tolerance_partials_do_not() -> None:
    # the kernel's per-element accumulation, modelled: exact products added in order into one
    # fp32 value, against partial sums of 4096 (heuristics.acc_chunk at BLOCK_K = 32)
    g = np.random.default_rng(0)
    k = 524288
    prods = (g.random(k, dtype=np.float32).astype(np.float64) *
             g.random(k, dtype=np.float32).astype(np.float64))
    exact = prods.sum()
    one = float(np.cumsum(prods.astype(np.float32), dtype=np.float32)[-1])
    step = heuristics.acc_chunk(k, 32, 4) * 32
    parts = np.cumsum(prods.astype(np.float32).reshape(-1, step), axis=1, dtype=np.float32)[:, -1]
    chunked = float(np.cumsum(parts, dtype=np.float32)[-1])
    assert abs(one - exact) > 1e-5 * exact  # fp32's tolerance (harness/tolerance.py)
    assert abs(chunked - exact) < 1e-6 * exact


def matmul_at(a, b):
    return a.t() @ b  # A given as [K, M] (KernelBench's 16_Matmul_with_transposed_A)


TF32X3_TILE = {"strategy": "tiled", "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2,
               "num_warps": 1, "num_stages": 1, "ieee": False, "tf32x3": True}


@pytest.mark.parametrize("fn,a_shape", [(matmul, (37, 53)), (matmul_at, (53, 37))])
def test_row_major_b_is_copied_k_major_and_the_product_is_right(fn, a_shape) -> None:
    # odd M, K, N: the copy kernel's 64x64 tiles and the matmul's tiles both end ragged
    ex = (_rand(*a_shape, seed=0), _rand(53, 29, seed=1))
    op = generate(fn, ex, name=f"mm_kmajor_{fn.__name__}")
    from porter.codegen.loading import load_generated_module

    mod = load_generated_module(op.triton_module_source(), op.name, interpret=True)
    forced = {**TF32X3_TILE, "B_KMAJOR": True}
    copied = mod._b_kmajor(ex, 37, forced)[1]
    assert copied is not ex[1] and copied.stride() == (1, 53)  # K (dim 0) contiguous
    assert torch.equal(copied, ex[1])
    got = mod.launch(*ex, out=torch.full((37, 29), float("nan")), config=forced)
    assert_close((got,), _ref64(fn, ex), torch.float32)
    # B^T already K-contiguous, exact fp32, or the rule's small M: B goes in as it is
    assert mod._b_kmajor((ex[0], ex[1].t().contiguous().t()), 37, forced)[1].stride() == (1, 53)
    assert mod._b_kmajor(ex, 37, {**forced, "ieee": True})[1] is ex[1]
    assert mod._b_kmajor(ex, 37, TF32X3_TILE)[1] is ex[1]  # M = 37 < 1024


def test_cross_compiled_kernel_takes_the_copy_strides_where_the_rule_copies() -> None:
    op = generate(matmul, (_rand(32, 64, seed=0), _rand(64, 16, seed=1)), name="mm_kmajor_refs")
    hw = hwmodels.get("h100")

    def b_strides(m: int, **cfg: object) -> tuple[int, int]:
        big = (torch.empty(m, 4096, device="meta"), torch.empty(4096, 2048, device="meta"))
        config = {**op.default_config(hw, big), **cfg}
        (ref,) = op.kernel_refs(big, config)
        return ref.constexprs["stride_bk"], ref.constexprs["stride_bn"]

    assert heuristics.b_kmajor_copy(4096, 2048) and not heuristics.b_kmajor_copy(512, 2048)
    assert b_strides(4096, ieee=False, tf32x3=True) == (1, 4096)  # the K-contiguous copy
    assert b_strides(512, ieee=False, tf32x3=True) == (2048, 1)  # M below the rule's
    assert b_strides(4096, ieee=True) == (2048, 1)  # exact fp32: no tensor cores, no copy
    assert b_strides(4096, ieee=False, tf32x3=True, B_KMAJOR=False) == (2048, 1)
