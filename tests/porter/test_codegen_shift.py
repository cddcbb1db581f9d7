"""The looped kernel's SHIFT (issue 31): where rows do not start on a 16-byte boundary (odd
widths such as 50,257 in bf16), its blocks start at each row's start rounded down to a 16-byte
boundary, so that all but a row's first and last block load and store 16 bytes at a time. The
rule, the interpreter's numerics at odd widths for every looped body, and the sm_90 PTX."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from porter.codegen import generate  # noqa: E402
from porter.codegen.heuristics import row_shift  # noqa: E402
from tests.porter.test_codegen import add_rmsnorm  # noqa: E402
from tests.porter.test_codegen import check  # noqa: E402
from tests.porter.test_codegen import cross_entropy  # noqa: E402
from tests.porter.test_codegen import layernorm  # noqa: E402
from tests.porter.test_codegen import log_softmax  # noqa: E402
from tests.porter.test_codegen import rand  # noqa: E402
from tests.porter.test_codegen import rmsnorm  # noqa: E402
from tests.porter.test_codegen import softmax  # noqa: E402
from tests.porter.test_codegen_align import accesses_by_knob  # noqa: E402

BF16 = torch.bfloat16


def _looped(block: int = 256, **knobs: object) -> dict[str, object]:
    return {"strategy": "looped", "ROWS": 1, "BLOCK_N": block, "num_warps": 2,
            "num_stages": 1, **knobs}


def _inputs(fn, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = x.shape[-1]
    if fn is cross_entropy:
        return x, torch.randint(0, n, (x.shape[0],), generator=torch.Generator().manual_seed(n))
    if fn is add_rmsnorm:
        return x, rand(*x.shape, dtype=x.dtype, seed=3), rand(n, dtype=x.dtype, seed=1)
    extra = {rmsnorm: 1, layernorm: 2}.get(fn, 0)
    return (x, *(rand(n, dtype=x.dtype, seed=s) for s in range(1, 1 + extra)))


def test_shift_is_one_16_byte_load_where_rows_are_unaligned() -> None:
    bf, f32 = rand(4, 50257, dtype=BF16), rand(4, 1537)
    assert row_shift(1, 1, [bf, torch.empty_like(bf)]) == 8
    assert row_shift(1, 1, [f32, torch.empty_like(f32)]) == 4
    assert row_shift(1, 1, [bf, torch.empty_like(bf, dtype=torch.float32)]) == 8  # narrowest
    assert row_shift(1, 16, [rand(4, 4096, dtype=BF16)]) == 1  # aligned rows need none
    assert row_shift(1, 4, [f32]) == 1  # fp32 rows 4-aligned are 16-byte aligned
    assert row_shift(2, 1, [bf]) == 1  # one row per program only
    assert row_shift(1, 1, []) == 1  # no tensor takes the shifted address
    view = rand(4, 50259, dtype=BF16)[:, :50257]  # rows 50259 apart, the output 50257
    assert row_shift(1, 1, [view, torch.empty_like(bf)]) == 1  # unequal skews
    wider = rand(4, 50265, dtype=BF16)[:, :50257]  # 50265 = 50257 + 8: the same skews
    assert row_shift(1, 1, [wider, torch.empty_like(bf)]) == 8
    transposed = rand(50257, 4, dtype=BF16).t()
    assert row_shift(1, 1, [transposed]) == 1  # no unit column stride
    offset = rand(4 * 50257 + 1, dtype=BF16)[1:].view(4, 50257)  # data 2 bytes off 16
    assert row_shift(1, 1, [offset]) == 1


@pytest.mark.parametrize("dtype", [BF16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("fn", [softmax, log_softmax, cross_entropy, rmsnorm, add_rmsnorm,
                                layernorm],
                         ids=["softmax", "log_softmax", "cross_entropy", "rmsnorm",
                              "add_rmsnorm", "layernorm"])
def test_shifted_looped_body_matches_float64(fn, dtype: torch.dtype) -> None:
    # 1537 wide: rows start 0-7 (bf16) or 0-3 (fp32) elements past a 16-byte boundary, so
    # each row has a masked first block, inner blocks and a masked last one
    ins = _inputs(fn, rand(9, 1537, dtype=dtype))
    name = f"{fn.__name__}_shift_{str(dtype)[6:]}"
    op = check(fn, ins, name, dtype, config=_looped())
    (ref,) = [r for r in op.kernel_refs(ins, _looped()) if r.name.endswith("_looped_kernel")]
    assert ref.constexprs["SHIFT"] == (8 if dtype == BF16 else 4)
    # the weights (one row for all) keep the usual address; x's row and the outputs the shifted
    kernel = op.triton_module_source().split(f"def _{name}_looped_kernel(")[1].split("\n\n\n")[0]
    assert "in0_ptr + (row_s * in0_s0) // SHIFT * SHIFT + cols_al * in0_cs1" in kernel


@pytest.mark.parametrize("width", [3, 9, 255, 257, 1023])
def test_shifted_rows_shorter_than_a_block_or_the_skew(width: int) -> None:
    # rows of 3 elements start up to 7 past a boundary: one block, first and last at once
    for fn in (softmax, layernorm, cross_entropy):
        ins = _inputs(fn, rand(11, width, dtype=BF16))
        check(fn, ins, f"{fn.__name__}_shift_w{width}", BF16, config=_looped())


def test_layernorm_var1_shifted() -> None:
    ins = _inputs(layernorm, rand(7, 1537, dtype=BF16) + 40.0)  # a mean far from 0
    check(layernorm, ins, "ln_shift_var1", BF16, config=_looped(VAR1=True))


def test_a_view_with_unequal_skews_runs_unshifted() -> None:
    x = rand(6, 1539, dtype=BF16)[:, :1537]  # x's rows 1539 apart, the output's 1537
    op = check(softmax, (x,), "sm_shift_view", BF16, config=_looped())
    (ref,) = op.kernel_refs((x,), _looped())
    assert ref.constexprs["SHIFT"] == 1


def test_no_shift_where_rows_have_several_coordinates() -> None:
    # a [B, T, V] softmax over V: the row index splits into two coordinates
    x = rand(2, 3, 1537, dtype=BF16)
    op = generate(softmax, (x,), name="sm_shift_3d")
    assert "SHIFT" not in op.triton_module_source()
    check(softmax, (x,), "sm_shift_3d_run", BF16, config=_looped())


def test_shifted_looped_softmax_loads_and_stores_vectors(tmp_path: Path) -> None:
    # Compiles in a clean child process (targets/isolated.py), as test_codegen_align's does.
    ex = (rand(8, 50257, dtype=BF16),)
    op = generate(softmax, ex, name="sm_shift_ptx")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    (ref,) = op.kernel_refs(ex, _looped(4096, num_warps=8), source_path=str(path))
    assert ref.constexprs["SHIFT"] == 8
    accesses = accesses_by_knob(ref, "SHIFT", (8, 1), 8)
    vector = re.compile(r"\.v4\b")
    assert any(vector.search(a) for a in accesses[8] if a.startswith("ld")), accesses[8]
    assert any(vector.search(a) for a in accesses[8] if a.startswith("st")), accesses[8]
    assert not any(vector.search(a) for a in accesses[1]), accesses[1]
