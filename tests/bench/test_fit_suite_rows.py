"""bench/fit_suite_rows.py: recovers the fixed cost and rate a suite's rows were made with."""

from __future__ import annotations

import json

import pytest

from bench.fit_suite_rows import main


def test_fit_recovers_fixed_cost_and_rate(tmp_path, capsys) -> None:
    # rows made with 8 us fixed at 4000 GB/s; a small row and another op left out of the fit
    rows = [{"op": "cross_entropy", "dtype": "bf16", "provider": "ported", "bound": "memory",
             "bytes_moved": b, "median_ms": (8.0 + b / 4e6) / 1e3, "error": None}
            for b in (268_000_000, 524_000_000, 1_050_000_000, 10_000_000)]
    rows.append({**rows[0], "op": "softmax", "median_ms": 1.0})
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert main([str(path), "--op", "cross_entropy"]) == 0
    assert "ported     3 rows: fixed  8.00 us,   4000 GB/s" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no gelu bf16 rows"):
        main([str(path), "--op", "gelu"])
