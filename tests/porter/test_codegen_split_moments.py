"""The split kernels' moments combine (`split_row._combine_moments`, used by split_row's apply
kernel and split_coop): the row's mean and M2 from its chunks' (mean, M2) records, reduced to
scalars (the split kernels take one row a program).

As [ROWS, 1] tensors, Triton 3.6 (the H100 runs') compiled the combine in the [1, 1] tensors'
layout, every thread loading all SPLIT records: instance norm over 112 x 64 x 512 x 512 fp32 at
split_coop 4096 x 4 warps took 243 registers (2 programs an SM; 45 ms against the looped
kernel's 7.7 ms) and split_row's apply kernel 90. Here: instance norm (two normalised dims, no
weights) through both families under the interpreter against float64, and the split_coop kernel
cross-compiled for sm_90 at the H100's config.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import re  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hwmodels  # noqa: E402
from porter.codegen import generate  # noqa: E402
from porter.codegen import load_generated_module  # noqa: E402
from tests.porter.test_codegen import _ref64  # noqa: E402
from tests.porter.test_codegen import assert_close  # noqa: E402

FP32 = torch.float32


def instance_norm(x):
    return F.instance_norm(x, eps=1e-5)  # KernelBench 34: rows of H x W


def _x(shape: tuple[int, ...], offset: float) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(shape, generator=gen, dtype=FP32) * 3 + offset


@pytest.mark.parametrize("cfg", [
    # 24 x 20 = 480 columns: 4 chunks of 128, the last of 96
    {"strategy": "split_coop", "ROWS": 1, "BLOCK_N": 128, "SPLIT": 4, "num_warps": 4,
     "num_stages": 1, "PROGRAMS_PER_SM": 2},
    {"strategy": "split_row", "ROWS": 1, "BLOCK_N": 64, "SPLIT": 4, "num_warps": 2},
], ids=["split_coop", "split_row"])
@pytest.mark.parametrize("offset", [0.0, 1000.0])  # a far mean: the combine's shift matters
def test_instance_norm_through_the_split_kernels(cfg: dict[str, Any], offset: float) -> None:
    ex = (_x((2, 3, 24, 20), offset),)
    name = f"moments_{cfg['strategy']}"
    op = generate(instance_norm, (_x((2, 3, 4, 8), 0.0),), name=name)
    mod = load_generated_module(op.triton_module_source(), name, interpret=True)
    got = mod.launch(*ex, config=cfg)
    assert_close((got,), _ref64(instance_norm, ex), FP32)


def test_split_coop_instance_norm_fits_four_programs_an_sm(tmp_path: Path) -> None:
    # the H100's config (bench/long_rows.py case in_112x64x512x512_fp32): 64 chunks a row
    targets = pytest.importorskip("targets")
    from targets.base import LaunchConfig

    hw = hwmodels.get("h100")
    op = generate(instance_norm, (_x((2, 3, 4, 8), 0.0),), name="moments_xc")
    path = tmp_path / "mod.py"
    path.write_text(op.triton_module_source())
    big = (torch.empty((112, 64, 512, 512), dtype=FP32),)
    (cfg,) = [c for c in op.variant_space(hw, big, FP32) if c["strategy"] == "split_coop"
              and (c["BLOCK_N"], c["num_warps"], c["PROGRAMS_PER_SM"]) == (4096, 4, 4)]
    (ref,) = op.kernel_refs(big, cfg, source_path=str(path))
    assert ref.constexprs["SPLIT"] == 64
    rep = targets.for_device(hw).compile(ref, LaunchConfig(4, 1), hw)
    assert rep.fits, rep.reasons
    assert rep.resources.spill_bytes == 0, rep.resources
    # 4 programs of 128 threads an SM: 128 registers a thread at most (65536 an SM)
    assert rep.resources.registers_per_thread <= 128, rep.resources
    # no thread loads every chunk's record (2 x 64 of them)
    records = len(re.findall(r"ld\.global\.cg\.", rep.artifacts["ptx"]))
    assert records < 64, records
