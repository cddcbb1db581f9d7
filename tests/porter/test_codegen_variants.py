"""Codegen beyond numerics: variant spaces pruned per device, cross-compiled kernels (vector
loads, no spills), Metal emission, fusion accounting and the no-torch-math contract."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import hwmodels
from porter.codegen import generate
from porter.codegen.checks import torch_math_calls


def rmsnorm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def softmax(x):
    return torch.softmax(x, dim=-1)


def cross_entropy(x, t):
    return F.cross_entropy(x, t)


def linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


def swiglu(a, b):
    return F.silu(a) * b


@pytest.fixture(scope="module")
def rms_op():
    return generate(rmsnorm, (torch.randn(8, 4096, dtype=torch.bfloat16),
                              torch.randn(4096, dtype=torch.bfloat16)), name="rms_v")


def test_variant_space_respects_each_device(rms_op) -> None:
    ex = rms_op.example_inputs
    for name in ("h100", "mi300x", "a100"):
        hw = hwmodels.get(name)
        space = rms_op.variant_space(hw, ex)
        assert space and space[0] == rms_op.default_config(hw, ex)
        for cfg in space:
            assert cfg["num_warps"] * hw.warp_size <= hw.limits.max_threads_per_block.value
            assert cfg["dtype"] == "bf16"
            assert ("waves_per_eu" in cfg) == (hw.build.backend == "triton-hip")
    amd = rms_op.variant_space(hwmodels.get("mi300x"), ex)
    assert max(c["num_warps"] for c in amd) == 16  # 16 x 64 lanes = 1024
    m4 = rms_op.variant_space(hwmodels.get("m4"), ex)
    assert all(c["threads"] * 4 <= 32768 for c in m4)


def test_matmul_variants_fit_shared_memory() -> None:
    op = generate(linear_gelu, (torch.randn(64, 32, dtype=torch.bfloat16),
                                torch.randn(48, 32, dtype=torch.bfloat16),
                                torch.randn(48, dtype=torch.bfloat16)), name="lg_v")
    mi = hwmodels.get("mi300x")
    space = op.variant_space(mi, op.example_inputs)
    for cfg in space[1:]:
        smem = cfg["num_stages"] * (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * 2
        assert smem <= 65536
        assert cfg["matrix_instr_nonkdim"] in (16, 32)
    assert len(space) < len(op.variant_space(hwmodels.get("h100"), op.example_inputs)) * 6


def test_long_rows_default_to_looped() -> None:
    op = generate(softmax, (torch.randn(2, 393216, dtype=torch.bfloat16),), name="sm_long")
    assert op.default_config(hwmodels.get("h100"))["strategy"] == "looped"
    short = generate(softmax, (torch.randn(4096, 64),), name="sm_short")
    cfg = short.default_config(hwmodels.get("h100"))
    assert cfg["strategy"] == "single_pass" and cfg["ROWS"] > 1


@pytest.mark.parametrize(("fn", "inputs"), [
    (rmsnorm, lambda: (torch.randn(8, 4096, dtype=torch.bfloat16),
                       torch.randn(4096, dtype=torch.bfloat16))),
    (swiglu, lambda: (torch.randn(64, 4096, dtype=torch.bfloat16),
                      torch.randn(64, 4096, dtype=torch.bfloat16))),
    (softmax, lambda: (torch.randn(2, 393216, dtype=torch.bfloat16),)),
], ids=["rmsnorm", "swiglu_flat", "softmax_looped"])
def test_cross_compiled_h100_kernels_use_16_byte_vectors(fn, inputs, tmp_path: Path) -> None:
    # Runs in the interpreted test process on purpose: targets compiles in a clean child process
    # then (targets/isolated.py), so the result must not depend on the tests that ran before.
    targets = pytest.importorskip("targets")
    from targets.base import LaunchConfig

    ex = inputs()
    op = generate(fn, ex, name=f"{fn.__name__}_ptx")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    hw = hwmodels.get("h100")
    cfg = op.default_config(hw, ex)
    for ref in op.kernel_refs(ex, cfg, source_path=str(path)):
        rep = targets.for_device(hw).compile(
            ref, LaunchConfig(cfg["num_warps"], cfg.get("num_stages", 1)), hw)
        ptx = rep.artifacts["ptx"]
        assert rep.fits, rep.reasons
        assert re.search(r"ld\.global(\.\w+)*\.v4", ptx), "loads are not 16-byte vectors"
        assert rep.resources.spill_bytes == 0


def test_kernel_refs_type_pointers_from_inputs(rms_op) -> None:
    (ref,) = rms_op.kernel_refs(rms_op.example_inputs)
    assert ref.signature["in0_ptr"] == "*bf16" and ref.signature["out0_ptr"] == "*bf16"
    assert ref.constexprs["in0_cs1"] == 1  # unit column stride is a constexpr
    assert ref.constexprs["BLOCK_N"] == 4096


def test_metal_emitted_for_elementwise_rowwise_and_matmul(rms_op) -> None:
    src = rms_op.metal_source({"dtype": "fp16", "threads": 128})
    assert src is not None and "not compiled here" in src
    assert "device const half* in0" in src and "THREADS = 128" in src
    assert "kernel void" in src and "rsqrt(" in src
    ce = generate(cross_entropy, (torch.randn(4, 10), torch.randint(0, 10, (4,))), name="ce_m")
    assert "_post(" in ce.metal_source()
    sw = generate(swiglu, (torch.randn(4, 10), torch.randn(4, 10)), name="sw_m")
    assert "out0[offs]" in sw.metal_source()
    lg = generate(linear_gelu, (torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)), name="lg_m")
    assert "simdgroup_multiply_accumulate" in lg.metal_source()


def test_fusion_report_counts_bytes(rms_op) -> None:
    rep = rms_op.fusion
    n, b = 8 * 4096, 2
    # fused: x and w read once, y written once
    assert rep.bytes_fused == (n + 4096 + n) * b
    assert rep.bytes_unfused > rep.bytes_fused
    assert rep.bytes_saved == rep.bytes_unfused - rep.bytes_fused
    assert rep.kernels == 1 and {"mean.dim", "rsqrt"} <= set(rep.ops)
    assert "fused into 1 rowwise kernel" in rep.text


def test_output_spec_follows_input_dtype_and_shape(rms_op) -> None:
    x, w = torch.randn(3, 64, dtype=torch.float16), torch.randn(64, dtype=torch.float16)
    assert rms_op.output_spec((x, w)) == [((3, 64), torch.float16)]


def test_torch_math_checker_catches_host_math() -> None:
    bad = "import torch\ndef launch(*inputs, out=None, config=None):\n    return inputs[0].sum()\n"
    assert torch_math_calls(bad) == ["line 3: .sum()"]
    bad2 = "import torch\ndef launch(x):\n    return torch.softmax(x, -1)\n"
    assert torch_math_calls(bad2)


def test_rowwise_default_follows_the_sweep_rules() -> None:
    from porter.codegen.heuristics import rowwise_default

    # one row per program, ~16 fp32 values per thread up to 4096 columns, 32 beyond
    assert rowwise_default(8192, 4096, 2, True) == {
        "strategy": "single_pass", "ROWS": 1, "BLOCK_N": 4096, "num_warps": 8, "num_stages": 1}
    assert rowwise_default(8192, 5120, 2, True)["num_warps"] == 8
    assert rowwise_default(4096, 32768, 2, True)["num_warps"] == 32
    assert rowwise_default(4096, 32768, 2, True, max_threads=512)["num_warps"] == 16
    # narrow rows are packed to ~1024 elements per program
    narrow = rowwise_default(100000, 128, 2, True)
    assert narrow["ROWS"] * narrow["BLOCK_N"] == 1024
    # an op that only reduces (no full-row output) loops over long rows in 8192-wide chunks
    ce = rowwise_default(4096, 32768, 2, True, full_output=False)
    assert (ce["strategy"], ce["BLOCK_N"], ce["num_warps"]) == ("looped", 8192, 8)
    assert rowwise_default(4096, 8192, 2, True, full_output=False)["strategy"] == "single_pass"


def test_unmeasured_rowwise_default_holds_rows_not_a_power_of_two_in_two_blocks() -> None:
    from porter.codegen.heuristics import rowwise_default

    # about 40 values per thread over the head and tail blocks (bench/NOTES.md item 57)
    assert rowwise_default(8192, 5120, 2, True, unmeasured=True) == {
        "strategy": "two_block", "ROWS": 1, "BLOCK_N": 4096, "BLOCK_TAIL": 1024,
        "num_warps": 4, "num_stages": 1}
    wide = rowwise_default(4096, 20000, 2, True, unmeasured=True)
    assert (wide["BLOCK_N"], wide["BLOCK_TAIL"], wide["num_warps"]) == (16384, 4096, 16)
    assert rowwise_default(4096, 20000, 2, True, warp_size=64, unmeasured=True)["num_warps"] == 8
    # a power of two, a head and tail no smaller than the block, narrow rows, another
    # reduced dim, or a module without the kernel: the single pass as before
    for n_cols, last_dim in ((8192, True), (14000, True), (3000, True), (20000, False)):
        cfg = rowwise_default(4096, n_cols, 2, last_dim, unmeasured=True)
        assert cfg["strategy"] == "single_pass", (n_cols, last_dim)
    assert rowwise_default(4096, 20000, 2, True)["strategy"] == "single_pass"
    # a mean and a variance over fp32 rows wider than 16384: the single pass as before (item
    # 58); over 16-bit rows, the looped kernel (below), but under 2048 rows two blocks
    ln = rowwise_default(4096, 20000, 4, True, one_round_variance=True, unmeasured=True)
    assert ln == rowwise_default(4096, 20000, 4, True, one_round_variance=True)
    assert rowwise_default(1000, 12288, 2, True, one_round_variance=True,
                           unmeasured=True)["strategy"] == "two_block"


def test_unmeasured_rowwise_default_loops_layernorms_wide_16_bit_rows() -> None:
    from porter.codegen.heuristics import rowwise_default

    def rule(n_rows, n_cols, eb=2, **kw):
        cfg = rowwise_default(n_rows, n_cols, eb, True, one_round_variance=True, **kw)
        return tuple(cfg.get(k) for k in ("strategy", "BLOCK_N", "num_warps", "VAR1"))

    # the best looped configs of items 59-60's sweeps: half the row's largest power of two,
    # 16 values a thread, VAR1
    assert rule(8000, 9000, unmeasured=True) == ("looped", 4096, 8, True)
    assert rule(4096, 20000, unmeasured=True) == ("looped", 8192, 16, True)
    assert rule(2500, 24000, unmeasured=True) == ("looped", 8192, 16, True)
    assert rule(3000, 40000, unmeasured=True, coop=True) == ("looped", 16384, 32, True)
    # not: a power of two up to 32768 (the single pass), fp32, too few rows, past 40960
    # columns (split_coop where the module has it), a row-only output, the port's anchor
    assert rule(4096, 32768, unmeasured=True)[0] == "single_pass"
    assert rule(4096, 20000, 4, unmeasured=True)[0] == "single_pass"
    assert rule(1000, 20000, unmeasured=True)[0] == "single_pass"
    assert rule(4096, 50000, unmeasured=True, coop=True)[0] == "split_coop"
    assert rule(4096, 20000, unmeasured=True, full_output=False)[:2] == ("looped", 4096)
    assert rule(4096, 20000)[0] == "single_pass"


@pytest.mark.parametrize("full_output,one_round_variance,coop", [
    (True, False, True), (False, False, False), (True, True, True)])
def test_rowwise_default_gives_each_forms_config_on_request(
        full_output: bool, one_round_variance: bool, coop: bool) -> None:
    """`form` asks the rule for one kernel form's config (the port times each at its buckets
    as the loader's evidence): where the rule picks that form itself it gives the same config;
    one block only where the rule would hold the row so, split_coop only over two chunks or
    more of a module that has it."""
    from porter.codegen.heuristics import rowwise_default
    from porter.packs.unseen import kernel_form

    for n_rows, n_cols in ((8192, 1792), (16384, 8192), (4096, 20000), (2500, 24000),
                           (4096, 32768), (3000, 40000), (4096, 50257), (4096, 131072)):
        kw = dict(full_output=full_output, one_round_variance=one_round_variance,
                  unmeasured=True, coop=coop)
        natural = rowwise_default(n_rows, n_cols, 2, True, **kw)
        for form in ("one-block", "looped", "split_coop"):
            cfg = rowwise_default(n_rows, n_cols, 2, True, form=form, **kw)
            where = (n_rows, n_cols, form)
            if kernel_form(natural) == form:
                assert cfg == natural, where
            elif cfg is not None:
                assert kernel_form(cfg) == form, where
            if form == "one-block":
                assert (cfg is None) is (n_cols > (32768 if full_output else 8192)), where
            if form == "looped":
                assert cfg is not None and cfg["BLOCK_N"] <= max(8192, n_cols), where
            if form == "split_coop":
                assert (cfg is not None) is (coop and n_cols > 16384
                                             and n_cols * 2 % 16 == 0), where
    # layernorm's looped rule at a power-of-two bucket the rule holds in one block
    assert rowwise_default(16384, 8192, 2, True, one_round_variance=True, unmeasured=True,
                           form="looped") == {"strategy": "looped", "ROWS": 1, "BLOCK_N": 4096,
                                              "num_warps": 8, "num_stages": 1, "VAR1": True}


def test_unmeasured_rowwise_default_splits_aligned_vocabulary_rows_over_programs() -> None:
    from porter.codegen.heuristics import rowwise_default

    def rule(n_cols, eb, **kw):
        cfg = rowwise_default(4096, n_cols, eb, True, unmeasured=True, **kw)
        return tuple(cfg.get(k) for k in ("strategy", "BLOCK_N", "SPLIT", "num_warps",
                                          "PROGRAMS_PER_SM"))

    # items 58-59: 8192 x 4 warps x 4 per SM in fp32, 16384 x 8 warps x 2 per SM in 16-bit
    assert rule(151936, 4, coop=True) == ("split_coop", 8192, 19, 4, 4)
    assert rule(50257, 4, coop=True) == ("split_coop", 8192, 7, 4, 4)
    assert rule(151936, 2, coop=True) == ("split_coop", 16384, 10, 8, 2)
    # 2-byte rows not 16-byte aligned, no split_coop kernel, or more chunks than fit at once
    assert rule(50257, 2, coop=True)[0] == "looped"
    assert rule(151936, 4)[0] == "looped"
    assert rule(4194304, 4, coop=True, sms=64)[0] == "looped"  # 512 chunks, 256 programs
    assert rule(151936, 4, coop=True, full_output=False)[0] == "looped"


def test_unmeasured_rowwise_default_gives_reductions_64_values_per_thread() -> None:
    from porter.codegen.heuristics import rowwise_default

    def warps(n_rows, n_cols, **kw):
        return rowwise_default(n_rows, n_cols, 2, True, unmeasured=True, **kw)["num_warps"]

    assert warps(10000, 4096, full_output=False) == 2
    assert warps(10000, 8192, full_output=False) == 4
    # narrower rows keep 16 per thread; an op writing rows, or the port's anchor, is unchanged
    assert warps(4097, 1537, full_output=False) == 4
    assert warps(10000, 4096) == 8
    assert rowwise_default(10000, 4096, 2, True, full_output=False)["num_warps"] == 8
    # looped reductions: 4096-column blocks at 32 values per thread (item 59), whatever the
    # width; the port's anchor keeps 8192 x 8 warps
    for n_cols in (9000, 50257, 151936):
        cfg = rowwise_default(4096, n_cols, 2, True, full_output=False, unmeasured=True)
        assert (cfg["strategy"], cfg["BLOCK_N"], cfg["num_warps"]) == ("looped", 4096, 4)
    anchor = rowwise_default(8000, 9000, 2, True, full_output=False)
    assert (anchor["BLOCK_N"], anchor["num_warps"]) == (8192, 8)


def test_hoist_is_offered_where_a_load_can_move_first(rms_op, tmp_path: Path) -> None:
    h100 = hwmodels.get("h100")
    space = rms_op.variant_space(h100, rms_op.example_inputs)
    hoisted = [c for c in space if c.get("HOIST")]
    assert hoisted and all(c["strategy"] == "single_pass" for c in hoisted)
    plain = [c for c in space if c["strategy"] == "single_pass" and not c.get("HOIST")]
    assert len(hoisted) == len(plain)  # each single-pass tile both ways
    # softmax loads nothing but the row, which comes first anyway
    sm = generate(softmax, (torch.randn(8, 4096),), name="sm_hoist")
    assert not any(c.get("HOIST") for c in sm.variant_space(h100, sm.example_inputs))
    assert "HOIST" not in sm.triton_module_source()
    # the hoisted form cross-compiles for sm_90 (HOIST is a constexpr of the single pass)
    targets = pytest.importorskip("targets")
    from targets.base import LaunchConfig

    path = tmp_path / "mod.py"
    path.write_text(rms_op.triton_module_source())
    cfg = hoisted[0]
    (ref,) = rms_op.kernel_refs(rms_op.example_inputs, cfg, source_path=str(path))
    assert ref.constexprs["HOIST"] is True
    rep = targets.for_device(h100).compile(ref, LaunchConfig(cfg["num_warps"], 1), h100)
    assert rep.fits, rep.reasons


def test_two_block_is_offered_where_it_holds_fewer_lanes() -> None:
    h100 = hwmodels.get("h100")
    for width, offered in ((5120, True), (4096, False), (1537, False), (3072, True)):
        op = generate(softmax, (torch.randn(8, width, dtype=torch.bfloat16),), name=f"sm_{width}")
        two = [c for c in op.variant_space(h100, op.example_inputs)
               if c["strategy"] == "two_block"]
        assert bool(two) == offered, width
        for c in two:
            assert c["BLOCK_N"] + c["BLOCK_TAIL"] >= width > c["BLOCK_N"]
            assert c["BLOCK_N"] + c["BLOCK_TAIL"] < 2 * c["BLOCK_N"]


def test_looped_online_softmax_configs_name_lanes_for_the_warp_width() -> None:
    # LANES = threads x the elements of one 16-byte load, with the target's warp width, so that
    # each lane position belongs to one thread (64-wide wavefronts on AMD)
    ex = (torch.randn(8, 65536, dtype=torch.bfloat16), torch.randint(0, 65536, (8,)))
    ce = generate(cross_entropy, ex, name="ce_lanes")
    for name, warp in (("h100", 32), ("mi300x", 64)):
        looped = [c for c in ce.variant_space(hwmodels.get(name), ex)
                  if c["strategy"] == "looped"]
        assert looped and all(c["LANES"] == min(c["BLOCK_N"], c["num_warps"] * warp * 8)
                              for c in looped), name
    rms = generate(rmsnorm, (torch.randn(8, 65536, dtype=torch.bfloat16),
                             torch.randn(65536, dtype=torch.bfloat16)), name="rms_lanes")
    space = rms.variant_space(hwmodels.get("h100"), rms.example_inputs)
    assert not any("LANES" in c for c in space)


def matmul(a, b):
    return a @ b


def _large_k(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    # KernelBench's 6_Matmul_with_large_K_dimension_ sizes, as meta tensors
    return (torch.empty(256, 524288, dtype=dtype, device="meta"),
            torch.empty(524288, 256, dtype=dtype, device="meta"))


def _fp32_dot(cfg: dict) -> str:
    """How the tiled kernel's tl.dot takes fp32 operands under `cfg` (op._const_value's rule:
    IEEE unless the config turns it off, then TF32X3 or the default, plain tf32)."""
    if cfg.get("ieee", True):
        return "ieee"
    return "tf32x3" if cfg.get("tf32x3") else "tf32"


def test_fp32_matmul_space_has_no_plain_tf32_and_starts_with_tf32x3() -> None:
    ex = (torch.randn(64, 128), torch.randn(128, 32))
    op = generate(matmul, ex, name="mm_fp32")
    assert "TF32X3" in op.triton_module_source()
    h100 = op.variant_space(hwmodels.get("h100"), _large_k(torch.float32))
    kinds = [_fp32_dot(c) for c in h100 if c["strategy"] == "tiled"]
    assert "tf32" not in kinds and {"ieee", "tf32x3"} <= set(kinds)
    assert _fp32_dot(h100[0]) == "tf32x3"
    assert op.default_config(hwmodels.get("h100"), _large_k(torch.float32)) == h100[0]
    # the tf32x3 tiles keep <= 64 accumulator and 64 operand values per thread (the split
    # operands' registers)
    assert all(c["BLOCK_M"] * c["BLOCK_N"] <= 64 * 32 * c["num_warps"] and
               (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] <= 64 * 32 * c["num_warps"]
               for c in h100 if c.get("tf32x3"))
    # Triton's HIP backend takes no tf32x3 (its capabilities say so): exact fp32 only
    mi = op.variant_space(hwmodels.get("mi300x"), _large_k(torch.float32))
    assert {_fp32_dot(c) for c in mi} == {"ieee"}
    # without a device the launcher's own choice: exact fp32
    assert _fp32_dot(op.default_config(None, _large_k(torch.float32))) == "ieee"


def test_backend_capabilities_name_the_fp32_dot_precisions() -> None:
    targets = pytest.importorskip("targets")
    assert "tf32x3" in targets.for_device(hwmodels.get("h100")).capabilities().fp32_dot_precisions
    assert "tf32x3" not in targets.for_device(
        hwmodels.get("mi300x")).capabilities().fp32_dot_precisions


def test_16_bit_matmul_module_and_space_are_unchanged_by_tf32x3() -> None:
    op = generate(matmul, (torch.randn(64, 128, dtype=torch.bfloat16),
                           torch.randn(128, 32, dtype=torch.bfloat16)), name="mm_bf16")
    assert "TF32X3" not in op.triton_module_source()
    space = op.variant_space(hwmodels.get("h100"), _large_k(torch.bfloat16))
    assert not any("ieee" in c or "tf32x3" in c for c in space)


def test_fp32_tf32x3_matmul_cross_compiles_for_sm90_without_spills(tmp_path: Path) -> None:
    targets = pytest.importorskip("targets")
    from targets.base import LaunchConfig

    op = generate(matmul, (torch.randn(64, 128), torch.randn(128, 32)), name="mm_x3_cc")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    hw = hwmodels.get("h100")
    big = _large_k(torch.float32)
    space = op.variant_space(hw, big)
    x3 = [c for c in space if c.get("tf32x3")]
    # the default (128x128 tiles, K split in ranges of 8192: one accumulator each) and, of the
    # other tiles (the long-K filter's), the one with the most values per thread (accumulator,
    # then operands)
    default = x3[0]
    most = max([c for c in x3 if c["SPLIT_K"] != default["SPLIT_K"]],
               key=lambda c: (c["BLOCK_M"] * c["BLOCK_N"] / c["num_warps"],
                              (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] / c["num_warps"],
                              c["num_stages"]))
    # one split: each program sums all of K = 524288 in partial accumulators
    most = {**most, "SPLIT_K": 1}
    exact = {k: v for k, v in most.items() if k not in ("ieee", "tf32x3")}
    for cfg in (default, most, exact):
        refs = op.kernel_refs(big, cfg, source_path=str(path))
        ref = next(r for r in refs if r.name.endswith("_matmul_kernel"))
        assert ref.constexprs["TF32X3"] is (cfg is not exact)
        assert ref.constexprs["IEEE"] is (cfg is exact)
        # K = 524288: partial accumulators, except in the default's splits of 8192
        assert (ref.constexprs["ACC_CHUNK"] > 0) is (cfg is not default)
        rep = targets.for_device(hw).compile(ref, LaunchConfig(cfg["num_warps"],
                                                               cfg["num_stages"]), hw)
        assert rep.fits, (cfg, rep.reasons)
        assert rep.resources.spill_bytes == 0, (cfg, rep.resources)
        assert ("mma" in rep.artifacts["ptx"]) is (cfg is not exact)  # on the tensor cores


def test_fp32_matmul_default_tile_follows_the_h100_sweep() -> None:
    """tf32x3's default is the sweep's winner where the 128x128 tiles fill the device (>= 256
    tiles), the 64x64 tile below; exact fp32 (no tf32x3: HIP, or no device) keeps its tile, and
    a long K keeps the small tile of the partial accumulators."""
    op = generate(matmul, (torch.randn(64, 128), torch.randn(128, 32)), name="mm_fp32_tile")
    h100, mi = hwmodels.get("h100"), hwmodels.get("mi300x")
    tile = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")

    def meta(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.empty(m, k, device="meta"), torch.empty(k, n, device="meta"))

    big = op.default_config(h100, meta(4096, 4096, 4096))
    assert _fp32_dot(big) == "tf32x3" and [big[k] for k in tile] == [128, 128, 64, 8, 3]
    assert big in op.variant_space(h100, meta(4096, 4096, 4096))
    few_tiles = op.default_config(h100, meta(128, 4096, 4096))  # 32 tiles of 128x128
    assert _fp32_dot(few_tiles) == "tf32x3" and [few_tiles[k] for k in tile] == [64, 64, 32, 4, 4]
    exact = op.default_config(mi, meta(4096, 4096, 4096))
    assert _fp32_dot(exact) == "ieee" and [exact[k] for k in tile][:3] == [64, 64, 32]
    long_k = op.default_config(h100, meta(4096, 4096, 16384))  # enough tiles: no split
    assert [long_k[k] for k in tile][:3] == [64, 64, 32] and "SPLIT_K" not in long_k
    few_long = op.default_config(h100, _large_k(torch.float32))  # few tiles: split-K
    assert [few_long[k] for k in tile] == [128, 128, 32, 8, 3] and few_long["SPLIT_K"] > 1


def test_fp32_tf32x3_default_tile_cross_compiles_for_sm90_without_spills(tmp_path: Path) -> None:
    targets = pytest.importorskip("targets")
    from targets.base import LaunchConfig

    op = generate(matmul, (torch.randn(64, 128), torch.randn(128, 32)), name="mm_x3_big")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    hw = hwmodels.get("h100")
    big = (torch.empty(4096, 4096, device="meta"), torch.empty(4096, 4096, device="meta"))
    cfg = op.default_config(hw, big)
    (ref,) = op.kernel_refs(big, cfg, source_path=str(path))
    assert ref.constexprs["TF32X3"] is True and ref.constexprs["ACC_CHUNK"] == 0
    rep = targets.for_device(hw).compile(ref, LaunchConfig(cfg["num_warps"], cfg["num_stages"]),
                                         hw)
    assert rep.fits, rep.reasons
    assert rep.resources.spill_bytes == 0, rep.resources
