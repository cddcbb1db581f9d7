"""bench/model_e2e.py: one line and exit 2 without a GPU; the CPU dry run writes its report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_gpu_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.model_e2e import main

    assert main([]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "GPU" in err and "--dry-run" in err


def test_dry_run_ports_patches_and_reports(tmp_path: Path) -> None:
    """Toy sizes on the CPU, the top group only (~25 s on 2 cores)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    res = subprocess.run([sys.executable, "-m", "bench.model_e2e", "--dry-run", "--top", "1",
                          "--out-dir", str(tmp_path), "--work-dir", str(tmp_path / "w")],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    report = (tmp_path / "h100-model-e2e-dry-run.md").read_text()
    assert "Dry run on a CPU" in report and "matches the unpatched one" in report
    assert "replaced  add_rmsnorm_" in report and "Predicted end to end" in report


def test_report_puts_the_prediction_beside_the_measurement() -> None:
    import argparse

    import hwmodels
    from bench.model_e2e import _report
    from porter.patching import PatchResult
    from porter.patching import Replacement

    prof = {"device": "NVIDIA H100 80GB HBM3", "inputs": [{"shape": [4, 2048, 4096],
                                                           "dtype": "bfloat16"}],
            "basis": "measured", "not_portable": [],
            "groups": [{"pack_name": "add_rmsnorm_x", "instances": [{}] * 4, "share": 0.2,
                        "speedup": 2.0, "gain": 1 / 0.9, "ours_label": "projected"}]}
    rep = Replacement("add_rmsnorm_x", "add_rmsnorm", 4, "replaced", "1.20x faster ...")
    timings = {"whole": {"eager": 10.0, "compile": 9.0, "ours": 9.2, "ours+compile": 8.9},
               "whole_spread": {"eager": (9.9, 10.1)},
               "regions": [{"pack_name": "add_rmsnorm_x", "status": "replaced", "places": 4,
                            "share": 0.2, "s_pred": 2.0, "s_label": "projected",
                            "ms": {"eager": 0.5, "compile": 0.3, "ours": 0.25}}]}
    args = argparse.Namespace(dry_run=False)
    text = _report(prof, PatchResult(torch.nn.Identity(), [rep]), timings, hwmodels.get("h100"),
                   "realistic", Path("p"), args)
    assert "predicted (Amdahl, profile's f and estimated s): **1.111x**" in text
    assert "measured: **1.087x** over eager (-2.2% vs the prediction)" in text
    assert "Amdahl with the measured region speedups: 1.111x" in text
    assert "1.011x (not slower" in text
    assert "| add_rmsnorm_x | replaced | 4 | 0.5000 | 0.3000 | 0.2500 | 2.00x |" in text
