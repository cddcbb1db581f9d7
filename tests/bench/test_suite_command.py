"""`porter bench --suite`: the checkout's bench.suite runs; outside a checkout, one error line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from porter.commands import bench as bench_command

REPO = Path(__file__).resolve().parents[2]


def test_suite_runs_the_checkouts_bench_suite(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    import bench.suite

    calls = []
    monkeypatch.setattr(bench.suite, "main", lambda argv: calls.append(argv) or 0)
    result = CliRunner().invoke(bench_command.bench_cmd, ["--suite", str(tmp_path), "--reps", "3"])
    assert result.exit_code == 0, result.output
    assert calls == [["--out", str(tmp_path), "--reps", "3"]]


def test_suite_outside_a_checkout_fails_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    # an installed porter: no bench/ beside the package, none on the import path
    monkeypatch.setattr(bench_command, "CHECKOUT", tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != REPO])
    for name in [n for n in sys.modules if n == "bench" or n.startswith("bench.")]:
        monkeypatch.delitem(sys.modules, name)
    result = CliRunner().invoke(bench_command.bench_cmd, ["--suite", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: porter bench --suite: the suite lives in the repository checkout (bench/ is not "
        "installed with the package); run it from a checkout of the repository"]
