"""The split_coop family (issue 31): a long row's chunks over co-resident programs that
exchange their partials behind a per-row counter in one cooperative launch, so that the row is
read once (`_triton_rowwise_long.py.j2`, `porter/codegen/long_rows.py`).

On the CPU: the family's launcher under the interpreter (the split row's two launches on the
same chunks where a row has several; the coop kernel itself where it has one, whose barrier
opens at once) against float64, with `out` poisoned with NaN; what the search offers; and the
kernel cross-compiled for sm_90 (fits, no spills, the release and the acquire in its PTX).
`tests/porter/test_split_coop_gpu.py` runs it on a GPU.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import re  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import hwmodels  # noqa: E402
from porter.codegen import generate  # noqa: E402
from porter.codegen import load_generated_module  # noqa: E402
from porter.codegen import long_rows  # noqa: E402
from tests.porter.test_codegen import _ref64  # noqa: E402
from tests.porter.test_codegen import assert_close  # noqa: E402
from tests.porter.test_codegen import rand  # noqa: E402
from tests.porter.test_codegen_long_rows import _inputs  # noqa: E402
from tests.porter.test_codegen_long_rows import cross_entropy  # noqa: E402
from tests.porter.test_codegen_long_rows import cross_entropy_rows  # noqa: E402
from tests.porter.test_codegen_long_rows import layernorm  # noqa: E402
from tests.porter.test_codegen_long_rows import log_softmax  # noqa: E402
from tests.porter.test_codegen_long_rows import softmax  # noqa: E402

FP32, BF16 = torch.float32, torch.bfloat16


def _coop(block: int, cols: int, warps: int = 4, per_sm: int = 2) -> dict[str, Any]:
    return {"strategy": "split_coop", "ROWS": 1, "BLOCK_N": block,
            "SPLIT": -(-cols // block), "num_warps": warps, "num_stages": 1,
            "PROGRAMS_PER_SM": per_sm}


def _launch(fn, ex: tuple[Any, ...], name: str, cfg: dict[str, Any],
            split_row_runs: bool) -> tuple[torch.Tensor, ...]:
    """The generated launcher's output into a NaN-poisoned `out`; asserts whether it ran the
    split row's two launches (the interpreter's stand-in) or the coop kernel."""
    op = generate(fn, ex, name=name)
    mod = load_generated_module(op.triton_module_source(), name, interpret=True)
    ran = []
    two_launches = mod._launch_split_row
    mod._launch_split_row = lambda *a: ran.append(1) or two_launches(*a)
    out = tuple(torch.full(s, float("nan"), dtype=d) for s, d in op.output_spec(ex))
    got = mod.launch(*ex, out=out if len(out) > 1 else out[0], config=cfg)
    assert bool(ran) == split_row_runs
    return got if isinstance(got, tuple) else (got,)


@pytest.mark.parametrize("fn", [softmax, log_softmax, layernorm], ids=lambda f: f.__name__)
@pytest.mark.parametrize("cols", [20000, 50257])
def test_split_coop_matches_float64(fn, cols: int) -> None:
    # chunks of one 4096-column block: 5 (the last 3616 columns) and 13 (the last 1105)
    ex = _inputs(fn, 3, cols, FP32)
    got = _launch(fn, ex, f"coop_{fn.__name__}_{cols}", _coop(4096, cols), True)
    assert_close(got, _ref64(fn, ex), FP32)


@pytest.mark.parametrize(("fn", "cols", "block"), [
    (softmax, 16384, 4096),  # EVEN: no lane masked
    (log_softmax, 20001, 8192),
    (layernorm, 16385, 16384),  # a one-column last chunk
])
def test_split_coop_bf16_odd_sizes(fn, cols: int, block: int) -> None:
    ex = _inputs(fn, 2, cols, BF16)
    got = _launch(fn, ex, f"coop_bf16_{fn.__name__}_{cols}", _coop(block, cols, 8), True)
    assert_close(got, _ref64(fn, ex), BF16)


@pytest.mark.parametrize("fn", [softmax, log_softmax, layernorm], ids=lambda f: f.__name__)
def test_coop_kernel_itself_with_one_chunk_per_row(fn) -> None:
    # one chunk a row (SPLIT 1): the interpreter runs the coop kernel, its barrier opening at
    # once; 7 rows over the interpreter's 4 programs walk the row loop; 1537 is odd, and the
    # chunk takes 13 loop steps of 128
    ex = _inputs(fn, 7, 1537, FP32)
    cfg = {**_coop(128, 1537), "SPLIT": 1}
    got = _launch(fn, ex, f"coop_one_{fn.__name__}", cfg, False)
    assert_close(got, _ref64(fn, ex), FP32)


def test_split_coop_softmax_of_rows_with_minus_inf() -> None:
    # a chunk of -inf only, and a row of -inf only (NaN, as torch)
    x = rand(3, 20000)
    x[0, :4096] = float("-inf")
    x[2] = float("-inf")
    got = _launch(softmax, (x,), "coop_sm_inf", _coop(4096, 20000), True)
    assert_close(got, _ref64(softmax, (x,)), FP32)


# -- what the search offers -----------------------------------------------------------------
def _meta(*shape: int, dtype: torch.dtype = FP32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _coop_configs(op, hw: str, inputs, dtype: torch.dtype = FP32) -> list[dict[str, Any]]:
    return [c for c in op.variant_space(hwmodels.get(hw), inputs, dtype)
            if c["strategy"] == "split_coop"]


def test_offered_on_h100_for_vocabulary_softmax() -> None:
    op = generate(softmax, (rand(4, 300),), name="coop_offer")
    coop = _coop_configs(op, "h100", (_meta(4096, 50257),))
    assert coop
    assert all(c["SPLIT"] == -(-50257 // c["BLOCK_N"]) for c in coop)
    assert {c["BLOCK_N"] for c in coop} == set(long_rows.COOP_BLOCKS)
    assert {c["num_warps"] for c in coop} == {4, 8}
    assert {c["PROGRAMS_PER_SM"] for c in coop} == set(long_rows.COOP_PER_SM)
    assert all(c["LANES"] for c in coop)  # the online softmax's partials take LANES
    # the probe's best configs (bench/NOTES.md item 51) are among them
    assert any((c["BLOCK_N"], c["num_warps"], c["PROGRAMS_PER_SM"]) == (4096, 4, 4)
               for c in coop)
    wide = _coop_configs(op, "h100", (_meta(4096, 151936, dtype=BF16),), BF16)
    assert any((c["BLOCK_N"], c["num_warps"], c["PROGRAMS_PER_SM"]) == (16384, 8, 2)
               for c in wide)
    # log-softmax and layernorm too
    ls = generate(log_softmax, (rand(4, 300),), name="coop_offer_ls")
    assert _coop_configs(ls, "h100", (_meta(4096, 50257),))
    ln = generate(layernorm, _inputs(layernorm, 4, 300, FP32), name="coop_offer_ln")
    assert _coop_configs(ln, "h100", (_meta(64, 65536), _meta(65536), _meta(65536)))


def test_not_offered_where_it_does_not_fit() -> None:
    op = generate(softmax, (rand(4, 300),), name="coop_not")
    h100, big = hwmodels.get("h100"), _meta(4096, 50257)
    # HIP (unverified) and Metal
    assert not _coop_configs(op, "mi300x", (big,))
    assert "triton-hip" in long_rows.not_offered(op, hwmodels.get("mi300x"), 4096, 50257,
                                                 4)["split_coop"]
    assert not _coop_configs(op, "m4", (big,))
    # under 16384 columns
    assert not _coop_configs(op, "h100", (_meta(4096, 16383),))
    assert "16384" in long_rows.not_offered(op, h100, 4096, 16383, 4)["split_coop"]
    # a row's chunks that cannot all be resident at once: 4M columns in 4096-column blocks are
    # 1024 chunks, more than 132 SMs x 4 (8192: 512, at 4 per SM only)
    wide = _coop_configs(op, "h100", (_meta(16, 4194304),))
    assert wide and all(c["SPLIT"] <= 132 * c["PROGRAMS_PER_SM"] for c in wide)
    assert {c["BLOCK_N"] for c in wide} == {8192, 16384}
    assert {c["PROGRAMS_PER_SM"] for c in wide if c["BLOCK_N"] == 8192} == {4}


def test_not_offered_for_reduction_only_ops() -> None:
    # cross-entropy folds into a scalar (split_row's graph check fails); per-row losses write
    # no full row (the looped kernel reads each row once already)
    ce = generate(cross_entropy, (rand(4, 300), torch.randint(0, 300, (4,))), name="coop_ce")
    assert not _coop_configs(ce, "h100", (_meta(4096, 50257), _meta(4096, dtype=torch.int64)))
    assert "_split_coop_kernel" not in ce.triton_module_source()
    rows = generate(cross_entropy_rows, (rand(4, 300), torch.randint(0, 300, (4,))),
                    name="coop_ce_rows")
    assert rows._mm["split_row"] and not rows._mm["split_coop"]
    why = long_rows.not_offered(rows, hwmodels.get("h100"), 4096, 50257, 4)["split_coop"]
    assert "full-row output" in why
    assert "_split_coop_kernel" not in rows.triton_module_source()


# -- cross-compiled for sm_90 ---------------------------------------------------------------
@pytest.mark.parametrize(("fn", "cols", "dtype", "block", "warps"), [
    (softmax, 50257, FP32, 4096, 4),  # the probe's best configs (bench/NOTES.md item 51)
    (softmax, 151936, BF16, 16384, 8),
    (log_softmax, 50257, FP32, 8192, 8),
    (layernorm, 65536, BF16, 8192, 8),
], ids=["softmax_50257", "softmax_151936", "log_softmax_50257", "layernorm_65536"])
def test_coop_kernel_cross_compiles_for_sm90(fn, cols: int, dtype: torch.dtype, block: int,
                                             warps: int, tmp_path: Path) -> None:
    targets = pytest.importorskip("targets")
    from targets.base import LaunchConfig

    hw = hwmodels.get("h100")
    op = generate(fn, _inputs(fn, 2, 64, FP32), name=f"coop_xc_{fn.__name__}")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    big = tuple(torch.empty((4096, cols) if i == 0 else (cols,), dtype=dtype)
                for i in range(len(_inputs(fn, 2, 64, FP32))))
    (cfg,) = [c for c in op.variant_space(hw, big, dtype) if c["strategy"] == "split_coop"
              and (c["BLOCK_N"], c["num_warps"], c["PROGRAMS_PER_SM"]) == (block, warps, 2)]
    (ref,) = op.kernel_refs(big, cfg, source_path=str(path))
    assert ref.name.endswith("_split_coop_kernel")
    assert ref.constexprs["SPLIT"] == 1 << (-(-cols // block) - 1).bit_length()
    assert ref.signature["cnt_ptr"] == "*i32" and ref.signature["ws_ptr"] == "*fp32"
    # chunk_cols (a multiple of BLOCK_N) typed as the JIT specializes it, so that the chunk's
    # loads are 16-byte vectors where the width allows, as at run time
    assert ref.signature["chunk_cols"] == "i32:16"
    rep = targets.for_device(hw).compile(ref, LaunchConfig(warps, 1), hw)
    assert rep.fits, rep.reasons
    assert rep.resources.spill_bytes == 0, rep.resources
    ptx = rep.artifacts["ptx"]
    # the counter's release add and acquire poll at gpu scope (triton 3.9 emits them as
    # red...release.add and ld...acquire; an atom of either order is the same barrier)
    assert re.search(r"\b(?:atom|red)\.global\.gpu\.release\.add", ptx), "no release add"
    assert re.search(r"\b(?:atom|ld)\.global\.gpu\.acquire\.", ptx), "no acquire"
    # the partials' loads past L1, after the barrier
    assert re.search(r"ld\.global\.cg\.", ptx), "workspace loads go through L1"
    if cols % 16 == 0:  # ALIGN 16: the row's loads and stores 16 bytes at a time
        assert re.search(r"ld\.global\.v4\.", ptx) and re.search(r"st\.global\.v4\.", ptx)


def test_compile_tier_rejects_configs_the_driver_would_refuse() -> None:
    cfg = _coop(16384, 151936, warps=8, per_sm=2)
    # a kernel that fits one program per SM (254 registers x 256 threads) cannot be resident
    # twice per SM: the cooperative launch would be refused
    assert "PROGRAMS_PER_SM" in long_rows.coop_misfit(cfg, 1)
    assert long_rows.coop_misfit(cfg, 2) is None
    assert long_rows.coop_misfit({**cfg, "PROGRAMS_PER_SM": 1}, 1) is None
    # other families' grids need no co-residency
    assert long_rows.coop_misfit({**cfg, "strategy": "split_row"}, 1) is None


def test_coop_groups_keep_every_program_resident() -> None:
    from porter.codegen.heuristics import coop_groups

    # 13 chunks a row, 132 SMs x 4: 40 rows in flight (520 programs of 528)
    assert coop_groups(4096, 13, 132 * 4) == 40
    assert coop_groups(7, 13, 132 * 4) == 7  # fewer rows than groups: one group a row
    assert coop_groups(4096, 133, 132) == 0  # a row's chunks cannot all be resident


@pytest.mark.parametrize("split", [1, 4])
def test_split_coop_layernorm_over_three_trailing_dims(split: int) -> None:
    # rows of 3 x 5 x 7 = 105 elements split back into their dims: SPLIT 1 runs the coop
    # kernel itself, SPLIT 4 the split row's launches on the same chunks of 32 columns
    from tests.porter.test_codegen_long_rows import layernorm3

    x = rand(3, 3, 5, 7)
    w, b = rand(3, 5, 7, seed=1), rand(3, 5, 7, seed=2)
    cfg = {**_coop(16, 105, warps=1), "SPLIT": split}
    got = _launch(layernorm3, (x, w, b), f"coop_ln3_{split}", cfg, split > 1)
    assert_close(got, _ref64(layernorm3, (x, w, b)), FP32)
