"""The tiled matmul's operand and split knobs (porter/templates/triton_matmul.py.j2): SWAP_AB
(the tile as C^T = B^T A^T), SPLIT_K (fp32 partial tiles in a workspace, summed in order by
the reduce kernel, which runs the epilogue) and PAD_K (zero-padded K-contiguous copies of A
and B, the K loop unmasked): under the interpreter against float64, their default rules
(porter/codegen/heuristics.py) as pure functions, and the kernels each config launches
cross-compiled for sm_90.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hwmodels  # noqa: E402
from porter.codegen import generate  # noqa: E402
from porter.codegen import heuristics  # noqa: E402
from porter.codegen.checks import torch_math_calls  # noqa: E402
from porter.codegen.loading import load_generated_module  # noqa: E402
from tests.porter.test_codegen import _ref64  # noqa: E402
from tests.porter.test_codegen import assert_close  # noqa: E402

TILE = {"strategy": "tiled", "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 2,
        "num_warps": 1, "num_stages": 1, "ieee": False, "tf32x3": True}


def linear_gelu(a, b, bias):
    return F.gelu(a @ b + bias)  # the epilogue reads an input: the reduce kernel runs it


def matmul_bt(a, w):
    return a @ w.t()  # B K-contiguous (w is [N, K])


def _rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def lg() -> tuple[Any, Any]:
    """linear_gelu's op and interpreted module (sizes are symbolic: one serves every shape)."""
    op = generate(linear_gelu, (_rand(37, 100, seed=0), _rand(100, 29, seed=1),
                                _rand(29, seed=2)), name="mm_knobs")
    return op, load_generated_module(op.triton_module_source(), op.name, interpret=True)


def _inputs(m: int, k: int, n: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    return _rand(m, k, seed=seed), _rand(k, n, seed=seed + 1), _rand(n, seed=seed + 2)


def _check(mod: Any, fn: Any, ex: tuple[torch.Tensor, ...], cfg: dict[str, Any]) -> None:
    out = torch.full((ex[0].shape[0], ex[1].shape[-1] if fn is linear_gelu else ex[1].shape[0]),
                     float("nan"))
    got = mod.launch(*ex, out=out, config=cfg)
    assert got is out
    assert_close((got,), _ref64(fn, ex), torch.float32)


# ---- numerics under the interpreter --------------------------------------------------------------
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("m,k,n", [(1, 1537, 64), (37, 100, 29), (64, 4097, 37)])
def test_swap_ab_matches_float64(lg, swap: bool, m: int, k: int, n: int) -> None:
    _check(lg[1], linear_gelu, _inputs(m, k, n), {**TILE, "SWAP_AB": swap})


@pytest.mark.parametrize("split", [1, 3, 4])
@pytest.mark.parametrize("m,k,n", [(37, 100, 29), (64, 1537, 37), (1, 4097, 64)])
def test_split_k_matches_float64(lg, split: int, m: int, k: int, n: int) -> None:
    # K not a multiple of BLOCK_K and uneven splits (1537 = 512 + 512 + 513 at 3), bias + GELU
    # in the reduce kernel's epilogue
    _check(lg[1], linear_gelu, _inputs(m, k, n), {**TILE, "SPLIT_K": split})


def test_split_k_with_swap_partial_accumulators_and_exact_fp32(lg) -> None:
    ex = _inputs(37, 4097, 29)
    for extra in ({"SPLIT_K": 4, "SWAP_AB": True, "ACC_CHUNK": 5},
                  {"SPLIT_K": 3, "ieee": True, "tf32x3": False},
                  {"SPLIT_K": 3, "REDUCE_M": 16, "REDUCE_N": 32}):
        _check(lg[1], linear_gelu, ex, {**TILE, **extra})


@pytest.mark.parametrize("m,k,n", [(37, 1537, 29), (64, 100, 37)])
def test_pad_k_matches_float64_at_odd_row_strides(lg, m: int, k: int, n: int) -> None:
    # A and B column slices of wider rows: odd row strides (1539, 39), K = 1537 not whole blocks
    a = _rand(m, k + 2, seed=3)[:, :k]
    b = _rand(k, n + 2, seed=4)[:, :n]
    ex = (a, b, _rand(n, seed=5))
    for extra in ({"PAD_K": True}, {"PAD_K": True, "SPLIT_K": 3},
                  {"PAD_K": True, "SWAP_AB": True}, {"PAD_K": False}):
        _check(lg[1], linear_gelu, ex, {**TILE, **extra})


def test_pad_k_copies_are_k_contiguous_with_zero_tails(lg) -> None:
    a, b, _ = ex = _inputs(37, 100, 29)
    ops, k_pad, padded = lg[1]._pad_k(ex, 37, 29, 100, {**TILE, "PAD_K": True})
    assert padded and k_pad == 128
    assert ops[0].shape == (37, 128) and ops[0].stride() == (128, 1)
    assert ops[1].shape == (128, 29) and ops[1].stride() == (1, 128)  # K-major B
    assert torch.equal(ops[0][:, :100], a) and torch.equal(ops[1][:100], b)
    assert not ops[0][:, 100:].any() and not ops[1][100:].any()
    # a config without PAD_K at these small sizes: the rule leaves the operands as they are
    assert lg[1]._pad_k(ex, 37, 29, 100, TILE)[2] is False


def test_swap_ab_leaves_b_uncopied(lg) -> None:
    ex = _inputs(37, 100, 29)
    assert lg[1]._b_kmajor(ex, 37, {**TILE, "B_KMAJOR": True, "SWAP_AB": True})[1] is ex[1]
    assert lg[1]._b_kmajor(ex, 37, {**TILE, "B_KMAJOR": True})[1] is not ex[1]
    assert lg[1]._swap_ab(ex, 37, TILE)  # M < 1024: the rule swaps
    assert not lg[1]._swap_ab(ex, 37, {**TILE, "B_KMAJOR": True})  # the config asks for the copy


def test_b_transposed_with_every_knob() -> None:
    # B K-contiguous already: nothing to swap or copy; pad and split still apply
    ex = (_rand(37, 1537, seed=0), _rand(29, 1537, seed=1))
    op = generate(matmul_bt, ex, name="mm_knobs_bt")
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=True)
    assert torch_math_calls(op.triton_module_source()) == []
    for extra in ({}, {"SPLIT_K": 3}, {"PAD_K": True}, {"PAD_K": True, "SPLIT_K": 4},
                  {"SWAP_AB": True}):
        _check(mod, matmul_bt, ex, {**TILE, **extra})


