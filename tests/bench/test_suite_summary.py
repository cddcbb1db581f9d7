"""bench/suite.py's summary: the speed-of-light columns and the matmul target line."""

from __future__ import annotations

from typing import Any

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
