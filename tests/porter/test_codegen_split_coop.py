"""The split_coop family (issue 31): a long row's chunks of one block each over co-resident
programs that keep their chunk in registers and exchange their partials behind a per-row
counter in one cooperative launch, so that the row is read once (`porter/codegen/rowwise/coop.py`,
`_triton_rowwise_long.py.j2`, `porter/codegen/long_rows.py`).

On the CPU: the family's launcher under the interpreter against float64, with `out` poisoned
with NaN. With one chunk a row the coop kernel runs as on a GPU, its barrier opening at once
(PHASE 0); with several, the same kernel runs twice, every chunk's partials, then every
chunk's apply (PHASES 1, 2: the interpreter runs programs one after another, so a barrier
would never open). Also what the search offers, and the kernel cross-compiled for sm_90 (fits,
no spills, the release and the acquire in its PTX, the chunk loaded once).
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
from porter.codegen import heuristics  # noqa: E402
from porter.codegen import load_generated_module  # noqa: E402
from porter.codegen import long_rows  # noqa: E402
from tests.porter.test_codegen import _ref64  # noqa: E402
from tests.porter.test_codegen import assert_close  # noqa: E402
from tests.porter.test_codegen import rand  # noqa: E402
from tests.porter.test_codegen_long_rows import _inputs  # noqa: E402
from tests.porter.test_codegen_long_rows import cross_entropy  # noqa: E402
from tests.porter.test_codegen_long_rows import cross_entropy_rows  # noqa: E402
from tests.porter.test_codegen_long_rows import l1norm  # noqa: E402
from tests.porter.test_codegen_long_rows import l2norm  # noqa: E402
from tests.porter.test_codegen_long_rows import layernorm  # noqa: E402
from tests.porter.test_codegen_long_rows import log_softmax  # noqa: E402
from tests.porter.test_codegen_long_rows import rmsnorm  # noqa: E402
from tests.porter.test_codegen_long_rows import softmax  # noqa: E402

FP32, BF16 = torch.float32, torch.bfloat16
ONE_LAUNCH, TWO_PHASES = [0], [1, 2]  # the PHASE of each launch of the coop kernel


def _coop(block: int, cols: int, warps: int = 4, per_sm: int = 2) -> dict[str, Any]:
    return {"strategy": "split_coop", "ROWS": 1, "BLOCK_N": block,
            "SPLIT": -(-cols // block), "num_warps": warps, "num_stages": 1,
            "PROGRAMS_PER_SM": per_sm}


class _Recorded:
    """A kernel whose launches record their keyword arguments, then run."""

    def __init__(self, kernel: Any, launches: list[dict[str, Any]]) -> None:
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            self.launches.append(kwargs)
            return self.kernel[grid](*args, **kwargs)
        return launch


def _launch(fn, ex: tuple[Any, ...], name: str, cfg: dict[str, Any] | None, phases: list[int],
            launches: list[dict[str, Any]] | None = None) -> tuple[torch.Tensor, ...]:
    """The generated launcher's output into a NaN-poisoned `out`; asserts that it ran the coop
    kernel with these PHASEs (one launch, or the interpreter's two); `launches` gets each
    launch's keyword arguments."""
    op = generate(fn, ex, name=name)
    mod = load_generated_module(op.triton_module_source(), name, interpret=True)
    kname = next(k for k in vars(mod) if k.endswith("_split_coop_kernel"))
    ran: list[dict[str, Any]] = [] if launches is None else launches
    kernel = getattr(mod, kname)
    setattr(mod, kname, _Recorded(kernel, ran))
    try:
        out = tuple(torch.full(s, float("nan"), dtype=d) for s, d in op.output_spec(ex))
        got = mod.launch(*ex, out=out if len(out) > 1 else out[0], config=cfg)
    finally:
        setattr(mod, kname, kernel)
    assert [k["PHASE"] for k in ran] == phases
    return got if isinstance(got, tuple) else (got,)


@pytest.mark.parametrize("fn", [softmax, log_softmax, layernorm], ids=lambda f: f.__name__)
@pytest.mark.parametrize("cols", [20000, 50257])
def test_split_coop_matches_float64(fn, cols: int) -> None:
    # chunks of one 4096-column block: 5 (the last 3616 columns) and 13 (the last 1105)
    ex = _inputs(fn, 3, cols, FP32)
    got = _launch(fn, ex, f"coop_{fn.__name__}_{cols}", _coop(4096, cols), TWO_PHASES)
    assert_close(got, _ref64(fn, ex), FP32)


def test_launcher_with_no_config_splits_a_vocabulary_row_over_programs() -> None:
    # rows too wide for one block (40000 fp32): the launcher's unmeasured rule picks the
    # split_coop kernel (heuristics.rowwise_default, bench/NOTES.md item 58), 10 chunks a row
    ex = _inputs(softmax, 2, 40000, FP32)
    launches: list[dict[str, Any]] = []
    got = _launch(softmax, ex, "coop_default_40000", None, TWO_PHASES, launches)
    block, warps, _ = heuristics.coop_tile(4)
    assert launches[0]["BLOCK_N"] == block and launches[0]["num_warps"] == warps
    assert_close(got, _ref64(softmax, ex), FP32)


class _Refusing(_Recorded):
    """A kernel whose first `refusals` launches fail as the driver refuses a cooperative grid
    too large for the SMs (a kernel compiled at another width may fit fewer programs per SM)."""

    def __init__(self, kernel: Any, launches: list[dict[str, Any]], refusals: int,
                 message: str = "Triton Error [CUDA]: too many blocks in cooperative launch"
                 ) -> None:
        super().__init__(kernel, launches)
        self.refusals, self.message = refusals, message

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            if self.refusals:
                self.refusals -= 1
                raise RuntimeError(self.message)
            self.launches.append(kwargs)
            return self.kernel[grid](*args, **kwargs)
        return launch


def _refusing_module(name: str, ex: tuple[Any, ...]) -> tuple[Any, Any, str]:
    op = generate(softmax, ex, name=name)
    mod = load_generated_module(op.triton_module_source(), name, interpret=True)
    return op, mod, next(k for k in vars(mod) if k.endswith("_split_coop_kernel"))


def test_a_refused_cooperative_launch_runs_again_at_fewer_programs_per_sm() -> None:
    ex = _inputs(softmax, 3, 9000, FP32)
    op, mod, kname = _refusing_module("coop_refused", ex)
    kernel, launches = getattr(mod, kname), []
    cfg = _coop(4096, 9000, per_sm=4)
    setattr(mod, kname, _Refusing(kernel, launches, refusals=2))
    out = torch.full(op.output_spec(ex)[0][0], float("nan"))
    got = mod.launch(*ex, out=out, config=cfg)
    assert_close((got,), _ref64(softmax, ex), FP32)
    assert [k["PHASE"] for k in launches] == TWO_PHASES  # run once, after two refusals
    # the programs per SM the driver took are kept: the next call starts there
    assert list(mod._COOP_PER_SM.values()) == [1]
    setattr(mod, kname, _Refusing(kernel, launches := [], refusals=1))
    with pytest.raises(RuntimeError, match="cooperative launch"):  # at 1 per SM: the error
        mod.launch(*ex, out=out, config=cfg)


def test_other_launch_errors_are_not_retried() -> None:
    ex = _inputs(softmax, 3, 9000, FP32)
    op, mod, kname = _refusing_module("coop_other_error", ex)
    setattr(mod, kname, _Refusing(getattr(mod, kname), [], refusals=1,
                                  message="Triton Error [CUDA]: an illegal memory access"))
    with pytest.raises(RuntimeError, match="illegal memory access"):
        mod.launch(*ex, out=torch.empty(3, 9000), config=_coop(4096, 9000, per_sm=4))
    assert mod._COOP_PER_SM == {}


@pytest.mark.parametrize(("fn", "cols", "block"), [
    (softmax, 16384, 4096),  # EVEN: no lane masked
    (log_softmax, 20001, 8192),
    (layernorm, 16385, 16384),  # a one-column last chunk
])
def test_split_coop_bf16_odd_sizes(fn, cols: int, block: int) -> None:
    ex = _inputs(fn, 2, cols, BF16)
    got = _launch(fn, ex, f"coop_bf16_{fn.__name__}_{cols}", _coop(block, cols, 8), TWO_PHASES)
    assert_close(got, _ref64(fn, ex), BF16)


@pytest.mark.parametrize("fn", [softmax, log_softmax, layernorm, rmsnorm, l2norm, l1norm],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize(("cols", "block"), [(1537, 2048), (4097, 8192)])
def test_coop_kernel_itself_with_one_chunk_per_row(fn, cols: int, block: int) -> None:
    # one chunk a row: the interpreter runs the kernel as a GPU does (PHASE 0), its barrier
    # opening at once; 7 rows over the interpreter's 4 programs walk the row loop; the widths
    # are odd, so the chunk's last lanes are masked
    ex = _inputs(fn, 7, cols, FP32)
    got = _launch(fn, ex, f"coop_one_{fn.__name__}_{cols}", _coop(block, cols), ONE_LAUNCH)
    assert_close(got, _ref64(fn, ex), FP32)


@pytest.mark.parametrize("fn", [rmsnorm, l2norm, l1norm], ids=lambda f: f.__name__)
def test_split_coop_norms_over_several_chunks(fn) -> None:
    # a sum of squares, the robust 2-norm's (max |x|, scaled sum of squares) and a sum of
    # |x| over 5 chunks of 1024 columns, the last one column wide
    ex = _inputs(fn, 3, 4097, FP32)
    got = _launch(fn, ex, f"coop_norm_{fn.__name__}", _coop(1024, 4097), TWO_PHASES)
    assert_close(got, _ref64(fn, ex), FP32)


@pytest.mark.parametrize(("cols", "block", "inf_cols", "phases"), [
    (20000, 4096, 4096, TWO_PHASES),  # a chunk of -inf only: its max -inf, its sum 0
    (1537, 2048, 1024, ONE_LAUNCH),  # threads holding -inf only, beside others
])
def test_split_coop_softmax_of_rows_with_minus_inf(cols: int, block: int, inf_cols: int,
                                                   phases: list[int]) -> None:
    # and a row of -inf only (NaN, as torch)
    x = rand(3, cols)
    x[0, :inf_cols] = float("-inf")
    x[2] = float("-inf")
    got = _launch(softmax, (x,), f"coop_sm_inf_{cols}", _coop(block, cols), phases)
    assert_close(got, _ref64(softmax, (x,)), FP32)


@pytest.mark.parametrize(("cols", "block", "phases"), [(20000, 4096, TWO_PHASES),
                                                       (1537, 2048, ONE_LAUNCH)])
def test_split_coop_layernorm_keeps_a_far_mean_exact(cols: int, block: int,
                                                     phases: list[int]) -> None:
    # each chunk shifts its sums by its first element; an outlier there (1e4 off) takes the
    # exact M2 from registers, and a constant row comes out exactly 0 (its mean exact)
    x = rand(3, cols)
    x[0, ::block] = 1e4
    x[1] = 3.25
    w, b = torch.ones(cols), torch.zeros(cols)
    got = _launch(layernorm, (x, w, b), f"coop_ln_far_{cols}", _coop(block, cols), phases)
    assert_close(got, _ref64(layernorm, (x, w, b)), FP32)
    assert torch.equal(got[0][1], torch.zeros(cols))


@pytest.mark.parametrize(("block", "phases"), [(128, ONE_LAUNCH), (32, TWO_PHASES)])
def test_split_coop_layernorm_over_three_trailing_dims(block: int, phases: list[int]) -> None:
    # rows of 3 x 5 x 7 = 105 elements split back into their dims: one chunk of 128 columns,
    # or 4 of 32
    from tests.porter.test_codegen_long_rows import layernorm3

    x = rand(3, 3, 5, 7)
    w, b = rand(3, 5, 7, seed=1), rand(3, 5, 7, seed=2)
    cfg = _coop(block, 105, warps=1)
    got = _launch(layernorm3, (x, w, b), f"coop_ln3_{block}", cfg, phases)
    assert_close(got, _ref64(layernorm3, (x, w, b)), FP32)


def test_launcher_passes_a_register_cap() -> None:
    # maxnreg: PROGRAMS_PER_SM programs of a kernel the compiler gives more registers may fit
    # an SM under a cap (sm_90 cross-compile, softmax 151,936 fp32 at 16384 x 8 warps: 142
    # registers, one program per SM; under 128, 119 and no spills, two)
    ex = _inputs(softmax, 3, 5000, FP32)
    launches: list[dict[str, Any]] = []
    cfg = {**_coop(1024, 5000), "maxnreg": 128}
    got = _launch(softmax, ex, "coop_maxnreg", cfg, TWO_PHASES, launches)
    assert [k["maxnreg"] for k in launches] == [128, 128]
    assert_close(got, _ref64(softmax, ex), FP32)


def test_a_config_made_for_another_width_runs_one_block_a_chunk() -> None:
    # the judge checks a candidate at other shapes than its bucket's, and a bucket's config
    # runs at nearby widths: the chunks follow the width (5 of 1024 at 4097 columns), not the
    # config's SPLIT (the count at the width it was made for; a strict SPLIT failed every
    # split_coop candidate of the GPU ports, bench/NOTES.md item 58)
    ex = _inputs(softmax, 2, 4097, FP32)
    launches: list[dict[str, Any]] = []
    got = _launch(softmax, ex, "coop_other_width", {**_coop(1024, 4097), "SPLIT": 2},
                  TWO_PHASES, launches)
    assert launches[0]["SPLIT"] == 8  # the row's 5 partials in one load
    assert_close(got, _ref64(softmax, ex), FP32)


@pytest.mark.parametrize("fn", [softmax, log_softmax, layernorm], ids=lambda f: f.__name__)
def test_apply_part_loads_none_of_the_rows_inputs(fn) -> None:
    # after the barrier the chunk's values come from registers: the row's input (in0) is
    # loaded before it only, once at the chunk's columns (layernorm: and once at its first
    # column, the shift of its sums); layernorm's weight and bias load after it
    op = generate(fn, _inputs(fn, 2, 64, FP32), name=f"coop_src_{fn.__name__}")
    src = op.triton_module_source()
    body = src.split("_split_coop_kernel(")[1].split("\n\n\n")[0]
    partials, apply = body.split("if PHASE != 1:")
    assert "in0_ptr +" not in apply
    assert len(re.findall(r"tl\.load\(in0_ptr \+ .*\bcols\b", partials)) == 1
    if fn is layernorm:
        assert "tl.load(in1_ptr" in apply and "tl.load(in2_ptr" in apply


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
    assert any((c["BLOCK_N"], c["num_warps"], c["PROGRAMS_PER_SM"]) == heuristics.coop_tile(4)
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
    assert ref.constexprs["PHASE"] == 0  # the GPU's one launch, barrier and all
    assert ref.signature["cnt_ptr"] == "*i32" and ref.signature["ws_ptr"] == "*fp32"
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
    if fn is not layernorm:
        # the chunk loaded once: each thread's plain global loads (not the workspace's .cg
        # ones nor the counter's) bring BLOCK_N / threads elements, no more
        loaded = sum(int(v or 1) * int(bits) // 8 for v, bits in re.findall(
            r"ld\.global(?:\.L1::\w+|\.L2::\w+)*(?:\.v(\d))?\.[bfu](\d+)\b", ptx))
        assert loaded == block // (32 * warps) * dtype.itemsize, loaded


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
