"""The row kernels' ALIGN (issue 31): n_cols and the runtime row strides restated as multiples
of the largest power of two (<= 16) dividing them, so that rows of widths such as 3000 load
16-byte vectors. The rule, the interpreter's numerics at aligned, odd and strided widths, and
the sm_90 PTX with and without it."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import dataclasses  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import hwmodels  # noqa: E402
from porter.codegen import generate  # noqa: E402
from porter.codegen.heuristics import rowwise_align  # noqa: E402
from tests.porter.test_codegen import check  # noqa: E402
from tests.porter.test_codegen import cross_entropy  # noqa: E402
from tests.porter.test_codegen import layernorm  # noqa: E402
from tests.porter.test_codegen import rand  # noqa: E402
from tests.porter.test_codegen import rmsnorm  # noqa: E402
from tests.porter.test_codegen import softmax  # noqa: E402
from tests.porter.test_codegen_columns import rmsnorm_channels  # noqa: E402

BF16 = torch.bfloat16


def _rms_inputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x, rand(x.shape[-1], dtype=x.dtype, seed=1)


def test_align_is_the_largest_power_of_two_dividing_width_and_strides() -> None:
    assert rowwise_align(3000, [3000, 3000]) == 8  # 3000 = 8 x 375
    assert rowwise_align(4096, [4096, 4096]) == 16  # capped: what the JIT marks anyway
    assert rowwise_align(1537, [1537, 1537]) == 1  # odd: nothing changes
    assert rowwise_align(3000, [3001, 3000]) == 1  # a view whose rows start at odd offsets
    assert rowwise_align(3000, [3008, 3000]) == 8  # a column slice of 3008-wide rows
    assert rowwise_align(3000, [0, 3000]) == 8  # a broadcast row (stride 0) divides by all
    assert rowwise_align(1020, []) == 4
    assert rowwise_align(3000, [3000], cap=4) == 4


def test_align_is_in_elements_whatever_the_dtype() -> None:
    # the same ALIGN for fp32 and bf16 at width 3000: a multiple of 8 elements is 16-byte
    # aligned for bf16 (one vector of 8) and 32-byte for fp32 (two vectors of 4)
    ops = {dt: generate(rmsnorm, _rms_inputs(rand(4, 3000, dtype=dt)), name=f"rms_al_{dt}".
                        replace("torch.", "")) for dt in (torch.float32, BF16)}
    for dt, op in ops.items():
        ex = op.example_inputs
        (ref,) = op.kernel_refs(ex)
        assert ref.constexprs["ALIGN"] == 8, dt
        # the compile check builds the variant the launcher runs: the same rule, in source
        assert "rowwise_align(n_cols, [inputs[0].stride(0), outs[0].stride(0)])" in \
            op.triton_module_source()


def test_align_follows_a_strided_view() -> None:
    op = generate(rmsnorm, _rms_inputs(rand(4, 3000, dtype=BF16)), name="rms_al_view")
    wide = rand(4, 3001, dtype=BF16)[:, :3000]  # rows 3001 apart: no alignment to claim
    (ref,) = op.kernel_refs(_rms_inputs(wide))
    assert ref.constexprs["ALIGN"] == 1
    padded = rand(4, 3008, dtype=BF16)[:, :3000]
    (ref,) = op.kernel_refs(_rms_inputs(padded))
    assert ref.constexprs["ALIGN"] == 8


def test_every_row_kernel_restates_its_strides() -> None:
    op = generate(rmsnorm, _rms_inputs(rand(4, 3000, dtype=BF16)), name="rms_al_src")
    src = op.triton_module_source()
    row_kernels = [k for k in op.kernels if "ALIGN" in k.constexprs]
    assert {k.name.removeprefix("_rms_al_src_") for k in row_kernels} == {
        "single_pass_kernel", "looped_kernel", "persistent_kernel", "two_block_kernel",
        "looped_l2_kernel", "split_partials_kernel", "split_apply_kernel", "split_coop_kernel"}
    for k in row_kernels:
        body = src.split(f"def {k.name}(")[1].split("\n\n\n")[0]
        for p in ("n_cols", "in0_s0", "out0_s0"):
            assert f"{p} = {p} // ALIGN * ALIGN" in body, (k.name, p)


@pytest.mark.parametrize("width", [3000, 1537, 1023])
@pytest.mark.parametrize("fn", [rmsnorm, layernorm, softmax], ids=["rmsnorm", "layernorm",
                                                                    "softmax"])
def test_row_ops_match_float64_at_odd_and_aligned_widths(fn, width: int) -> None:
    x = rand(5, width, dtype=BF16)
    extra = {rmsnorm: 1, layernorm: 2, softmax: 0}[fn]
    ins = (x, *(rand(width, dtype=BF16, seed=s) for s in range(1, 1 + extra)))
    check(fn, ins, f"{fn.__name__}_al{width}", BF16)


@pytest.mark.parametrize("fn", [rmsnorm, layernorm, softmax], ids=["rmsnorm", "layernorm",
                                                                    "softmax"])
@pytest.mark.parametrize("strategy", ["single_pass", "looped", "split_row"])
def test_row_ops_match_float64_on_a_column_slice(fn, strategy: str) -> None:
    # rows 3008 apart, 3000 wide: ALIGN 8, rows not contiguous; the output is contiguous
    x = rand(6, 3008, dtype=BF16)[:, :3000]
    extra = {rmsnorm: 1, layernorm: 2, softmax: 0}[fn]
    ins = (x, *(rand(3000, dtype=BF16, seed=s) for s in range(1, 1 + extra)))
    op = generate(fn, ins, name=f"{fn.__name__}_al_slice")
    (ref,) = [r for r in op.kernel_refs(ins, {**op.default_config(None, ins)})]
    assert ref.constexprs["ALIGN"] == 8
    config = {"single_pass": None,
              "looped": {"strategy": "looped", "ROWS": 1, "BLOCK_N": 1024, "num_warps": 4},
              "split_row": {"strategy": "split_row", "ROWS": 1, "BLOCK_N": 512, "SPLIT": 4,
                            "num_warps": 4}}[strategy]
    if strategy == "split_row" and not op._mm["split_row"]:
        pytest.skip(f"{fn.__name__} has no split row kernels")
    check(fn, ins, f"{fn.__name__}_al_slice_{strategy}", BF16, config=config)


def _global_accesses(ptx: str) -> set[str]:
    return set(re.findall(r"(?:ld|st)\.global(?:\.\w+)*", ptx))


def accesses_by_knob(ref, knob: str, values: tuple[int, ...], warps: int) -> dict[int, set[str]]:
    """The sm_90 PTX's global load/store forms of `ref` compiled with each value of constexpr
    `knob`; each compile fits, without spills."""
    import targets
    from targets.base import LaunchConfig

    hw = hwmodels.get("h100")
    backend = targets.for_device(hw)
    out = {}
    for value in values:
        rep = backend.compile(dataclasses.replace(ref, constexprs={**ref.constexprs,
                                                                   knob: value}),
                              LaunchConfig(warps, 1), hw)
        assert rep.fits, rep.reasons
        assert rep.resources.spill_bytes == 0
        out[value] = _global_accesses(rep.artifacts["ptx"])
    return out


def test_width_3000_bf16_single_pass_loads_vectors_with_align_only(tmp_path: Path) -> None:
    # Runs in the interpreted test process on purpose: targets compiles in a clean child process
    # then (targets/isolated.py), as test_codegen_variants' vector-load test does.
    ex = _rms_inputs(rand(16, 3000, dtype=BF16))
    op = generate(rmsnorm, ex, name="rms_al_ptx")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    hw = hwmodels.get("h100")
    cfg = op.default_config(hw, ex)
    assert (cfg["strategy"], cfg["BLOCK_N"], cfg["num_warps"]) == ("single_pass", 4096, 8)
    (ref,) = op.kernel_refs(ex, cfg, source_path=str(path))
    assert ref.constexprs["ALIGN"] == 8
    assert ref.signature["n_cols"] == "i32" and ref.signature["in0_s0"] == "i64"  # not :16
    accesses = accesses_by_knob(ref, "ALIGN", (8, 1), cfg["num_warps"])
    vector = re.compile(r"\.v[24]\b")
    # ALIGN 8: x and w load, and y stores, 8 bf16 (16 bytes) at a time
    assert any(vector.search(a) for a in accesses[8] if a.startswith("ld")), accesses[8]
    assert any(vector.search(a) for a in accesses[8] if a.startswith("st")), accesses[8]
    # ALIGN 1 (what ran before): one 2-byte element per access
    assert not any(vector.search(a) for a in accesses[1]), accesses[1]


def test_softmax_pairs_view_follows_align() -> None:
    # the per-thread (max, sum) view takes VEC = 8 where ALIGN says the bf16 loads are 16-byte
    # vectors (width 3000), VEC = 1 where they are not (1537, or rows 3001 apart)
    for width, row, vec in ((3000, 3000, 8), (1537, 1537, 1), (3000, 3001, 1), (4096, 4096, 8)):
        x = rand(4, row, dtype=BF16)[:, :width]
        op = generate(softmax, (x,), name=f"sm_al_pairs_{width}_{row}")
        cfg = op.default_config(None, (x,))
        (ref,) = op.kernel_refs((x,), cfg)
        assert cfg["strategy"] == "single_pass"
        threads = cfg["num_warps"] * 32
        assert (ref.constexprs["VEC"], ref.constexprs["LANES"] // ref.constexprs["VEC"]) == \
            (vec, threads), (width, row)


def test_cross_entropy_align_ignores_the_target_and_the_gather_stride() -> None:
    # the target (one index per row) and x's runtime last-dim stride (x[row, target[row]])
    # feed scalar loads only: with them ALIGN was 1 and the rows lost their 16-byte loads
    # (10000x4096 bf16 ran 8.6x slower on the H100); the rows' own stride still counts
    for width, row, align in ((4096, 4096, 16), (3000, 3000, 8), (1537, 1537, 1),
                              (3000, 3001, 1)):
        x = rand(4, row, dtype=BF16)[:, :width]
        t = torch.randint(0, width, (4,))
        op = generate(cross_entropy, (x, t), name=f"ce_al_{width}_{row}")
        cfg = {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 4096, "num_warps": 8,
               "num_stages": 1}
        ref = op.kernel_refs((x, t), cfg)[0]
        assert ref.constexprs["ALIGN"] == align, (width, row)
        assert ref.constexprs["VEC"] == (8 if align >= 8 else 1)
        src = op.triton_module_source()
        assert "in1_s0 = in1_s0 // ALIGN" not in src and "in0_s1 = in0_s1 // ALIGN" not in src


@pytest.mark.parametrize("width", [1537, 3000, 4096])
def test_cross_entropy_matches_float64_at_aligned_and_odd_widths(width: int) -> None:
    # ALIGN 1, 8 and 16 for bf16 rows: the gather of x[row, target[row]] still right
    x = rand(5, width, dtype=BF16)
    t = torch.randint(0, width, (5,), generator=torch.Generator().manual_seed(width))
    check(cross_entropy, (x, t), f"ce_al_run_{width}", BF16)


def test_column_kernel_aligns_on_the_last_dim_and_outer_strides() -> None:
    # the column kernel takes its positions' stride as a constexpr (1), so its ALIGN divides
    # n_inner and the outer dims' strides only; the row kernels' also take the last dim's
    # runtime stride (1 here), so theirs is 1
    x = rand(2, 8, 1000, dtype=BF16)
    op = generate(rmsnorm_channels, (x,), name="rms_al_cols")
    (col,) = [k for k in op.kernels if k.name.endswith("_columns_kernel")]
    assert col.align == ("n_inner", "in0_s0", "out0_s0")
    (ref,) = op.kernel_refs((x,), {"strategy": "columns", "BLOCK_I": 256, "BLOCK_R": 8,
                                   "num_warps": 4})
    assert ref.constexprs["ALIGN"] == 8  # 1000 = 8 x 125
    (row,) = op.kernel_refs((x,), {"strategy": "looped", "ROWS": 1, "BLOCK_N": 8,
                                   "num_warps": 1})
    assert row.constexprs["ALIGN"] == 1


@pytest.mark.parametrize("inner", [1000, 1001])
def test_column_kernel_matches_float64_at_aligned_and_odd_widths(inner: int) -> None:
    x = rand(2, 8, inner, dtype=BF16)
    check(rmsnorm_channels, (x,), f"rms_al_cols{inner}", BF16,
          config={"strategy": "columns", "BLOCK_I": 256, "BLOCK_R": 8, "num_warps": 4})


def test_width_3000_bf16_column_kernel_loads_vectors_with_align_only(tmp_path: Path) -> None:
    targets = pytest.importorskip("targets")
    from targets.base import LaunchConfig

    ex = (rand(2, 160, 3000, dtype=BF16),)  # > 128 channels: the column kernel
    op = generate(rmsnorm_channels, ex, name="rms_al_cols_ptx")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    hw = hwmodels.get("h100")
    cfg = op.default_config(hw, ex)
    assert cfg["strategy"] == "columns"
    (ref,) = op.kernel_refs(ex, cfg, source_path=str(path))
    assert ref.constexprs["ALIGN"] == 8 and ref.signature["n_inner"] == "i32"
    vector = re.compile(r"\.v[24]\b")
    for align in (8, 1):
        rep = targets.for_device(hw).compile(
            dataclasses.replace(ref, constexprs={**ref.constexprs, "ALIGN": align}),
            LaunchConfig(cfg["num_warps"], 1), hw)
        assert rep.fits, rep.reasons
        loads = {a for a in _global_accesses(rep.artifacts["ptx"]) if a.startswith("ld")}
        assert any(vector.search(a) for a in loads) is (align == 8), (align, loads)


def test_width_3000_bf16_single_pass_loads_dwordx4_on_gfx942_with_align_only(
        tmp_path: Path) -> None:
    # the same rule helps AMD's backend: 16-byte buffer loads with ALIGN 8, 2-byte with 1
    targets = pytest.importorskip("targets")
    from targets.base import LaunchConfig

    ex = _rms_inputs(rand(16, 3000, dtype=BF16))
    op = generate(rmsnorm, ex, name="rms_al_gcn")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    hw = hwmodels.get("mi300x")
    cfg = op.default_config(hw, ex)
    (ref,) = op.kernel_refs(ex, cfg, source_path=str(path))
    assert ref.constexprs["ALIGN"] == 8
    knobs = {k: cfg[k] for k in ("waves_per_eu",) if k in cfg}
    for align in (8, 1):
        rep = targets.for_device(hw).compile(
            dataclasses.replace(ref, constexprs={**ref.constexprs, "ALIGN": align}),
            LaunchConfig(cfg["num_warps"], 1, knobs), hw)
        assert rep.fits, rep.reasons
        loads = set(re.findall(r"(?:global|buffer)_load_\w+", rep.artifacts["amdgcn"]))
        assert any(ld.endswith("dwordx4") for ld in loads) is (align == 8), (align, loads)
