"""bench/probe_gluon_rows.py: its Gluon kernels build for sm_90 on a CPU machine.

Gluon kernels (explicit shared memory, TMA, mbarriers) have no CPU interpreter: their results are
checked against float64 on the GPU, by the probe itself, before any is timed. Here each variant
is cross-compiled and read back: it copies rows with TMA, fits one SM with its `per_sm`
neighbours, does not spill, and keeps the row out of registers; the warp-specialized softmax
has its loader warpgroup and fits one SM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import probe_gluon_rows
from targets.triton_cuda import cuobjdump_path

REPO = Path(__file__).resolve().parents[2]
CASES = "layernorm:4096x32768:bf16,softmax:4096x32768:bf16"
LIMIT = 16  # every layernorm variant, the softmax's first 16 (both E_SMEM forms): ~15 s


def _report(*args: str) -> list[dict]:
    # a process of its own: the test session imports Triton for its interpreter
    # (TRITON_INTERPRET=1), and Gluon's jit functions are bound to it at import
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    cmd = [sys.executable, "bench/probe_gluon_rows.py", "--report", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def report() -> list[dict]:
    return _report("--cases", CASES, "--limit", str(LIMIT))


@pytest.mark.skipif(cuobjdump_path() is None, reason="no cuobjdump to read the cubin")
def test_every_variant_builds_with_tma_and_fits_its_sm(report: list[dict]) -> None:
    ops = [case.split(":")[0] for case in CASES.split(",")]
    assert len(report) == sum(len(probe_gluon_rows.variants(op)[:LIMIT]) for op in ops)
    for row in report:
        cfg = row["config"]
        assert row["tma_copies"] >= 1, row
        assert row["STACK"] == 0 and row["LOCAL"] == 0, row  # no spills
        # per_sm programs share one SM: 64K registers and 228 KB of shared memory
        assert row["REG"] * 32 * row["warps"] * cfg["per_sm"] <= 65536, row
        assert row["shared_bytes"] * cfg["per_sm"] <= 228 * 1024, row


@pytest.mark.skipif(cuobjdump_path() is None, reason="no cuobjdump to read the cubin")
def test_the_passes_reread_shared_memory_not_a_row_in_registers(report: list[dict]) -> None:
    # a 32768-wide fp32 row over 8 warps would take 128 registers a thread
    for row in report:
        cfg = row["config"]
        if cfg["num_warps"] == 8 and cfg["CH"] == 16 and cfg["STAGES"] == 1:
            assert row["REG"] <= 64, row
            assert 64 * 1024 <= row["shared_bytes"] <= 66 * 1024, row  # one row and a barrier


def test_rows_that_are_not_whole_chunks_are_refused() -> None:
    cfg = probe_gluon_rows.SMEM[0]
    with pytest.raises(ValueError, match="not whole"):
        probe_gluon_rows._kernel_args("softmax", (torch.empty(4, 1000, dtype=torch.bfloat16),),
                                      cfg)
    with pytest.raises(ValueError, match="not whole"):  # a 32-bit row is not a 16-bit TMA box
        probe_gluon_rows._kernel_args("softmax", (torch.empty(4, 4096),), cfg)


@pytest.fixture(scope="module")
def ws_report() -> list[dict]:
    return _report("--cases", "softmax:4096x32768:bf16", "--families", "ws")


@pytest.mark.skipif(cuobjdump_path() is None, reason="no cuobjdump to read the cubin")
def test_the_warp_specialized_softmax_has_a_loader_warpgroup_and_fits(ws_report: list[dict]
                                                                      ) -> None:
    assert len(ws_report) == len(probe_gluon_rows.WS)
    for row in ws_report:
        cfg = row["config"]
        assert row["tma_copies"] == 1, row  # one box per row, from the loader
        assert row["STACK"] == 0 and row["LOCAL"] == 0, row
        # the loader runs in a warpgroup of its own (setmaxnreg works per warpgroup), which
        # gives its registers to the row's warps
        assert row["warps"] == cfg["num_warps"] + 4 and row["setmaxnreg"] > 0, row
        assert row["REG"] * 32 * row["warps"] <= 65536, row
        assert row["shared_bytes"] >= cfg["STAGES"] * 64 * 1024, row