# ---- the default rules ---------------------------------------------------------------------------
def test_swap_ab_rule() -> None:
    assert heuristics.swap_ab(256, 1, 256)  # KernelBench 6: A K-contiguous, B row-major
    assert not heuristics.swap_ab(4096, 1, 4096)  # M >= 1024: B's K-major copy instead
    assert not heuristics.swap_ab(256, 1, 1)  # B already K-major
    assert not heuristics.swap_ab(256, 256, 256)  # A M-contiguous: A^T would not be K-major


def test_split_k_rule() -> None:
    # KernelBench 6: one program per SM (4 tiles of 128x128 -> 33 splits; 16 of 64x64 -> 8)
    assert heuristics.split_k(256, 256, 524288, 128, 128, 32, 132) == 33
    assert heuristics.split_k(256, 256, 524288, 64, 64, 32, 132) == 8
    assert heuristics.split_k(256, 256, 524288, 128, 128, 64, 132) == 33
    assert heuristics.split_k(4096, 4096, 4096, 128, 128, 64, 132) == 1  # enough tiles
    assert heuristics.split_k(256, 256, 2048, 64, 64, 32, 132) == 1  # K short
    assert heuristics.split_k(1024, 1024, 6000, 128, 128, 32, 132) == 1  # K < 8 max(M, N)
    # each split keeps >= 16 BLOCK_K steps
    assert heuristics.split_k(16, 16, 8192, 16, 16, 64, 132) == 8192 // (16 * 64)
    assert heuristics.split_k(0, 16, 8192, 16, 16, 64, 132) == 1


def test_a_k_of_one_block_runs_exact_fp32_at_small_tiles(lg) -> None:
    # KernelBench 9 (32768 x 32 @ 32 x 32768): the output's store is the bound; exact fp32 at
    # 64x64 tiles ran 1.07x cuBLAS on an H100, the tf32x3 128x128 default 0.94x
    cfg = heuristics.matmul_default(32768, 32768, 32, 4, tf32x3=True)
    assert cfg["ieee"] and not cfg["tf32x3"] and (cfg["BLOCK_M"], cfg["BLOCK_N"]) == (64, 64)
    assert cfg["num_stages"] == 2 and "SPLIT_K" not in cfg
    full = lg[0].default_config(hwmodels.get("h100"), _meta(32768, 32, 32768))
    assert full["ieee"] and not full["tf32x3"]  # default_config keeps the rule's precision
    # K = 64 (KernelBench 7) stays on the tensor cores
    assert not heuristics.matmul_default(32768, 32768, 64, 4, tf32x3=True).get("ieee", False)
    assert "ieee" not in heuristics.matmul_default(32768, 32768, 32, 4)  # fp32 off the rule


