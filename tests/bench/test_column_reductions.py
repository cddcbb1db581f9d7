"""bench/column_reductions.py on a CPU: it says it needs a GPU, and its pieces (the row
kernel's config it compares with, the bytes it counts) are the ones it claims."""

from __future__ import annotations

from pathlib import Path

import torch

import hwmodels
from bench import column_reductions as cr
from porter.codegen import generate
from tests.bench.fake_timing import fake_compare


def test_without_a_gpu_it_says_so(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        return  # covered by the run itself
    assert cr.main(["--out", str(tmp_path)]) == 2


def test_the_row_kernel_is_the_launchers_old_choice_and_bytes_are_ideal() -> None:
    case = cr.CASES[0]
    assert case.shape == (112, 64, 512, 512)
    assert case.bytes_moved() == 2 * 112 * 64 * 512 * 512 * 4
    assert cr.CASES[1].bytes_moved() == (128 * 4096 * 1024 + 128 * 1024) * 4
    op = generate(case.fn, case.small(), name="cr_rms")
    real = (torch.empty(case.shape, device="meta"),)
    rows = cr.row_kernel_config(op, hwmodels.get("h100"), real)
    assert rows["strategy"] == "single_pass" and rows["BLOCK_N"] == 64 and rows["ROWS"] > 1
    # since the H100 run, a reduced dim of 64 steps keeps this row kernel as the default
    # (heuristics.columns_default); the wider ones take the column kernel
    assert op.default_config(hwmodels.get("h100"), real) == {**rows, "dtype": "fp32"}
    wide = generate(cr.CASES[1].fn, cr.CASES[1].small(), name="cr_sum")
    real_wide = (torch.empty(cr.CASES[1].shape, device="meta"),)
    assert wide.default_config(hwmodels.get("h100"), real_wide)["strategy"] == "columns"


def test_one_case_runs_end_to_end_on_the_cpu(monkeypatch) -> None:
    # so that the lead's device time is not spent on a script error
    import argparse

    import harness.timing

    monkeypatch.setattr(harness.timing, "compare", fake_compare)
    case = cr.Case("rms_small", cr.rmsnorm_channels, (3, 8, 4, 128), torch.float32, True)
    args = argparse.Namespace(columns=2, top=2, screen_reps=1, reps=1, no_compile=True)
    rows = cr.run_case(case, hwmodels.get("h100"), args, device="cpu", interpret=True)
    assert not [r for r in rows if "error" in r], rows
    tried = {r["provider"] for r in rows if "max_rel_err" in r}
    assert "rows" in tried and "columns#0" in tried and len(tried) >= 3
    final = {r["provider"] for r in rows if r.get("final")}
    assert {"columns#0", "rows", "eager"} <= final
    cr.print_table(rows)
