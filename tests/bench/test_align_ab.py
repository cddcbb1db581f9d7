"""bench/align_ab.py on a CPU: it says it needs a GPU, its align1 module really launches with
ALIGN 1, and one case runs end to end under the interpreter with a stand-in for the GPU timing
(so that the lead's device time is not spent on a script error)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

import hwmodels
from bench import align_ab as ab
from harness.timing import TimingUnavailable
from tests.bench.fake_timing import fake_compare


def test_without_a_gpu_it_says_so(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        return  # covered by the run itself
    with pytest.raises(TimingUnavailable):
        ab.main(["--out", str(tmp_path), "--cases", "rmsnorm_10000x3000_bf16"])


def test_the_cases_hold_issue_31s_width_and_controls() -> None:
    names = {c.name: c for c in ab._cases()}
    assert names["layernorm_10000x3000_bf16"].shape == (10000, 3000)
    sliced = names["softmax_10000x3000_of_3008_bf16"].inputs("cpu")[0]
    assert sliced.shape == (10000, 3000) and sliced.stride() == (3008, 1)
    assert {"rmsnorm_10000x4096_bf16", "rmsnorm_4097x1537_bf16",
            "rms36_16x64x3000_bf16"} <= set(names)


def test_one_case_runs_end_to_end_on_the_cpu(monkeypatch) -> None:
    import harness.timing

    monkeypatch.setattr(harness.timing, "compare", fake_compare)
    case = ab.Case("rms_small", ab.rmsnorm, (8, 1000), torch.bfloat16, 1, 1008)
    mod, mod1 = ab.modules(case, interpret=True)
    seen = []
    for m in (mod, mod1):
        # what each launcher passes its kernel as ALIGN: 8 (1000 and 1008 are multiples of
        # 8), and 1 from the copy
        align = m.rowwise_align
        m.rowwise_align = lambda n, s, cap=16, align=align: seen.append(align(n, s)) or seen[-1]
        m.launch(*case.inputs("cpu"))
    assert seen == [8, 1]
    rows = ab.run_case(case, hwmodels.get("h100"), argparse.Namespace(reps=1), device="cpu",
                       interpret=True)
    assert not [r for r in rows if "error" in r], rows
    assert {r["provider"] for r in rows if r.get("final")} == {"align", "align1", "eager", "copy"}
    ab.print_table(rows)
