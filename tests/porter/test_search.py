"""The search's candidate order: the device default first, every other strategy's nearest
config next, then one-knob changes, so a capped list explores rather than repeats."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import hwmodels
from porter.codegen import heuristics
from porter.planner import plan
from porter.port import generate_op as _generate
from porter.search import search
from porter.specs import load_spec
from targets.registry import for_device

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _candidates(op: str, shape: tuple[int, ...], device: str, cap: int,
                dtype: torch.dtype = torch.bfloat16) -> list[dict]:
    spec = load_spec(EXAMPLES / op / "spec.py")
    gen = torch.Generator().manual_seed(0)
    example = spec.make_inputs(spec.interpret_shapes[0], dtype, torch.device("cpu"), gen)
    gen_op = _generate(spec.reference, tuple(example), op)
    meta = spec.make_inputs(shape, dtype, torch.device("meta"), gen)
    hw = hwmodels.get(device)
    shape_plan = plan(spec.problem(), hw, [shape], [dtype], family=gen_op.family).shapes[0]
    found = search(gen_op, for_device(hw), hw, tuple(meta), dtype, plan=shape_plan,
                   max_variants=cap)
    return [c.config for c in found.candidates]


def test_capped_matmul_search_tries_both_strategies() -> None:
    cands = _candidates("matmul_bias_gelu", (4096, 4096, 4096), "h100", 4)
    assert cands[0]["strategy"] == "tma_persistent"
    assert cands[1]["strategy"] == "tiled"  # the nearest tiled config, right after the default
    assert (cands[1]["BLOCK_M"], cands[1]["BLOCK_N"], cands[1]["BLOCK_K"]) == (128, 256, 64)
    # no TMA on the A100: every candidate is tiled, and the default fits its shared memory
    a100 = _candidates("matmul_bias_gelu", (4096, 4096, 4096), "a100", 4)
    assert {c["strategy"] for c in a100} == {"tiled"}
    smem = hwmodels.get("a100").limits.shared_memory_per_block_bytes.value
    assert a100[0]["num_stages"] * (128 + 256) * 64 * 2 <= smem


def test_capped_fp32_matmul_search_tries_tf32x3_then_exact_fp32() -> None:
    # tf32x3 first (the tensor cores), then the same tile in exact fp32, before any other
    # tile: a capped list keeps an exact candidate should tf32x3 miss the fp32 tolerance
    cands = _candidates("matmul_bias_gelu", (256, 256, 524288), "h100", 3, torch.float32)
    assert cands[0].get("tf32x3") is True and cands[0]["ieee"] is False
    assert not cands[1].get("tf32x3") and cands[1].get("ieee", True) is True
    tile = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")
    assert [cands[1][k] for k in tile] == [cands[0][k] for k in tile]
    # no tf32x3 in Triton's HIP backend: exact fp32 only
    mi = _candidates("matmul_bias_gelu", (256, 256, 524288), "mi300x", 3, torch.float32)
    assert not any(c.get("tf32x3") or c.get("ieee") is False for c in mi)


def test_rowwise_search_changes_one_knob_at_a_time() -> None:
    cands = _candidates("softmax", (8192, 5120), "h100", 6)
    default = cands[0]
    assert (default["strategy"], default["ROWS"], default["num_warps"]) == ("single_pass", 1, 8)
    # each other strategy's nearest config comes right after the default (two_block: 5120 is
    # not a power of two)
    firsts = {c["strategy"] for c in cands[1:4]}
    assert firsts == {"looped", "persistent", "two_block"}
    for c in cands[4:]:
        changed = [k for k in c if k != "dtype" and c[k] != default[k]]
        assert len(changed) == 1, (c, changed)


def test_two_block_first_try_keeps_about_the_defaults_elements_per_thread() -> None:
    # Width 5120: the default is one 8192 block at 8 warps (32 elements per thread); the
    # two-block form holds 4096 + 1024 lanes, so its first try is the 4-warp one (40 per
    # thread), the form that won on the H200 and H100 (bench/NOTES.md item 27), not 8 warps.
    cands = _candidates("layernorm", (8192, 5120), "h200", 8)
    assert (cands[0]["strategy"], cands[0]["BLOCK_N"], cands[0]["num_warps"]) == (
        "single_pass", 8192, 8)
    (first,) = [c for c in cands if c["strategy"] == "two_block"][:1]
    assert (first["BLOCK_N"], first["BLOCK_TAIL"], first["num_warps"]) == (4096, 1024, 4)


@pytest.mark.parametrize(("dtype", "elem"), [(torch.float32, 4), (torch.bfloat16, 2)])
def test_a_long_rows_first_split_coop_try_is_coop_tiles(dtype: torch.dtype, elem: int) -> None:
    # whatever the looped default's block: KernelBench 23's port took the split_coop config
    # nearest the looped 4096 x 4 warps and ran 72% of copy, coop_tile's 90% (NOTES item 59)
    cands = _candidates("softmax", (4096, 393216), "h100", 4, dtype)
    coop = [c for c in cands if c["strategy"] == "split_coop"]
    assert len(coop) == 1
    assert (coop[0]["BLOCK_N"], coop[0]["num_warps"], coop[0]["PROGRAMS_PER_SM"]) == \
        heuristics.coop_tile(elem)
