"""The matmul_rowwise family: one matmul, its epilogue, then row-wise reductions, as a matmul
kernel and a row-wise kernel in one module (porter/codegen/matmul_rowwise.py).

Interpreter numerics against float64, the graph split, configs of both parts, and the
cross-compiled kernels for sm_90 and gfx942 (no spills)."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hwmodels  # noqa: E402
from porter.codegen import UnsupportedOpError  # noqa: E402
from porter.codegen import generate  # noqa: E402
from porter.codegen import load_generated_module  # noqa: E402
from porter.codegen import matmul_rowwise  # noqa: E402
from porter.codegen.plan import classify  # noqa: E402
from porter.codegen.trace import trace  # noqa: E402

# M x K @ (N x K).t(): odd sizes so every mask of both kernels is exercised
M, K, N = 19, 40, 70


def gelu_softmax(x, w, b):
    return torch.softmax(F.gelu(F.linear(x, w, b)), dim=1)


def sigmoid_logsumexp(x, w, b):
    return torch.logsumexp(torch.sigmoid(F.linear(x, w, b)), dim=1)


def divide_sum_scale(x, w):
    return torch.sum(torch.matmul(x, w.T) / 2, dim=1, keepdim=True) * 1.5


def scale_layernorm(x, w, b, g, beta):
    return F.layer_norm(F.linear(x, w, b) * 0.5, (w.shape[0],), g, beta, 1e-5)


def lse_then_mish(x, w, b):
    y = torch.logsumexp(F.linear(x, w, b) * 2.0, dim=1, keepdim=True)
    return y * F.mish(y)


def two_linears_logsumexp(x, w, b, w2, b2):
    return torch.logsumexp(F.linear(torch.sigmoid(F.linear(x, w, b)), w2, b2), dim=1)


def sum_then_unit_reductions(x, w, b):
    y = torch.sum(F.linear(x, w, b), dim=1, keepdim=True)
    y = torch.max(y, dim=1, keepdim=True)[0]
    return torch.logsumexp(torch.mean(y, dim=1, keepdim=True), dim=1, keepdim=True)


def _inputs(fn: Any, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(M, K, generator=gen)
    w = torch.randn(N, K, generator=gen) / K ** 0.5
    b = torch.randn(N, generator=gen)
    extra = (torch.randn(N, generator=gen), torch.randn(N, generator=gen))
    w2 = torch.randn(24, N, generator=gen) / N ** 0.5
    args = {divide_sum_scale: (x, w), scale_layernorm: (x, w, b, *extra),
            two_linears_logsumexp: (x, w, b, w2, torch.randn(24, generator=gen))
            }.get(fn, (x, w, b))
    return tuple(a.to(dtype) for a in args)


def _ref64(fn: Any, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return fn(*(a.double() for a in inputs))


CASES = [gelu_softmax, sigmoid_logsumexp, divide_sum_scale, scale_layernorm, lse_then_mish,
         two_linears_logsumexp, sum_then_unit_reductions]


@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_interpreted_matches_float64(fn: Any) -> None:
    inputs = _inputs(fn)
    op = generate(fn, inputs, name=f"mr_{fn.__name__}")
    assert op.family == "matmul_rowwise"
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=True)
    ref = _ref64(fn, inputs)
    hw = hwmodels.get("h100")
    space = op.variant_space(hw, inputs)
    # the default, a matmul variant and a row variant (the space varies one stage at a time)
    mm_variant = next(c for c in space if c["BLOCK_M"] != space[0]["BLOCK_M"])
    row_variant = next(c for c in space if c["row_strategy"] != space[0]["row_strategy"])
    for config in (None, op.default_config(hw, inputs), mm_variant, row_variant):
        got = mod.launch(*inputs, config=config)
        assert got.shape == ref.shape and got.dtype == torch.float32
        torch.testing.assert_close(got.double(), ref, atol=1e-4, rtol=1e-4)


def gn_swish_mul(x, w, b, gw, gb, mw):
    y = F.group_norm(F.linear(x, w, b), 5, gw, gb)
    return torch.clamp(y * torch.sigmoid(y) * mw, -2.0, 2.0)


def test_group_norm_then_pointwise_runs_on_the_groups() -> None:
    # GroupNorm of the matmul's [M, N] output: rows of (M, G, N / G); the swish, the
    # per-column weight and the clamp after its view back to [M, N] run on those rows
    gen = torch.Generator().manual_seed(1)
    params = [torch.randn(N, K, generator=gen) / K ** 0.5] + \
        [torch.randn(N, generator=gen) for _ in range(4)]
    inputs = (torch.randn(M, K, generator=gen), *params)
    op = generate(gn_swish_mul, inputs, name="mr_gn")
    rows = op.stages[-1].plan
    assert op.family == "matmul_rowwise" and len(rows.space) == 3 and rows.space[1] == 5
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=True)
    for m in (M, 7):  # one module serves other batch sizes
        x = torch.randn(m, K, generator=gen)
        got = mod.launch(x, *params)
        torch.testing.assert_close(got.double(), _ref64(gn_swish_mul, (x, *params)),
                                   atol=1e-4, rtol=1e-4)


def test_a_chain_runs_each_matmuls_own_tma_kernel() -> None:
    # bf16: both matmul stages' persistent TMA kernels (each stage's host helpers are its
    # own in the one module: a second matmul's would otherwise replace the first's)
    inputs = _inputs(two_linears_logsumexp, torch.bfloat16)
    op = generate(two_linears_logsumexp, inputs, name="mr_chain_tma")
    src = op.triton_module_source()
    assert "def _launch_tma_persistent(" in src and "def _launch_tma_persistent_s2(" in src
    mod = load_generated_module(src, op.name, interpret=True)
    tma = {"strategy": "tma_persistent", "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 32,
           "GROUP_M": 2, "FLATTEN": True, "SUBTILE": False, "num_warps": 4, "num_stages": 3}
    row = matmul_rowwise.split_config(op.default_config(None, inputs), op.prefixes)[2]
    config = matmul_rowwise.join_config([tma, tma, row], op.prefixes)
    assert op.tma_applies(inputs)
    got = mod.launch(*inputs, config=config)
    torch.testing.assert_close(got.double(), _ref64(two_linears_logsumexp, inputs),
                               atol=5e-2, rtol=2e-2)


def test_a_row_config_for_narrower_rows_falls_back_to_the_row_default() -> None:
    # a pack's config used at wider rows than it was tuned for (single pass, BLOCK_N 32 < 70)
    inputs = _inputs(gelu_softmax)
    op = generate(gelu_softmax, inputs, name="mr_narrow")
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=True)
    config = {**op.default_config(None, inputs), "row_BLOCK_N": 32}
    torch.testing.assert_close(mod.launch(*inputs, config=config).double(),
                               _ref64(gelu_softmax, inputs), atol=1e-4, rtol=1e-4)


def test_interpreted_bf16_and_out() -> None:
    inputs = _inputs(gelu_softmax, torch.bfloat16)
    op = generate(gelu_softmax, inputs, name="mr_bf16")
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=True)
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    assert mod.launch(*inputs, out=out) is out
    # eager's own bf16 rounding of the intermediate, plus one of the output
    torch.testing.assert_close(out.double(), _ref64(gelu_softmax, inputs), atol=2e-2, rtol=3e-2)


def test_classify_and_split_at_the_epilogue() -> None:
    inputs = _inputs(gelu_softmax)
    g = trace(gelu_softmax, inputs)
    assert classify(g) == "matmul_rowwise"
    mm = next(n for n in g.live() if n.op == "mm")
    cut = matmul_rowwise.split(g, mm, 0)
    (t,) = cut.head.outputs
    assert t.op == "pw" and t.origin.startswith("aten.gelu")  # bias and GELU in the epilogue
    assert {n.op for n in cut.head.live()} == {"input", "permute", "mm", "pw"}
    first = cut.tail.inputs[0]
    assert first.op == "input" and first.attrs["index"] == 0 and first.shape == t.shape
    assert [n.attrs["index"] for n in cut.tail.inputs] == [0, 1, 2, 3]
    assert not any(n.op == "mm" for n in cut.tail.live())
    assert classify(cut.tail) == "rowwise"
    # the sizes now come from the shifted inputs
    assert sorted(cut.tail.symbols.values()) == sorted((k + 1, d) for k, d in g.symbols.values())


def test_split_refuses_what_one_intermediate_cannot_carry() -> None:
    def two_outputs(x, w):
        y = x @ w.t()
        return y, torch.softmax(y, dim=1)

    def reduce_first(x, w):
        return (x - x.mean(dim=1, keepdim=True)) @ w.t()

    x, w = torch.randn(8, 16), torch.randn(12, 16)
    with pytest.raises(UnsupportedOpError, match="epilogue value itself"):
        generate(two_outputs, (x, w), name="mr_two")
    with pytest.raises(UnsupportedOpError, match="reduction before a matmul"):
        generate(reduce_first, (x, w), name="mr_first")


def test_a_chain_of_matmuls_is_one_stage_each() -> None:
    inputs = _inputs(two_linears_logsumexp)
    op = generate(two_linears_logsumexp, inputs, name="mr_chain")
    assert op.prefixes == ("", "mm2_", "row_")
    assert [s.family for s in op.stages] == ["matmul_epilogue", "matmul_epilogue", "rowwise"]
    assert op.problem_sizes(inputs) == {"M": M, "N": N, "K": K, "mm2_M": M, "mm2_N": 24,
                                        "mm2_K": N, "n_rows": M, "n_cols": 24}
    cfg = op.default_config(hwmodels.get("h100"), inputs)
    assert cfg["mm2_strategy"] == "tiled" and "row_strategy" in cfg
    assert "def _launch_matmul2(" in op.triton_module_source()


def test_config_joins_both_parts_and_space_varies_one_at_a_time() -> None:
    inputs = _inputs(gelu_softmax)
    op = generate(gelu_softmax, inputs, name="mr_cfg")
    hw = hwmodels.get("h100")
    cfg = op.default_config(hw, inputs)
    mm, row = matmul_rowwise.split_config(cfg)
    assert mm["strategy"] == "tiled" and row["strategy"] in ("single_pass", "looped")
    assert matmul_rowwise.join_config([mm, row]) == cfg
    assert op.problem_sizes(inputs) == {"M": M, "N": N, "K": K, "n_rows": M, "n_cols": N}
    space = op.variant_space(hw, inputs)
    assert space[0] == cfg
    for c in space[1:]:
        c_mm, c_row = matmul_rowwise.split_config(c)
        assert c_mm == mm or c_row == row
    amd = op.variant_space(hwmodels.get("mi300x"), inputs)
    assert all(c["num_warps"] * 64 <= 1024 and c["row_num_warps"] * 64 <= 1024 for c in amd)


def test_metal_declines_with_no_source() -> None:
    op = generate(gelu_softmax, _inputs(gelu_softmax), name="mr_metal")
    assert op.metal_source({}) is None


@pytest.mark.parametrize("device", ["h100", "mi300x"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_cross_compiles_without_spills(device: str, dtype: torch.dtype, tmp_path: Path) -> None:
    targets = pytest.importorskip("targets")
    # the file's own sizes (99_Matmul_GELU_Softmax) on meta tensors: nothing is allocated
    x = torch.empty(1024, 8192, dtype=dtype, device="meta")
    w = torch.empty(8192, 8192, dtype=dtype, device="meta")
    b = torch.empty(8192, dtype=dtype, device="meta")
    op = generate(gelu_softmax, _inputs(gelu_softmax, dtype), name=f"mr_cc_{device}")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    hw = hwmodels.get(device)
    refs = op.kernel_refs((x, w, b), op.default_config(hw, (x, w, b), dtype),
                          source_path=str(path))
    names = [ref.name for ref, _ in refs]
    assert any("_mm_matmul" in n for n in names) and any("_row_" in n for n in names)
    for ref, launch in refs:
        rep = targets.for_device(hw).compile(ref, launch, hw)
        assert rep.fits, rep.reasons
        assert rep.resources.spill_bytes == 0, ref.name


def test_a_target_in_a_language_the_op_lacks_gets_no_kernel_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The port asks the backend's capabilities for its language and the op for the languages
    it is emitted in: Metal (m4) gets no kernel for a Triton-only op, the others are ported."""
    import porter.port
    from porter.port import port
    from tests.porter.test_port_standin import SPEC
    from tests.porter.test_port_standin import FakeGenerated

    class TritonOnly(FakeGenerated):
        languages = ("triton",)

    assert generate(gelu_softmax, _inputs(gelu_softmax), name="mr_lang").languages == \
        TritonOnly.languages
    monkeypatch.setattr(porter.port, "generate_op", lambda ref, ex, name: TritonOnly(tmp_path))
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC)
    res = port(spec, ["h100", "m4"], tmp_path / "packs", run_dir=tmp_path / "run",
               max_variants=1)
    by = {t.target: t for t in res.targets}
    assert by["h100"].choices and not by["m4"].choices
    assert by["m4"].failures == ("no Metal form of the rowwise family (it is emitted as "
                                 "triton): no kernel for m4",)
    assert res.pack_path is not None


