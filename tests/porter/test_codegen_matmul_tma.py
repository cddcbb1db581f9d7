"""The persistent TMA matmul strategy ("tma_persistent"): numerics under the interpreter, the
tiled path where TMA cannot describe the operands, which devices are offered it, and
cross-compiles for sm_90 / sm_100.

TMA layout rule the sizes below follow: each operand needs one unit stride and the other stride
a multiple of 16 bytes (8 elements of bf16/fp16). For `F.linear(x, w)` (x [M, K], w [N, K]) that
is K % 8 == 0; for `x @ w` with w stored [K, N], also N % 8 == 0; for `xt.t() @ w` with xt stored
[K, M], M % 8 == 0. M and N need no alignment otherwise: TMA zero-fills out-of-range tile parts.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import re  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hwmodels  # noqa: E402
from porter.codegen import generate  # noqa: E402
from porter.codegen import load_generated_module  # noqa: E402
from porter.codegen.checks import torch_math_calls  # noqa: E402

# Small blocks keep the interpreter fast; 37x70 then has 3x3 tiles walked by 4 programs, so the
# persistent loop runs more than one tile per program.
SMALL = {"strategy": "tma_persistent", "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32,
         "GROUP_M": 2, "FLATTEN": True, "SUBTILE": False, "num_warps": 4, "num_stages": 3}
ATOL = {torch.float16: 1e-2, torch.bfloat16: 6e-2}


def linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


def mm_plain(x, w):
    return torch.relu(x @ w)


def mm_a_t(xt, w):
    return xt.t() @ w + 1.0


def rand(*shape: int, dtype: torch.dtype = torch.bfloat16, seed: int = 0,
         scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=g)).to(dtype)


def run(fn: Callable[..., Any], inputs: tuple[Any, ...], name: str, config: dict[str, Any]
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """(kernel output, float64 reference); the output starts as NaN so an unwritten tile shows."""
    op = generate(fn, inputs, name=name)
    mod = load_generated_module(op.triton_module_source(), name, interpret=True)
    (shape, dtype), = op.output_spec(inputs)
    out = torch.full(shape, float("nan"), dtype=dtype)
    got = mod.launch(*inputs, out=out, config=config)
    assert got is out
    ref = fn(*(x.double() for x in inputs))
    return got, ref


def assert_close(got: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    assert not got.isnan().any(), "some output tile was never written"
    err = (got.double() - ref).abs().max().item()
    assert err < ATOL[dtype] * max(1.0, ref.abs().max().item()), err


# ---- numerics under the interpreter -----------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("epi", [{}, {"SUBTILE": True, "FLATTEN": False}], ids=["one", "halves"])
def test_linear_gelu_matches_reference(dtype: torch.dtype, epi: dict[str, Any]) -> None:
    x, w, b = rand(37, 64, dtype=dtype), rand(70, 64, dtype=dtype, seed=1, scale=0.125), \
        rand(70, dtype=dtype, seed=2)
    got, ref = run(linear_gelu, (x, w, b), f"lg_tma_{epi.get('SUBTILE', False)}",
                   {**SMALL, **epi})
    assert_close(got, ref, dtype)


# tma_ws builds its descriptors in the kernel from the operands and their row strides: every
# layout below checks those too.
STRATEGIES = {"tma_persistent": SMALL, "tma_ws": {**SMALL, "strategy": "tma_ws", "FLATTEN": False}}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_b_stored_k_by_n_and_a_transposed(strategy: str) -> None:
    # B = w as stored [K, N] (not transposed) with N % 8 == 0; A = a [K, M] view's transpose.
    x, w = rand(37, 64), rand(64, 72, seed=1, scale=0.125)
    got, ref = run(mm_plain, (x, w), f"mm_{strategy}", STRATEGIES[strategy])
    assert_close(got, ref, torch.bfloat16)
    xt = rand(64, 40, seed=3)
    got, ref = run(mm_a_t, (xt, w), f"mm_at_{strategy}", STRATEGIES[strategy])
    assert_close(got, ref, torch.bfloat16)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_k_tail_is_zero_filled(strategy: str) -> None:
    # K = 40 is not a multiple of BLOCK_K = 32: the last K box reads past K and must add zeros.
    x, w, b = rand(37, 40), rand(70, 40, seed=1, scale=0.2), rand(70, seed=2)
    got, ref = run(linear_gelu, (x, w, b), f"lg_ktail_{strategy}", STRATEGIES[strategy])
    assert_close(got, ref, torch.bfloat16)


# ---- where TMA cannot describe the operands, the same tiles run through pointer loads -------
def _names_launched(op: Any, inputs: tuple[Any, ...]) -> list[str]:
    return [r.name for r in op.kernel_refs(inputs, {**SMALL, "dtype": "bf16"})]


def test_untma_able_layouts_run_the_tiled_kernel() -> None:
    # K = 63: x's row stride is 126 bytes, not a multiple of 16, so TMA cannot describe it.
    x, w, b = rand(37, 63), rand(70, 63, seed=1), rand(70, seed=2)
    op = generate(linear_gelu, (x, w, b), name="lg_tma_bad")
    assert not op.tma_applies((x, w, b))
    assert _names_launched(op, (x, w, b)) == ["_lg_tma_bad_matmul_kernel"]
    mod = load_generated_module(op.triton_module_source(), "lg_tma_bad", interpret=True)
    got = mod.launch(x, w, b, config=SMALL)
    assert_close(got, linear_gelu(x.double(), w.double(), b.double()), torch.bfloat16)
    # at an aligned K the same config launches the TMA kernel
    x8, w8 = rand(37, 64), rand(70, 64, seed=1)
    assert op.tma_applies((x8, w8, b))
    assert _names_launched(op, (x8, w8, b)) == ["_lg_tma_bad_matmul_tma_kernel"]
    # x @ w with w stored [K, N], N = 70: w's row stride is 140 bytes.
    x2, w2 = rand(37, 64), rand(64, 70, seed=1)
    op2 = generate(mm_plain, (x2, w2), name="mm_tma_bad")
    assert not op2.tma_applies((x2, w2))
    mod2 = load_generated_module(op2.triton_module_source(), "mm_tma_bad", interpret=True)
    assert_close(mod2.launch(x2, w2, config=SMALL), mm_plain(x2.double(), w2.double()),
                 torch.bfloat16)


def test_fp32_runs_the_tiled_kernel() -> None:
    x, w, b = rand(37, 64, dtype=torch.float32), rand(70, 64, dtype=torch.float32, seed=1), \
        rand(70, dtype=torch.float32, seed=2)
    op = generate(linear_gelu, (x, w, b), name="lg_tma_f32")
    assert not op.tma_applies((x, w, b))
    mod = load_generated_module(op.triton_module_source(), "lg_tma_f32", interpret=True)
    got = mod.launch(x, w, b, config=SMALL)
    err = (got.double() - linear_gelu(x.double(), w.double(), b.double())).abs().max().item()
    assert err < 1e-4


def test_generated_host_code_stays_clean_and_defaults_tiled() -> None:
    x, w, b = rand(37, 64), rand(70, 64, seed=1, scale=0.125), rand(70, seed=2)
    op = generate(linear_gelu, (x, w, b), name="lg_tma_src")
    src = op.triton_module_source()
    assert torch_math_calls(src) == []
    assert "TensorDescriptor(" in src and "def tma_transposed(" in src
    mod = load_generated_module(src, "lg_tma_src", interpret=True)
    assert mod.tma_transposed(64, 1, 2) is False and mod.tma_transposed(1, 64, 2) is True
    assert mod.tma_transposed(63, 1, 2) is None and mod.tma_transposed(1, 63, 2) is None
    # config=None takes the tiled kernel: the default must serve every layout.
    assert_close(mod.launch(x, w, b), linear_gelu(x.double(), w.double(), b.double()),
                 torch.bfloat16)


# ---- variant spaces ----------------------------------------------------------------------------
def _meta(*shapes: tuple[int, ...], dtype: torch.dtype = torch.bfloat16) -> tuple[Any, ...]:
    return tuple(torch.empty(s, dtype=dtype, device="meta") for s in shapes)


@pytest.fixture(scope="module")
def lg_op():
    return generate(linear_gelu, (rand(8, 16), rand(24, 16), rand(24)), name="lg_tma_v")


def test_tma_offered_only_where_the_model_has_tma(lg_op) -> None:
    big = _meta((4096, 4096), (4096, 4096), (4096,))
    for name in ("h100", "h200", "b200"):
        hw = hwmodels.get(name)
        space = lg_op.variant_space(hw, big)
        tma = [c for c in space if c["strategy"] == "tma_persistent"]
        assert tma, name
        # The default on a TMA device: its launcher runs the tiled kernel where TMA cannot
        # describe the operands (test_untma_able_layouts_run_the_tiled_kernel).
        assert space[0] == lg_op.default_config(hw, big)
        assert space[0]["strategy"] == "tma_persistent" and space[0]["BLOCK_N"] == 256
        smem = int(hw.limits.shared_memory_per_block_bytes.value)
        for c in tma:
            assert c["BLOCK_M"] == 128 and c["BLOCK_N"] in (128, 256)
            assert c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * 2 <= smem
            per_thread = c["BLOCK_M"] * c["BLOCK_N"] // (c["num_warps"] * hw.warp_size)
            assert per_thread <= 128 and c["SUBTILE"] == (per_thread == 128)
        assert any((c["BLOCK_N"], c["BLOCK_K"], c["num_warps"], c["num_stages"]) ==
                   (256, 64, 8, 4) for c in tma), "the classic Hopper config is missing"
        assert any(c["strategy"] == "tiled" for c in space)
    for name in ("a100", "mi300x", "mi355x", "m4"):
        space = lg_op.variant_space(hwmodels.get(name), big)
        assert not [c for c in space if c.get("strategy") == "tma_persistent"], name
        assert lg_op.default_config(hwmodels.get(name), big).get("strategy") != "tma_persistent"


def test_tma_not_offered_for_fp32_or_untma_able_strides(lg_op) -> None:
    h100 = hwmodels.get("h100")
    f32 = _meta((4096, 4096), (4096, 4096), (4096,), dtype=torch.float32)
    assert all(c["strategy"] == "tiled" for c in lg_op.variant_space(h100, f32))
    odd_k = _meta((4096, 4095), (4096, 4095), (4096,))
    assert all(c["strategy"] == "tiled" for c in lg_op.variant_space(h100, odd_k))


# ---- cross-compiled for Hopper and Blackwell ---------------------------------------------------
@pytest.mark.parametrize("device", ["h100", "b200"])
def test_cross_compiles_with_tma_and_no_spills(device: str, lg_op, tmp_path: Path) -> None:
    # Runs in the interpreted test process: targets compiles in a clean child process then.
    targets = pytest.importorskip("targets")
    from porter.search import launch_config

    hw = hwmodels.get(device)
    inputs = _meta((4096, 4096), (4096, 4096), (4096,))
    cfg = next(c for c in lg_op.variant_space(hw, inputs) if c["strategy"] == "tma_persistent"
               and (c["BLOCK_N"], c["BLOCK_K"], c["num_warps"], c["num_stages"], c["FLATTEN"])
               == (256, 64, 8, 4, True))
    path = tmp_path / "mod.py"
    path.write_text(lg_op.triton_module_source())
    (ref,) = lg_op.kernel_refs(inputs, cfg, source_path=str(path))
    assert ref.name.endswith("_matmul_tma_kernel")
    # A is x [M, K]; B is w.t(), so its descriptor is w itself, [N, K], loaded transposed.
    assert ref.signature["a_desc"] == "tensordesc<bf16[128, 64]>"
    assert ref.signature["b_desc"] == "tensordesc<bf16[256, 64]>"
    assert ref.constexprs["A_T"] is False and ref.constexprs["B_T"] is True
    backend = targets.for_device(hw)
    assert backend.validate_config(launch_config(cfg), hw) == []
    rep = backend.compile(ref, launch_config(cfg), hw)
    assert rep.fits, rep.reasons
    assert rep.resources.spill_bytes == 0
    assert rep.resources.shared_memory_bytes >= 4 * (128 + 256) * 64 * 2  # the 4 stages
    assert re.search(r"cp\.async\.bulk\.tensor", rep.artifacts["ptx"]), "no TMA load in the PTX"


# ---- the warp-specialized form (tma_ws) --------------------------------------------------------
def test_warp_specialized_form_matches_reference() -> None:
    # The interpreter runs the loop as written (no warps to specialize): this checks the
    # launcher passes the strategy through and the body is the same computation.
    x, w, b = rand(37, 64), rand(70, 64, seed=1, scale=0.125), rand(70, seed=2)
    cfg = {**SMALL, "strategy": "tma_ws", "FLATTEN": False}
    got, ref = run(linear_gelu, (x, w, b), "lg_tma_ws", cfg)
    assert_close(got, ref, torch.bfloat16)
    op = generate(linear_gelu, (x, w, b), name="lg_tma_ws_refs")
    (ref_k,) = [r for r in op.kernel_refs((x, w, b), {**cfg, "dtype": "bf16"})
                if r.name.endswith("_tma_kernel")]
    assert ref_k.constexprs["WS"] is True
    (plain,) = [r for r in op.kernel_refs((x, w, b), {**SMALL, "dtype": "bf16"})
                if r.name.endswith("_tma_kernel")]
    assert plain.constexprs["WS"] is False


def test_warp_specialized_form_offered_only_where_triton_builds_it(lg_op, monkeypatch) -> None:
    import triton

    from porter.codegen import variants

    big = _meta((4096, 4096), (4096, 4096), (4096,))
    h100 = hwmodels.get("h100")
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    assert not [c for c in lg_op.variant_space(h100, big) if c["strategy"] == "tma_ws"]
    monkeypatch.setattr(variants, "OFFER_TMA_WS", True)
    ws = [c for c in lg_op.variant_space(h100, big) if c["strategy"] == "tma_ws"]
    assert ws and all(c["num_warps"] == 4 and not c["SUBTILE"] and not c["FLATTEN"] for c in ws)
    smem = int(h100.limits.shared_memory_per_block_bytes.value)
    assert all(c["num_stages"] * (128 + c["BLOCK_N"]) * c["BLOCK_K"] * 2 <= smem for c in ws)
    for other in ("a100", "b200"):  # no TMA; the pass fails for sm_100
        assert not [c for c in lg_op.variant_space(hwmodels.get(other), big)
                    if c["strategy"] == "tma_ws"], other
    monkeypatch.setattr(triton, "__version__", "3.9.0")
    assert not variants.warp_specialization_builds(h100)
    assert not [c for c in lg_op.variant_space(h100, big) if c["strategy"] == "tma_ws"]