@pytest.mark.parametrize("k,split,bk", [(100, 3, 16), (1537, 3, 32), (4097, 4, 32),
                                        (524288, 16, 32), (64, 8, 32), (0, 4, 32), (1, 1, 16)])
def test_split_k_range_covers_k_in_whole_blocks(k: int, split: int, bk: int) -> None:
    per, splits = heuristics.split_k_range(k, split, bk)
    assert per % bk == 0 and per > 0 and 1 <= splits <= max(split, 1)
    assert (splits - 1) * per < max(k, 1) <= splits * per  # no empty split, all of K covered


def test_pad_k_rule() -> None:
    # KernelBench 8: odd K and odd row strides, large enough for the copies
    assert heuristics.pad_k(8205, 5921, 2949, (2949, 1), (5921, 1))
    assert not heuristics.pad_k(4096, 4096, 4096, (4096, 1), (4096, 1))  # aligned
    assert not heuristics.pad_k(256, 256, 2949, (2949, 1), (256, 1))  # too small for copies
    assert heuristics.pad_k(8192, 8192, 4096, (4096, 1), (8193, 1))  # B's rows odd
    assert heuristics.pad_k(8192, 8192, 4104, (4104, 1), (8192, 1))  # K % 16 != 0
    assert heuristics.pad_k(8192, 8192, 4096, (1, 8191), (8192, 1))  # A^T's rows odd
    assert not heuristics.pad_k(8192, 8192, 0, (1, 1), (1, 1))


@pytest.mark.parametrize("split", [1, 16, 64])
def test_split_k_and_partials_keep_kernelbench_6_within_fp32_tolerance_model(split: int) -> None:
    # test_codegen_matmul_fp32's numpy model of the kernel's sums, split: each split's range
    # in partials of ACC_CHUNK blocks (over the split's own K, as the launcher picks it), then
    # the splits added in order (the reduce kernel); K = 524288 of torch.rand-like products
    g = np.random.default_rng(0)
    k = 524288
    prods = (g.random(k, dtype=np.float32).astype(np.float64) *
             g.random(k, dtype=np.float32).astype(np.float64))
    exact = prods.sum()
    p32 = prods.astype(np.float32)

    def seq(x: np.ndarray) -> np.float32:
        return np.cumsum(x, dtype=np.float32)[-1]

    per, splits = heuristics.split_k_range(k, split, 32)
    step = (heuristics.acc_chunk(min(k, per), 32, 4) or per // 32) * 32
    parts = [seq(np.array([seq(p32[lo:lo + step]) for lo in range(s * per, (s + 1) * per, step)],
                          dtype=np.float32)) for s in range(splits)]
    assert abs(float(seq(np.array(parts, dtype=np.float32))) - exact) < 1e-6 * exact


# ---- the default config and the variant space ----------------------------------------------------
def _meta(m: int, k: int, n: int) -> tuple[torch.Tensor, ...]:
    return (torch.empty(m, k, device="meta"), torch.empty(k, n, device="meta"),
            torch.empty(n, device="meta"))


def test_default_config_and_space_split_kernelbench_6(lg) -> None:
    op, hw = lg[0], hwmodels.get("h100")
    big = _meta(256, 524288, 256)
    cfg = op.default_config(hw, big)
    space = op.variant_space(hw, big)
    assert space[0] == cfg
    tiles: dict[tuple[Any, ...], set[int]] = {}
    for c in space:
        key = tuple(c.get(k) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages",
                                   "ieee"))
        tiles.setdefault(key, set()).add(c["SPLIT_K"])
    # the default: 128x128x32 tiles, 8 warps, >= one wave of programs (33 splits on 132 SMs)
    # and <= 8192 of K per split (one accumulator): 64
    assert (cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["num_warps"]) == (128, 128, 32, 8)
    assert cfg["SPLIT_K"] == 64 and cfg["tf32x3"] and not cfg["ieee"]
    # the space's other tiles: the rule's split, half it and no split each
    own = tuple(cfg.get(k) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages",
                                     "ieee"))
    assert tiles.pop(own) == {64}
    assert {**cfg, "ieee": True, "tf32x3": False} in space  # its exact fp32 twin
    assert tiles.pop(own[:-1] + (True,)) == {64}
    assert tiles and all(1 in s and len(s) <= 3 for s in tiles.values())
    assert len(space) <= 3 * len(tiles) + 2
    # a square matmul splits nothing: its configs are as they were
    square = _meta(4096, 4096, 4096)
    assert "SPLIT_K" not in op.default_config(hw, square)
    assert not any("SPLIT_K" in c for c in op.variant_space(hw, square))


