"""Matmuls of more than two dims (the matmul_epilogue family, porter/codegen/generation/
matmul.py, porter/templates/triton_matmul.py.j2): leading dims flattened into M (torch.matmul
of a 3-D by a 2-D tensor, KernelBench's 10; the einsum of KernelBench's 11, a bmm of batch 1),
and bmm's batch along grid axis 2 (KernelBench's 3), under the interpreter against float64;
operands whose dims cannot merge without a copy raise; the kernels the default configs launch
cross-compiled for sm_90.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hwmodels  # noqa: E402
from porter.codegen import generate  # noqa: E402
from porter.codegen.checks import torch_math_calls  # noqa: E402
from porter.codegen.errors import UnsupportedOpError  # noqa: E402
from porter.codegen.loading import load_generated_module  # noqa: E402
from tests.porter.test_codegen import _ref64  # noqa: E402
from tests.porter.test_codegen import assert_close  # noqa: E402

TILE = {"strategy": "tiled", "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 2,
        "num_warps": 1, "num_stages": 1}
TF32X3 = {**TILE, "ieee": False, "tf32x3": True}


def matmul(a, b):
    return torch.matmul(a, b)  # 3-D @ 2-D: a view to [N * M, K], mm, a view back


def einsum4d(a, b):
    return torch.einsum("bijl,lk->bijk", a, b)  # views, a bmm of batch 1, views back


def bmm(a, b):
    return torch.bmm(a, b)


def matmul_bias_gelu(a, b, bias):
    return F.gelu(torch.matmul(a, b) + bias)  # the epilogue on the 3-D view of the result


def matmul_residual(a, b, r):
    return torch.matmul(a, b) * 0.5 + r  # a 3-D input read at the flattened rows' coordinates


def bmm_batch_bias(a, b, bias):
    return torch.relu(torch.bmm(a, b) + bias)  # bias [B, 1, N]: read at the batch index


def _rand(*shape: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _run(fn: Any, ex: tuple[Any, ...], name: str, configs: list[dict[str, Any] | None],
         dtype: torch.dtype = torch.float32) -> Any:
    op = generate(fn, ex, name=name)
    src = op.triton_module_source()
    assert torch_math_calls(src) == []
    mod = load_generated_module(src, name, interpret=True)
    for cfg in configs:
        (shape, dt), = op.output_spec(ex)
        out = torch.full(shape, float("nan"), dtype=dt)
        got = mod.launch(*ex, out=out, config=cfg)
        assert got is out
        assert_close((got,), _ref64(fn, ex), dtype)
    return op, mod


# ---- leading dims flattened into M ---------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 37, 100, 29), (5, 33, 65, 7)])
def test_3d_at_2d_flattens_into_m(shape: tuple[int, int, int, int]) -> None:
    n, m, k, l_ = shape
    ex = (_rand(n, m, k, seed=0), _rand(k, l_, seed=1))
    op, _ = _run(matmul, ex, f"mm3d_{n}_{m}", [None, TILE, TF32X3, {**TF32X3, "SPLIT_K": 3},
                                                {**TF32X3, "PAD_K": True},
                                                {**TF32X3, "B_KMAJOR": True, "SWAP_AB": False}])
    assert op.problem_sizes(ex) == {"M": n * m, "N": l_, "K": k}  # one 2-D matmul, no batch
    assert "B" not in op.problem_sizes(ex) and "stride_ab" not in op.triton_module_source()


def test_einsum_4d_runs_as_one_2d_matmul() -> None:
    ex = (_rand(2, 3, 5, 40, seed=0), _rand(40, 11, seed=1))
    op, _ = _run(einsum4d, ex, "mm_einsum4d", [None, TILE, TF32X3])
    assert op.problem_sizes(ex) == {"M": 30, "N": 11, "K": 40}


def test_3d_at_2d_epilogues() -> None:
    ex = (_rand(3, 37, 100, seed=0), _rand(100, 29, seed=1), _rand(29, seed=2))
    _run(matmul_bias_gelu, ex, "mm3d_bias_gelu", [None, TF32X3, {**TF32X3, "SPLIT_K": 3}])
    ex = (_rand(3, 37, 100, seed=0), _rand(100, 29, seed=1), _rand(3, 37, 29, seed=3))
    _run(matmul_residual, ex, "mm3d_residual", [None, TILE])


def test_3d_at_2d_bf16() -> None:
    ex = (_rand(3, 37, 100, seed=0, dtype=torch.bfloat16),
          _rand(100, 29, seed=1, dtype=torch.bfloat16))
    _run(matmul, ex, "mm3d_bf16", [None, TILE], torch.bfloat16)


def test_unmergeable_leading_dims_raise_a_clear_error() -> None:
    # generated for a contiguous A; A's batch transposed (37, 3, 100).transpose(0, 1): its
    # leading dims cannot merge into M without a copy, which the launcher does not make
    ex = (_rand(3, 37, 100, seed=0), _rand(100, 29, seed=1))
    op = generate(matmul, ex, name="mm3d_strided")
    mod = load_generated_module(op.triton_module_source(), "mm3d_strided", interpret=True)
    at = _rand(37, 3, 100, seed=0).transpose(0, 1)
    with pytest.raises(ValueError, match=r"operand A \(input 0\).*cannot be read as a 2-D matrix"):
        mod.launch(at, ex[1])
    with pytest.raises(ValueError, match="cannot be read"):
        op.kernel_refs((at, ex[1]), TILE)
    # traced with that layout, torch.matmul is a bmm of A with B broadcast: exact
    _run(matmul, (at, ex[1]), "mm3d_tbatch", [None, TILE])


# ---- bmm: the batch along grid axis 2 ------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bmm_matches_float64(dtype: torch.dtype) -> None:
    ex = (_rand(3, 37, 100, seed=0, dtype=dtype), _rand(3, 100, 29, seed=1, dtype=dtype))
    configs = [None, TILE] + ([TF32X3, {**TF32X3, "SWAP_AB": True}] if dtype == torch.float32
                              else [])
    op, mod = _run(bmm, ex, f"bmm_{str(dtype)[6:]}", configs, dtype)
    assert op.problem_sizes(ex) == {"M": 37, "N": 29, "K": 100, "B": 3}
    # split-K, PAD_K and B's copy are 2-D only: a batched config asking for them runs without
    if dtype == torch.float32:
        got = mod.launch(*ex, config={**TF32X3, "SPLIT_K": 4, "PAD_K": True, "B_KMAJOR": True})
        assert_close((got,), _ref64(bmm, ex), dtype)


def test_bmm_transposed_operands_and_broadcast_batch() -> None:
    # A's batch transposed, B given as [B, N, K]: strides only, no copy
    a = _rand(37, 3, 100, seed=0).transpose(0, 1)
    b = _rand(3, 29, 100, seed=1).transpose(1, 2)
    _run(bmm, (a, b), "bmm_strided", [None, TILE])
    # matmul broadcasting B's batch of 1: B's batch stride 0
    _run(matmul, (_rand(3, 37, 100, seed=0), _rand(1, 100, 29, seed=1)), "bmm_bcast",
         [None, TILE])


def test_bmm_epilogue_reads_the_batch() -> None:
    ex = (_rand(3, 37, 100, seed=0), _rand(3, 100, 29, seed=1), _rand(3, 1, 29, seed=2) - 0.5)
    _run(bmm_batch_bias, ex, "bmm_batch_bias", [None, TF32X3])
    ex = (_rand(3, 37, 100, seed=0), _rand(3, 100, 29, seed=1), _rand(29, seed=2))
    _run(matmul_bias_gelu, ex, "bmm_bias_gelu", [None, TILE])


def scores(q, k):
    return torch.matmul(q, k.transpose(-1, -2)) * 0.125  # 4-D: the batch merges two dims


def test_4d_batch_merges_two_dims_and_a_broadcast_one_is_unsupported() -> None:
    ex = (_rand(2, 3, 17, 8, seed=0), _rand(2, 3, 19, 8, seed=1))
    op, _ = _run(scores, ex, "bmm_scores", [None, TILE])
    assert op.problem_sizes(ex) == {"M": 17, "N": 19, "K": 8, "B": 6}
    # B broadcast over the outer batch dim only: no one batch stride reads it
    with pytest.raises(UnsupportedOpError, match="broadcast dim merged"):
        generate(matmul, (_rand(2, 3, 17, 8, seed=0), _rand(3, 8, 5, seed=1)), name="bmm_b4")


@pytest.mark.parametrize("view", ["transpose", "merge"])
@pytest.mark.parametrize("batched", [False, True])
def test_result_stored_through_views(view: str, batched: bool) -> None:
    # the result's views give the store its coordinates: a transposed or merged output
    def fn(a, b):
        c = torch.matmul(a, b)
        return c.transpose(0, 2) if view == "transpose" else c.reshape(3, 37 * 29) * 2.0

    ex = (_rand(3, 37, 100, seed=0), _rand(*((3, 100, 29) if batched else (100, 29)), seed=1))
    _run(fn, ex, f"mm_outview_{view}_{batched}", [None, TILE])


def test_one_input_as_both_reshaped_operands_is_unsupported() -> None:
    with pytest.raises(UnsupportedOpError, match="both operands"):
        generate(lambda a: torch.bmm(a, a.transpose(1, 2)), (_rand(3, 8, 8, seed=0),),
                 name="bmm_same")


# ---- configs and kernel refs ---------------------------------------------------------------------
def _meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype)


KB = {  # KernelBench level 1's shapes
    "kb10": (matmul, ((16, 1024, 2048), (2048, 768))),
    "kb11": (einsum4d, ((8, 256, 512, 256), (256, 768))),
    "kb3": (bmm, ((128, 512, 1024), (128, 1024, 2048))),
}


def test_batched_configs_are_tiled_and_unsplit() -> None:
    hw = hwmodels.get("h100")
    for dtype in (torch.float32, torch.bfloat16):
        ex = (_rand(3, 37, 100, seed=0, dtype=dtype), _rand(3, 100, 29, seed=1, dtype=dtype))
        op = generate(bmm, ex, name=f"bmm_space_{str(dtype)[6:]}")
        # long K, few tiles per batch: a 2-D matmul of these sizes would split K
        big = (_meta(64, 64, 65536, dtype=dtype), _meta(64, 65536, 64, dtype=dtype))
        space = op.variant_space(hw, big)
        assert space and op.default_config(hw, big) == space[0]
        assert all(c["strategy"] == "tiled" and "SPLIT_K" not in c for c in space)
    # the flattened 3-D @ 2-D keeps the 2-D matmul's TMA configs (bf16)
    ex = (_rand(3, 37, 128, seed=0, dtype=torch.bfloat16),
          _rand(128, 64, seed=1, dtype=torch.bfloat16))
    op = generate(matmul, ex, name="mm3d_space")
    kb10 = (_meta(16, 1024, 2048, dtype=torch.bfloat16), _meta(2048, 768, dtype=torch.bfloat16))
    assert op.default_config(hw, kb10)["strategy"] == "tma_persistent"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(KB))
def test_default_configs_cross_compile_for_sm90(tmp_path, case: str, dtype: torch.dtype) -> None:
    import targets
    from porter.search import launch_config

    fn, shapes = KB[case]
    small = tuple(_rand(*[min(s, 8) for s in shape], seed=i, dtype=dtype)
                  for i, shape in enumerate(shapes))
    op = generate(fn, small, name=f"{case}_{str(dtype)[6:]}")
    hw = hwmodels.get("h100")
    big = tuple(_meta(*shape, dtype=dtype) for shape in shapes)
    cfg = op.default_config(hw, big)
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    refs = op.kernel_refs(big, cfg, source_path=str(path))
    assert refs
    backend = targets.for_device(hw)
    for ref in refs:
        if case == "kb3":
            assert ref.signature["stride_ab"] == "i32:16" and ref.name.endswith("_matmul_kernel")
            assert (ref.constexprs["stride_bk"], ref.constexprs["stride_bn"]) == (2048, 1)
        rep = backend.compile(ref, launch_config(cfg), hw)
        assert rep.fits, (ref.name, rep.reasons)
        assert rep.resources.spill_bytes == 0, ref.name


def test_batched_tf32x3_swaps_a_row_major_b_at_any_m() -> None:
    # no K-major copy of B for a batched matmul: the rule swaps at M >= 1024 too, as the
    # launcher does (`_swap_ab` with M 0)
    ex = (_rand(3, 37, 100, seed=0), _rand(3, 100, 29, seed=1))
    op = generate(bmm, ex, name="bmm_swap")
    cfg = {**TF32X3, "BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    for m in (512, 2048):
        (ref,) = op.kernel_refs((_meta(2, m, 64), _meta(2, 64, 256)), cfg)
        assert ref.constexprs["SWAP_AB"] is True and ref.constexprs["stride_bn"] == 1
        assert ref.constexprs["PARTIAL"] is False and ref.constexprs["EVEN_K"] is False
    (ref,) = op.kernel_refs((_meta(2, 2048, 64), _meta(2, 256, 64).transpose(1, 2)), cfg)
    assert ref.constexprs["SWAP_AB"] is False  # B K-major already
