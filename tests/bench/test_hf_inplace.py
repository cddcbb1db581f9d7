"""bench/hf_inplace.py: one line and exit 2 without a GPU; a CPU dry run goes end to end (port,
patch, prefill, decode in turn) and its SUMMARY.md is made from the rows it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("transformers")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_gpu_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.hf_inplace import main

    assert main(["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "GPU" in err and "--device cpu" in err


def test_cpu_dry_run_writes_rows_and_its_summary(tmp_path: Path) -> None:
    """Llama at toy size, its top group ported for h200 under the interpreter (~60 s on 2
    cores); the times mean nothing, the rows and the summary's arithmetic do."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    out = tmp_path / "out"
    run = [sys.executable, "-m", "bench.hf_inplace", "--device", "cpu", "--hw", "h200",
           "--size", "toy", "--archs", "llama", "--top", "1", "--max-variants", "1",
           "--reps", "1", "--kv", "8", "--new", "3", "--batches", "1", "--rounds", "1",
           "--packs", str(tmp_path / "packs"), "--out", str(out)]
    res = subprocess.run(run, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    rows = [json.loads(x) for x in (out / "rows.jsonl").read_text().splitlines()]
    kinds = [r["kind"] for r in rows]
    assert "error" not in kinds, rows
    prefill = next(r for r in rows if r["kind"] == "prefill")
    status = {x["pack"]: x["status"] for x in prefill["replaced"]}
    assert sorted(status.values()) == ["no pack", "replaced"], status  # the top one was ported
    decode = next(r for r in rows if r["kind"] == "decode")
    # the unpatched turn really ran the model's own forwards, the patched one ours (5 norms, 2 MLPs
    # minus the group not ported: 5 or 7)
    turns = decode["patched_modules_in_turn"]
    assert turns["unpatched"] == 0 and turns["patched"] >= 5, turns
    assert decode["greedy_token_agreement"] == 1.0

    res = subprocess.run([*run, "--summarize"], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    summary = (out / "SUMMARY.md").read_text()
    t = prefill["ms"]
    assert f"| llama | {t['eager']:.2f} | {t['compile']:.2f} | {t['patched']:.2f} |" in summary
    assert f"{t['eager'] / t['patched']:.3f}x" in summary
    assert f"| llama | eager | 1 | 8 | {decode['unpatched_ms_per_token']:.2f} |" in summary
