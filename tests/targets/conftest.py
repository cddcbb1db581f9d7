"""Shared fixtures for the targets tests: loaded kernels and cached cross-compiles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import hwmodels
import targets
from targets import LaunchConfig

ROOT = Path(__file__).resolve().parents[2]
RMSNORM = ROOT / "examples" / "rmsnorm" / "kernel.py"
SMEM_STRESS = ROOT / "examples" / "smem_stress" / "kernel.py"

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


@pytest.fixture(scope="session")
def rmsnorm_fn():
    return targets.load_kernel(RMSNORM, "_rmsnorm_fwd_kernel")


@pytest.fixture(scope="session")
def rmsnorm_ref(rmsnorm_fn):
    return targets.kernel_ref_for(rmsnorm_fn, constexprs={"BLOCK_N": 4096})


_REPORTS: dict[str, targets.CompileReport] = {}


@pytest.fixture(scope="session")
def rmsnorm_report(rmsnorm_ref):
    """Compile the RMSNorm example once per device (num_warps=8) and reuse the report."""

    def get(device: str) -> targets.CompileReport:
        if device not in _REPORTS:
            hw = hwmodels.get(device)
            _REPORTS[device] = targets.for_device(hw).compile(
                rmsnorm_ref, LaunchConfig(num_warps=8), hw
            )
        return _REPORTS[device]

    return get
