"""bench.matmul_rowwise: the screen's shortlists (CPU), a file no template covers, and the run
end to end on a GPU (marker gpu)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import hwmodels
from bench import matmul_rowwise as mr
from porter.codegen import generate
from porter.codegen import matmul_rowwise

GELU_SOFTMAX = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """Linear, GELU, softmax."""
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.softmax(torch.nn.functional.gelu(self.linear(x)), dim=1)

batch_size = 96
in_features = 128
out_features = 200

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
'''

CONV = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """A convolution."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return self.conv(x)

batch_size = 16
size = 32

def get_inputs():
    return [torch.rand(batch_size, 3, size, size)]

def get_init_inputs():
    return []
'''


def two_linears(x, w, b, w2, b2):
    return torch.logsumexp(F.linear(torch.sigmoid(F.linear(x, w, b)), w2, b2), dim=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_shortlists_vary_one_stage_each(dtype: torch.dtype) -> None:
    small = (torch.randn(8, 16), torch.randn(24, 16), torch.randn(24), torch.randn(12, 24),
             torch.randn(12))
    op = generate(two_linears, tuple(t.to(dtype) for t in small), name="bench_mr")
    real = (torch.empty(4096, 2048, dtype=dtype, device="meta"),
            torch.empty(4096, 2048, dtype=dtype, device="meta"),
            torch.empty(4096, dtype=dtype, device="meta"),
            torch.empty(1024, 4096, dtype=dtype, device="meta"),
            torch.empty(1024, dtype=dtype, device="meta"))
    hw = hwmodels.get("h100")
    default = op.default_config(hw, real, dtype)
    space = op.variant_space(hw, real, dtype)
    assert op.prefixes == ("", "mm2_", "row_")
    for stage in range(3):
        picked = mr.shortlist(space, default, op.prefixes, stage, 5)
        assert picked[0] == default and 1 < len(picked) <= 5
        assert all(c in space for c in picked)
        for c in picked:
            parts = matmul_rowwise.split_config(c, op.prefixes)
            base = matmul_rowwise.split_config(default, op.prefixes)
            assert all(p == b for i, (p, b) in enumerate(zip(parts, base, strict=True))
                       if i != stage)
        if stage < 2:  # matmul tiles: one per tile shape, none that would spill
            tiles = [(c.get(op.prefixes[stage] + "BLOCK_M"), c.get(op.prefixes[stage] + "BLOCK_N"),
                      c.get(op.prefixes[stage] + "BLOCK_K"),
                      c.get(op.prefixes[stage] + "strategy")) for c in picked]
            assert len(set(tiles)) == len(tiles)


def test_a_file_no_template_covers_is_a_row_saying_why(tmp_path: Path) -> None:
    path = tmp_path / "1_conv.py"
    path.write_text(CONV)
    args = argparse.Namespace(mm_configs=2, row_configs=2, reps=3)
    row = mr.run_file(path, "fp32", args, hwmodels.get("h100"))
    assert row["verdict"].startswith("not covered:") and "convolution" in row["verdict"]


@pytest.mark.gpu
@pytest.mark.slow
def test_end_to_end_on_the_gpu(tmp_path: Path) -> None:
    kb = tmp_path / "level2"
    kb.mkdir()
    (kb / "99_small.py").write_text(GELU_SOFTMAX)
    out = tmp_path / "out"
    assert mr.main([str(kb), "--out", str(out), "--files", "99_small.py", "--mm-configs", "2",
                    "--row-configs", "2", "--reps", "5"]) == 0
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    assert row["verdict"] == "timed", row
    assert {"porter default", "eager", "compile"} <= set(row["ms"])
    assert all(row["errors"][k] < float("inf") for k in row["ms"] if k.startswith("porter"))
