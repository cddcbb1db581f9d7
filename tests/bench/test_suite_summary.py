"""bench/suite.py's summary: the speed-of-light columns and the matmul target line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.suite import resume_rows
from bench.suite import suite_units
from bench.suite import summarize

META = {"device": "TestGPU", "hw_model": "h100", "date": "2026-11-22", "versions": {},
        "git_rev": "abc", "method": "test"}


def row(op: str, provider: str, shape: list[int], ms: float, **extra: Any) -> dict[str, Any]:
    base = {"op": op, "provider": provider, "shape": shape, "dtype": "bf16", "median_ms": ms,
            "gbps": 1000.0 / ms, "tflops": 100.0 / ms, "pct_measured_peak": 50.0,
            "pct_datasheet_peak": 40.0, "bytes_moved": 128 << 20, "speedup": {}}
    base.update(extra)
    return base


def test_matmul_row_is_measured_against_cublas_alone() -> None:
    rows = [row("matmul_bias_gelu", "ported", [4096, 4096, 4096], 0.200,
                speedup={"eager": [1.05, 1.0, 1.1], "compile": [1.02, 1.0, 1.1]}),
            row("matmul_bias_gelu", "matmul_alone", [4096, 4096, 4096], 0.180)]
    text = summarize(rows, META)
    assert "90.0% of cuBLAS's matmul alone" in text
    assert "1.05x eager" in text and "1.02x torch.compile" in text


def test_memory_bound_row_is_measured_against_a_same_size_copy() -> None:
    rows = [row("rmsnorm", "ported", [16384, 8192], 0.250, pct_measured_peak=85.0,
                speedup={"compile": [1.6, 1.5, 1.7]}),
            row("rmsnorm", "copy", [16384, 8192], 0.200, pct_measured_peak=95.0)]
    text = summarize(rows, META)
    table_row = next(line for line in text.splitlines() if line.startswith("| rmsnorm"))
    assert [c.strip() for c in table_row.split("|")][9] == "80"  # % of copy: 0.200 / 0.250
    assert "rmsnorm 16384x8192 bf16: 85.0% (a copy of as many bytes: 95.0%)" in text
    assert "of cuBLAS" not in text


def test_resume_keeps_finished_ops_and_drops_partial_ones(tmp_path: Path) -> None:
    rows = [{"op": "gelu", "provider": p, "shape": list(s), "dtype": "bf16"}
            for s, _ in suite_units("gelu") for p in ("ported", "eager")]
    rows.append({"op": "rmsnorm", "provider": "ported", "shape": [4096, 4096], "dtype": "bf16"})
    rows_path = tmp_path / "rows.jsonl"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "meta.json").write_text(json.dumps({"date": "first"}))
    meta = {"date": "second"}
    kept, done = resume_rows(rows_path, meta)
    assert done == {"gelu"}  # rmsnorm has one of its units: it runs again whole
    assert len(kept) == 2 * len(suite_units("gelu"))
    assert len(rows_path.read_text().splitlines()) == len(kept)
    assert meta == {"date": "first", "resumed": ["second"]}


def test_summary_only_writes_the_summary_of_a_cut_off_run(tmp_path: Path) -> None:
    from bench.suite import main

    rows = [row("rmsnorm", "ported", [16384, 8192], 0.250, pct_measured_peak=85.0,
                speedup={"compile": [1.6, 1.5, 1.7]}),
            row("rmsnorm", "copy", [16384, 8192], 0.200, pct_measured_peak=95.0)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "meta.json").write_text(json.dumps(META))
    assert main(["--out", str(tmp_path), "--summary-only"]) == 0
    assert (tmp_path / "SUMMARY.md").read_text() == summarize(rows, META)