def test_fp32_stages_offer_tf32x3_on_nvidia_tensor_cores_only() -> None:
    inputs = _inputs(gelu_softmax)
    op = generate(gelu_softmax, inputs, name="mr_x3")
    h100 = [c for c in op.variant_space(hwmodels.get("h100"), inputs) if c.get("tf32x3")]
    assert h100 and all(c["ieee"] is False and c["strategy"] == "tiled" for c in h100)
    assert all(c["BLOCK_M"] * c["BLOCK_N"] <= 64 * 32 * c["num_warps"] for c in h100)
    # Triton's HIP backend has no tf32x3; bf16 operands are on the tensor cores already
    assert not any(c.get("tf32x3") for c in op.variant_space(hwmodels.get("mi300x"), inputs))
    bf16 = _inputs(gelu_softmax, torch.bfloat16)
    assert not any(c.get("tf32x3") for c in op.variant_space(hwmodels.get("h100"), bf16))
    # the matmul_epilogue family's module takes the knob where its operands are fp32 only (a
    # 16-bit module's source is as it was)
    plain = generate(lambda x, w, b: F.gelu(F.linear(x, w, b)), inputs, name="mr_plain")
    assert "TF32X3" in plain.triton_module_source() and "TF32X3" in op.triton_module_source()
    plain16 = generate(lambda x, w, b: F.gelu(F.linear(x, w, b)), bf16, name="mr_plain16")
    assert "TF32X3" not in plain16.triton_module_source()
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=True)
    got = mod.launch(*inputs, config={**op.default_config(None, inputs), **h100[0]})
    torch.testing.assert_close(got.double(), _ref64(gelu_softmax, inputs), atol=1e-4, rtol=1e-4)


def test_tf32x3_cross_compiles_for_sm90_without_spills(tmp_path: Path) -> None:
    targets = pytest.importorskip("targets")
    x = torch.empty(1024, 8192, device="meta")
    w = torch.empty(8192, 8192, device="meta")
    b = torch.empty(8192, device="meta")
    op = generate(gelu_softmax, _inputs(gelu_softmax), name="mr_x3_cc")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    hw = hwmodels.get("h100")
    cfg = {**op.default_config(hw, (x, w, b)), "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32,
           "num_warps": 8, "num_stages": 3, "ieee": False, "tf32x3": True}
    (ref, launch), = [r for r in op.kernel_refs((x, w, b), cfg, source_path=str(path))
                      if "_mm_" in r[0].name]
    assert ref.constexprs["TF32X3"] is True and ref.constexprs["IEEE"] is False
    rep = targets.for_device(hw).compile(ref, launch, hw)
    assert rep.fits, rep.reasons
    assert rep.resources.spill_bytes == 0
    assert "wgmma" in rep.artifacts["ptx"]  # on the tensor cores
