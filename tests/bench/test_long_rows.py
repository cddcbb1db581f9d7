"""bench/long_rows.py on a CPU: it says it needs a GPU, its cases are issue 31's shapes, and
one case runs end to end under the interpreter with a stand-in for the GPU timing (so that the
lead's device time is not spent on a script error)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import hwmodels
from bench import long_rows as lr
from harness.timing import TimingUnavailable
from tests.bench.fake_timing import fake_compare


def test_without_a_gpu_it_says_so(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        return  # covered by the run itself
    with pytest.raises(TimingUnavailable):
        lr.main(["--out", str(tmp_path), "--cases", "rmsnorm_16x4194304_fp32"])


def test_the_cases_are_the_issues_shapes() -> None:
    names = {c.name: c for c in lr._cases()}
    assert names["ln3_16x64x256x256_fp32"].shape == (16, 64, 256, 256)
    assert names["softmax_4096x393216_fp32"].dtype == torch.float32
    assert {"softmax_4096x50257_bf16", "log_softmax_4096x151936_fp32",
            "rmsnorm_16x4194304_fp32"} <= set(names)
    # KernelBench 38/39's rows: 65,535 fp32, not 16-byte aligned (bench/NOTES.md item 62)
    l1 = names["l1_norm_32768x65535_fp32"]
    x = torch.rand(4, 7) + 0.5
    assert torch.allclose(l1.fn(x), x / x.abs().mean(dim=1, keepdim=True))
    assert names["l2_norm_32768x65535_fp32"].shape == (32768, 65535)


def test_one_case_runs_end_to_end_on_the_cpu(monkeypatch) -> None:
    import harness.timing

    monkeypatch.setattr(harness.timing, "compare", fake_compare)
    # a 2-row layernorm over 3 dims, on an H100 of 4 SMs (splits of 4 to 16 chunks: few
    # programs for the interpreter)
    h100 = hwmodels.get("h100")
    small = replace(h100, compute_units=replace(h100.compute_units, value=4))
    case = lr.Case("ln3_small", lr.layernorm3, (2, 2, 4, 2048), torch.float32, 2, 3)
    args = argparse.Namespace(per_family=1, per_new=1, screen_reps=1, reps=1, no_compile=True)
    rows = lr.run_case(case, small, args, device="cpu", interpret=True)
    tried = {r["provider"].split("#")[0] for r in rows if "max_rel_err" in r}
    assert {"split_row", "looped"} <= tried, rows
    assert not [r for r in rows if "error" in r], rows
    final = {r["provider"] for r in rows if r.get("final")}
    assert {"split_row", "eager"} <= final
    lr.print_table(rows)


def test_a_vocabulary_softmax_case_times_every_split_coop_config(monkeypatch) -> None:
    import harness.timing

    monkeypatch.setattr(harness.timing, "compare", fake_compare)
    # 2 rows of 16384 on an H100 of 4 SMs: every split_coop config is tried (chunks of 4096,
    # 8192 or 16384 columns; 4, 2 or 1 per row), under the interpreter in two launches of the
    # coop kernel (partials, then apply) or, with one chunk, in its one launch
    h100 = hwmodels.get("h100")
    small = replace(h100, compute_units=replace(h100.compute_units, value=4))
    case = lr.Case("softmax_small", lr.softmax, (2, 16384), torch.float32)
    args = argparse.Namespace(per_family=1, per_new=1, screen_reps=1, reps=1, no_compile=True)
    rows = lr.run_case(case, small, args, device="cpu", interpret=True)
    assert not [r for r in rows if "error" in r], rows
    coop = [r for r in rows if r.get("provider", "").startswith("split_coop#")
            and "max_rel_err" in r]
    space = generate_space(case, small)
    assert len(coop) == len([c for c in space if c["strategy"] == "split_coop"]) > 1
    assert "split_coop" in {r["provider"] for r in rows if r.get("final")}


def generate_space(case: lr.Case, hw) -> list[dict]:
    from porter.codegen import generate

    op = generate(case.fn, case.small(), name="lr_space")
    inputs = case.inputs(torch.device("cpu"))
    return op.variant_space(hw, inputs, case.dtype)


def test_cases_on_the_command_line_are_picked_by_name_and_an_unknown_one_stops_the_run() -> None:
    from bench.configs import select_cases

    cases = lr._cases()
    assert select_cases(cases, "", "long_rows") == cases
    picked = select_cases(cases, "rmsnorm_16x4194304_fp32,softmax_4096x50257_fp32", "long_rows")
    assert [c.name for c in picked] == ["softmax_4096x50257_fp32", "rmsnorm_16x4194304_fp32"]
    with pytest.raises(SystemExit, match="long_rows: unknown case.*'nope'.*known: ln3_"):
        select_cases(cases, "nope", "long_rows")
