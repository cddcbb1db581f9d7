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