# ---- kernel refs: what each config launches, cross-compiled for sm_90 ----------------------------
def _refs(op: Any, inputs: tuple[Any, ...], cfg: dict[str, Any]) -> dict[str, Any]:
    return {r.name.removeprefix("_mm_knobs_"): r for r in op.kernel_refs(inputs, cfg)}


def test_kernel_refs_mirror_the_launcher(lg) -> None:
    op = lg[0]
    base = {**TILE, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4,
            "num_stages": 3, "dtype": "fp32"}
    kb6 = _meta(256, 524288, 256)
    refs = _refs(op, kb6, {**base, "SPLIT_K": 16})
    assert set(refs) == {"matmul_kernel", "splitk_reduce_kernel"}
    mm = refs["matmul_kernel"]
    assert mm.constexprs["PARTIAL"] is True and mm.constexprs["SWAP_AB"] is True  # M < 1024
    assert mm.constexprs["ACC_CHUNK"] == 4096 // 32  # each split sums 32768 of K
    assert mm.signature["k_per"] == "i32:16" and mm.signature["ws"] == "*fp32"
    assert (mm.constexprs["stride_bk"], mm.constexprs["stride_bn"]) == (256, 1)  # not copied
    red = refs["splitk_reduce_kernel"]
    assert (red.constexprs["REDUCE_M"], red.constexprs["REDUCE_N"]) == (64, 64)
    assert red.signature["ws"] == "*fp32" and red.signature["splits"] == "i32:16"
    # one split: the matmul kernel alone, running the epilogue
    one = _refs(op, kb6, {**base, "SPLIT_K": 1, "SWAP_AB": False})
    assert set(one) == {"matmul_kernel"} and one["matmul_kernel"].constexprs["PARTIAL"] is False
    assert one["matmul_kernel"].constexprs["SWAP_AB"] is False
    # KernelBench 8: the padded copies' strides, K rounded up, no K mask
    kb8 = _meta(8205, 2949, 5921)
    (pad,) = _refs(op, kb8, base).values()
    assert pad.constexprs["EVEN_K"] is True
    assert (pad.constexprs["stride_am"], pad.constexprs["stride_ak"]) == (2976, 1)
    assert (pad.constexprs["stride_bk"], pad.constexprs["stride_bn"]) == (1, 2976)
    (raw,) = _refs(op, kb8, {**base, "PAD_K": False}).values()
    assert raw.constexprs["EVEN_K"] is False and raw.constexprs["stride_am"] == 2949
    assert raw.constexprs["stride_bk"] == 1  # B's K-major copy (M >= 1024), unpadded
    (swapped,) = _refs(op, kb8, {**base, "PAD_K": False, "SWAP_AB": True}).values()
    assert swapped.constexprs["stride_bk"] == 5921 and swapped.constexprs["SWAP_AB"] is True


@pytest.mark.parametrize("extra,shape", [
    ({"SPLIT_K": 16}, (256, 524288, 256)),
    ({"SPLIT_K": 16, "SWAP_AB": False}, (256, 524288, 256)),
    ({}, (8205, 2949, 5921)),  # PAD_K by the rule
    ({"PAD_K": False, "SWAP_AB": True}, (8205, 2949, 5921)),
])
def test_configs_cross_compile_for_sm90(lg, tmp_path, extra: dict[str, Any],
                                        shape: tuple[int, int, int]) -> None:
    import targets
    from porter.search import launch_config

    op, hw = lg[0], hwmodels.get("h100")
    cfg = {**TILE, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "num_warps": 4,
           "num_stages": 3, "dtype": "fp32", **extra}
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    backend = targets.for_device(hw)
    refs = op.kernel_refs(_meta(*shape), cfg, source_path=str(path))
    assert refs
    for ref in refs:
        rep = backend.compile(ref, launch_config(cfg), hw)
        assert rep.fits, (ref.name, rep.reasons)
        assert rep.resources.spill_bytes == 0, ref.name
