"""bench/matmul_knobs.py on a CPU: it says it needs a GPU, its configs are the knobs it names,
and a small case runs end to end under the interpreter with a stand-in for the GPU timing (so
that the lead's device time is not spent on a script error)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch

import hwmodels
from bench import matmul_knobs as mk
from harness.timing import TimingUnavailable
from tests.bench.fake_timing import fake_compare


def test_without_a_gpu_it_says_so(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        return  # covered by the run itself
    with pytest.raises(TimingUnavailable):
        mk.main(["--out", str(tmp_path), "--cases", "kb6"])


def test_the_cases_and_their_configs() -> None:
    cases = {c.name: c for c in mk._cases()}
    assert (cases["kb6"].m, cases["kb6"].k, cases["kb6"].n) == (256, 524288, 256)
    assert (cases["kb8"].m, cases["kb8"].k, cases["kb8"].n) == (8205, 2949, 5921)
    assert (cases["kb9"].m, cases["kb9"].k, cases["kb9"].n) == (32768, 32, 32768)
    default = {"strategy": "tiled", "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8,
               "num_warps": 4, "num_stages": 3, "ieee": False, "tf32x3": True}
    kb6 = mk.configs(cases["kb6"], default)
    assert {"default", "swap", "noswap_kmajor", "noswap_nocopy", "pad", "nopad", "split1",
            "split16", "128x128_split66", "even_k"} <= set(kb6)
    kb9 = mk.configs(cases["kb9"], default)
    assert kb9["256x128_w8_ieee"]["ieee"] and not kb9["128x256_w8_x3"]["ieee"]
    assert "even_k" not in mk.configs(cases["kb8"], default)  # K = 2949: not whole blocks
    # no two labels run the same config
    assert len({repr(sorted(c.items())) for c in kb9.values()}) == len(kb9)


def test_a_small_case_runs_end_to_end_on_the_cpu(monkeypatch) -> None:
    import harness.timing

    monkeypatch.setattr(harness.timing, "compare", fake_compare)
    monkeypatch.setattr(mk, "configs", lambda case, d: {
        "default": d, "swap": {**d, "SWAP_AB": True}, "pad": {**d, "PAD_K": True},
        "split3": {**d, "SPLIT_K": 3}, "bad": {**d, "BLOCK_M": 3}})
    rows = mk.run_case(mk.Case("small", 40, 601, 24), hwmodels.get("h100"),
                       argparse.Namespace(reps=1), device="cpu", interpret=True)
    errors = {r["provider"] for r in rows if "error" in r}
    assert errors == {"bad"}, rows  # a tile Triton rejects is listed, not timed
    final = {r["provider"]: r for r in rows if r.get("final")}
    assert set(final) == {"default", "swap", "pad", "split3", "eager"}
    assert final["split3"]["resolved"]["splits"] == 3 and final["pad"]["resolved"]["K"] == 608
    assert all(r["x_tol"] <= 1 for n, r in final.items() if n != "eager")
    mk.print_table(rows)
