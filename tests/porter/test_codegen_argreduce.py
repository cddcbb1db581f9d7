"""argmax / argmin (porter/codegen/rowwise/argreduce.py): index-returning reductions over a
non-last dim (the column kernel) and the last dim (the row kernels), under the interpreter at
odd sizes against torch on the CPU, exactly: ties (the first index), NaN (the first NaN), +-inf,
keepdim, a fused prologue; each strategy the variant space offers; and the cross-compiled
kernels of KernelBench 51/52's shape for sm_90 (no spills)."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import hwmodels  # noqa: E402
from porter.codegen import generate  # noqa: E402
from porter.codegen import load_generated_module  # noqa: E402
from porter.codegen.checks import torch_math_calls  # noqa: E402
from porter.codegen.errors import UnsupportedOpError  # noqa: E402


def argmax0(x):
    return torch.argmax(x, dim=0)


def argmax1(x):
    return torch.argmax(x, dim=1)  # KernelBench level1/51_Argmax_over_a_dimension


def argmax2(x):
    return torch.argmax(x, dim=2)


def argmin0(x):
    return torch.argmin(x, dim=0)


def argmin1(x):
    return torch.argmin(x, dim=1)  # KernelBench level1/52_Argmin_over_a_dimension


def argmin_last(x):
    return torch.argmin(x, dim=-1)


def argmax1_keep(x):
    return torch.argmax(x, dim=1, keepdim=True)


def argmin_last_keep(x):
    return torch.argmin(x, dim=-1, keepdim=True)


def argmax_prologue1(x, y):
    return torch.argmax(x * 2 + y, dim=1)


def argmin_prologue_last(x, y):
    return torch.argmin(torch.abs(x - y), dim=2)


def values(shape: tuple[int, ...], kind: str, seed: int = 0) -> torch.Tensor:
    """Small integers (many ties along every dim), with NaNs or infinities sprinkled in."""
    g = torch.Generator().manual_seed(seed + sum(shape))
    x = torch.randint(-4, 4, shape, generator=g).float()
    pick = torch.rand(shape, generator=g)
    if kind == "nan":
        x[pick < 0.03] = float("nan")
    elif kind == "inf":
        x[pick < 0.05] = float("inf")
        x[pick > 0.95] = float("-inf")
        # whole lines of one infinity along each dim: index 0 is the answer there
        x[0, 0, :] = float("-inf")
        x[-1, :, 0] = float("inf")
        x[:, -1, -1] = float("-inf")
    return x


def configs(op, inputs: tuple[torch.Tensor, ...], n_cols: int, last: bool) -> list[dict]:
    """The default, the first config of each strategy the H100's space offers, and a looped
    config (chunks shorter than the row) and a small column tile where the space has none."""
    space = op.variant_space(hwmodels.get("h100"), inputs)
    out: list[dict | None] = [None]
    seen: set[str] = set()
    for c in space:  # each strategy's largest tile: the fewest programs for the interpreter
        if c["strategy"] not in seen:
            seen.add(c["strategy"])
            out.append(max((d for d in space if d["strategy"] == c["strategy"]), key=_tile))
    if "looped" not in seen:
        out.append({"strategy": "looped", "ROWS": 2, "BLOCK_N": 16, "num_warps": 1,
                    "num_stages": 1})
    if not last and "columns" not in seen:
        out.append({"strategy": "columns", "BLOCK_I": 32, "BLOCK_R": 8, "num_warps": 1,
                    "num_stages": 1})
    assert n_cols > 0
    return out


def _tile(c: dict) -> int:
    return c.get("ROWS", 1) * c.get("BLOCK_N", 1) * c.get("BLOCK_I", 1) * c.get("BLOCK_R", 1)


def run_all(fn, inputs: tuple[torch.Tensor, ...], name: str, dim: int) -> list[str]:
    op = generate(fn, inputs, name=name)
    src = op.triton_module_source()
    assert torch_math_calls(src) == []
    mod = load_generated_module(src, name, interpret=True)
    want = fn(*inputs)
    x = inputs[0]
    last = dim % x.dim() == x.dim() - 1
    ran = []
    for cfg in configs(op, inputs, x.shape[dim], last):
        out = torch.full(want.shape, torch.iinfo(torch.int64).min, dtype=torch.int64)
        got = mod.launch(*inputs, out=out, config=cfg)
        assert got is out and got.dtype == torch.int64
        bad = got != want
        assert not bad.any(), (cfg, bad.nonzero()[:3].tolist(), got[bad][:3], want[bad][:3])
        ran.append("default" if cfg is None else cfg["strategy"])
    return ran


SHAPES = [(3, 67, 37), (5, 17, 71)]
FNS = [(argmax0, 0), (argmax1, 1), (argmax2, 2), (argmin1, 1), (argmin_last, -1)]


# ties at the first shape, NaNs (with ties around them) at the second, +-inf for one argmax and
# one argmin below: the interpreter runs each strategy's kernels (20-40 s a case on a CI core),
# so the cases stay few and small
CASES = [(SHAPES[0], "ties"), (SHAPES[1], "nan")]


@pytest.mark.parametrize(("shape", "kind"), CASES,
                         ids=["x".join(map(str, c[0])) + "-" + c[1] for c in CASES])
@pytest.mark.parametrize(("fn", "dim"), FNS, ids=[f[0].__name__ for f in FNS])
def test_argreduce_matches_torch_exactly_in_every_strategy(fn, dim, shape, kind) -> None:
    x = values(shape, kind)
    ran = run_all(fn, (x,), f"ar_{fn.__name__}", dim)
    assert "looped" in ran
    if dim % 3 != 2:
        assert "columns" in ran
    else:
        assert "single_pass" in ran


@pytest.mark.parametrize(("fn", "dim"), [(argmax2, 2), (argmin0, 0)])
def test_argreduce_with_infinities(fn, dim) -> None:
    run_all(fn, (values(SHAPES[0], "inf"),), f"ar_inf_{fn.__name__}", dim)


@pytest.mark.parametrize(("fn", "dim"), [(argmax1_keep, 1), (argmin_last_keep, -1)])
def test_argreduce_keepdim(fn, dim) -> None:
    x = values((3, 65, 37), "nan", seed=1)
    assert fn(x).shape[dim] == 1
    run_all(fn, (x,), f"ar_{fn.__name__}", dim)


@pytest.mark.parametrize(("fn", "dim"), [(argmax_prologue1, 1), (argmin_prologue_last, 2)])
def test_argreduce_with_a_fused_prologue(fn, dim) -> None:
    x, y = values((3, 17, 65), "ties", seed=2), values((3, 17, 65), "nan", seed=3)
    op = generate(fn, (x, y), name=f"ar_{fn.__name__}")
    assert op.family == "rowwise"
    run_all(fn, (x, y), f"ar_{fn.__name__}", dim)


def max_indices1(x):
    return torch.max(x, dim=1)[1]


def min_values_and_indices_last(x):
    return torch.min(x, dim=-1)


def test_indices_of_max_and_min_along_a_dim() -> None:
    x = values((3, 33, 37), "ties", seed=5)
    run_all(max_indices1, (x,), "ar_max_indices", 1)
    op = generate(min_values_and_indices_last, (x,), name="ar_min_both")
    mod = load_generated_module(op.triton_module_source(), "ar_min_both", interpret=True)
    for cfg in (None, {"strategy": "looped", "ROWS": 1, "BLOCK_N": 16, "num_warps": 1,
                       "num_stages": 1}):
        got_v, got_i = mod.launch(x, config=cfg)
        want_v, want_i = torch.min(x, dim=-1)
        assert torch.equal(got_v, want_v) and torch.equal(got_i, want_i), cfg


def test_argreduce_16_bit_inputs() -> None:
    x = values((2, 33, 40), "nan", seed=4).to(torch.bfloat16)
    run_all(argmax1, (x,), "ar_bf16", 1)
    run_all(argmin_last, (x.half(),), "ar_fp16", -1)


@pytest.mark.parametrize(("fn", "needle"), [
    (lambda x: torch.argmax(x), "over all dims"),
    (lambda x: torch.argmax(x, dim=1).sum(), "fold into a scalar"),
    (lambda x: torch.argmax(x.int(), dim=1), "float inputs only"),
], ids=["no_dim", "fold", "int"])
def test_argreduce_unsupported_forms_say_why(fn, needle) -> None:
    with pytest.raises(UnsupportedOpError, match=needle):
        generate(fn, (torch.randn(3, 5, 7),), name="ar_unsupported")


def test_split_row_is_not_offered_and_says_why() -> None:
    op = generate(argmin_last, (torch.randn(2, 3, 4097),), name="ar_split")
    assert "index" in op._mm["split_why_not"]
    space = op.variant_space(hwmodels.get("h100"), (torch.empty(4, 1, 1 << 22, device="meta"),))
    assert not any(c["strategy"].startswith("split") for c in space)


@pytest.mark.parametrize("fn", [argmax1, argmin1, argmax2], ids=["argmax1", "argmin1", "argmax2"])
def test_kb51_shape_cross_compiles_for_sm90_without_spills(fn, tmp_path: Path) -> None:
    targets = pytest.importorskip("targets")
    from targets.base import LaunchConfig

    op = generate(fn, (torch.randn(2, 5, 33),), name=f"arx_{fn.__name__}")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    hw = hwmodels.get("h100")
    real = (torch.empty(128, 4096, 4095, device="meta"),)  # KernelBench 51/52's x
    space = op.variant_space(hw, real)
    default = op.default_config(hw, real)
    picks = [default]
    # (persistent tiles whose stages overflow shared memory are left to the compile check)
    for strategy in ("columns", "looped", "single_pass"):
        of = [c for c in space if c["strategy"] == strategy]
        if of:
            picks.append(max(of, key=lambda c: c.get("BLOCK_I", c.get("ROWS", 1))
                             * c.get("BLOCK_R", c.get("BLOCK_N", 1))))
    if fn is not argmax2:
        assert default["strategy"] == "columns"
    for cfg in picks:
        (ref,) = op.kernel_refs(real, cfg, source_path=str(path))
        rep = targets.for_device(hw).compile(ref, LaunchConfig(cfg["num_warps"],
                                                               cfg.get("num_stages", 1)), hw)
        assert rep.fits, (cfg, rep.reasons)
        assert rep.resources.spill_bytes == 0, cfg
