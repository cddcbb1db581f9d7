"""bench/port_budget.py's arithmetic and its refusal without a GPU.

The ports themselves need one.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.port_budget import compare
from bench.port_budget import example_ops
from bench.port_budget import main
from bench.port_budget import summarize


def _port(times: dict[str, tuple[float, int]], wall: float) -> dict:
    return {"finished": True, "wall_s": wall, "judged": 10,
            "kept": {k: {"config": {"w": w}, "time_ms": t} for k, (t, w) in times.items()}}


def test_compare_gives_worst_and_geomean_over_common_buckets() -> None:
    default = _port({"a/bf16": (1.02, 1), "b/bf16": (2.0, 2), "c/bf16": (5.0, 3)}, 90)
    full = _port({"a/bf16": (1.0, 1), "b/bf16": (2.0, 4)}, 900)  # no "c": not compared
    got = compare(default, full)
    assert got["buckets"] == 2 and got["same_config"] == 1
    assert got["worst"] == pytest.approx(1.02)
    assert got["geomean"] == pytest.approx(math.sqrt(1.02))
    assert compare(default, None) == {} and compare(default, {"finished": False}) == {}
    table = summarize([{"op": "rmsnorm", "units": 3, "default": default, "exhaustive": full,
                        "compare": got}],
                      {"device": "H100", "hw_model": "h100", "date": "today",
                       "versions": {"torch": "2.11", "triton": "3.6"}, "budget": "budget: 8"})
    row = next(ln for ln in table.splitlines() if ln.startswith("| rmsnorm"))
    assert "1.020" in row and "1/2" in row and "torch 2.11, triton 3.6" in table


def test_every_example_op_is_offered() -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    assert example_ops() == sorted(p.parent.name for p in examples.glob("*/spec.py"))
    assert "rmsnorm" in example_ops() and "matmul_bias_gelu" in example_ops()


def test_refuses_bad_input_and_a_machine_without_gpu_in_one_line(tmp_path: Path, capsys) -> None:
    import torch

    assert main(["--out", str(tmp_path / "o"), "--ops", "nosuch"]) == 2
    assert "unknown op(s) or dtype(s) nosuch" in capsys.readouterr().err
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the benchmark would run")
    assert main(["--out", str(tmp_path / "o"), "--ops", "rmsnorm"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "times ports on a GPU" in err[0]


def test_summary_only_rebuilds_the_table_from_rows(tmp_path: Path, capsys) -> None:
    import json

    default = _port({"a/bf16": (1.0, 1)}, 9)
    row = {"op": "softmax", "units": 1, "default": default, "exhaustive": default,
           "compare": compare(default, default)}
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "meta.json").write_text(json.dumps(
        {"device": "H100", "hw_model": "h100", "date": "today", "versions": {}}))
    assert main(["--out", str(tmp_path), "--summary-only"]) == 0
    assert "| softmax" in (tmp_path / "SUMMARY.md").read_text()
