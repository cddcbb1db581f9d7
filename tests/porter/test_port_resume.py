"""`port()`'s budget, resume, failure summary and bad-input paths (issue 28), on a CPU.

A stand-in generator (test_port_standin's, with a semantic knob so configs need checks of their
own) and a stand-in for the interpreted check (a rule, no child process) keep each test to
seconds; the cross-compile, projection, ledger and pack are the real ones.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.porter.test_port_standin import SPEC
from tests.porter.test_port_standin import FakeGenerated

TARGETS = ["h100", "a100"]
SWEEP_FAIL = ("sweep: output 0: 5 of 10 elements out of tolerance; worst at index (3, 7): got 1, "
              "expected 2; max abs err 3.000e-01, max rel err 1.0e-01; tolerance atol 1e-05 "
              "(input 'random', shape (64, 128), dtype fp32, seed 0x1)")


class RowsGenerated(FakeGenerated):
    """Configs that differ in ROWS (a semantic knob: each needs its own interpreted check) and
    in projected time (ROWS sets the grid)."""

    def variant_space(self, hw: Any, shape: Any, dtype: Any) -> list[dict[str, int]]:
        return [{"num_warps": 4, "ROWS": r} for r in (1, 2, 4, 8)]

    def default_config(self, hw: Any, shape: Any, dtype: Any) -> dict[str, int]:
        return {"num_warps": 4, "ROWS": 1}


class FakeCheck:
    """Stands in for `porter.judge.interpreted.interpreted_check`: passes the configs `passes`
    accepts, fails the others with a sweep mismatch, and counts what it was asked to check."""

    def __init__(self, passes: Any = lambda config: True) -> None:
        self.passes = passes
        self.calls: list[dict[str, Any]] = []

    def __call__(self, spec_path: Path, source: str, config: dict[str, Any], hw_name: str,
                 run_dir: Path) -> dict[str, Any]:
        self.calls.append(dict(config))
        ok = bool(self.passes(config))
        return {"passed": ok, "message": "smoke, sweep (stand-in)" if ok else SWEEP_FAIL,
                "tolerances": "fp32: atol 1e-05"}


@pytest.fixture()
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import porter.port

    # a stand-in generator's Metal is a placeholder: test the emitted path, not the executor
    from porter.roles.benchmark import CPU_CHECKS
    monkeypatch.delitem(CPU_CHECKS, "emulator", raising=False)

    monkeypatch.setattr(porter.port, "generate_op", lambda ref, ex, name: RowsGenerated(tmp_path))
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC)
    return spec


def _use_check(monkeypatch: pytest.MonkeyPatch, check: FakeCheck) -> FakeCheck:
    import porter.judge.interpreted

    monkeypatch.setattr(porter.judge.interpreted, "interpreted_check", check)
    return check


def _kept(result: Any) -> dict[str, list[tuple[str, str, str]]]:
    return {t.target: sorted((c.bucket, c.dtype, json.dumps(c.config, sort_keys=True))
                             for c in t.choices) for t in result.targets}


def _interrupt_after(n: int) -> Any:
    """A progress callback that interrupts the port at its n-th verdict line."""
    seen = []

    def progress(line: str) -> None:
        if "->" in line:
            seen.append(line)
            if len(seen) == n:
                raise KeyboardInterrupt

    return progress


# Only ROWS=8 passes: each unit checks its candidates fastest-projected first until one passes,
# so a budget of 3 checks runs out part-way through (later candidates are skipped).
def _only_rows8(config: dict[str, Any]) -> bool:
    return config.get("ROWS") == 8


def test_resumed_run_continues_the_check_budget_and_ends_with_the_same_pack(
        standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from porter.port import port

    whole = _use_check(monkeypatch, FakeCheck(_only_rows8))
    straight = port(standin, TARGETS, None, run_dir=tmp_path / "straight", max_variants=4,
                    max_checks=3)
    assert len(whole.calls) == 3

    cut = _use_check(monkeypatch, FakeCheck(_only_rows8))
    with pytest.raises(KeyboardInterrupt):
        port(standin, TARGETS, None, run_dir=tmp_path / "cut", max_variants=4, max_checks=3,
             progress=_interrupt_after(2), verbose=True)
    assert 0 < len(cut.calls) < 3
    resumed = port(standin, TARGETS, None, run_dir=tmp_path / "cut", max_variants=4,
                   max_checks=3)
    # the budget continued where it stopped: three checks in all, not three more
    assert len(cut.calls) == 3
    assert _kept(resumed) == _kept(straight)


def test_candidates_skipped_for_budget_are_checked_on_resume_with_budget_left(
        standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from porter.ledger import Ledger
    from porter.port import port

    def only_rows1(config: dict[str, Any]) -> bool:  # projected third of four at 4096x4096
        return config.get("ROWS") == 1

    _use_check(monkeypatch, FakeCheck(only_rows1))
    full = port(standin, TARGETS, None, run_dir=tmp_path / "full", max_variants=4, max_checks=8)
    assert all(t.choices for t in full.targets)

    first = _use_check(monkeypatch, FakeCheck(only_rows1))
    short = port(standin, TARGETS, None, run_dir=tmp_path / "run", max_variants=4, max_checks=1)
    assert len(first.calls) == 1 and short.missing  # one check, failed; the rest skipped
    skipped = {json.dumps(e.config, sort_keys=True)
               for e in Ledger(tmp_path / "run" / "ledger.jsonl") if e.verdict == "skipped"}
    assert skipped
    assert "not checked (check budget spent; raise --max-checks)" in short.missing[0].failures[0]

    # the same budget again: nothing more is checked (the spent check counts)
    same = _use_check(monkeypatch, FakeCheck(only_rows1))
    port(standin, TARGETS, None, run_dir=tmp_path / "run", max_variants=4, max_checks=1)
    assert same.calls == []

    # a larger budget: the skipped candidates are checked, and the pack is the uninterrupted one
    more = _use_check(monkeypatch, FakeCheck(only_rows1))
    resumed = port(standin, TARGETS, None, run_dir=tmp_path / "run", max_variants=4,
                   max_checks=8)
    assert more.calls and {json.dumps(c, sort_keys=True) for c in more.calls} <= skipped
    assert _kept(resumed) == _kept(full)


def test_a_target_with_no_passing_candidate_exits_1_with_why_and_packs_the_others(
        standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from porter.commands.port import port_cmd
    from porter.packs.verify import read_manifest

    _use_check(monkeypatch, FakeCheck(lambda config: False))
    run = tmp_path / "run"
    res = CliRunner().invoke(port_cmd, [str(standin), "--targets", "h100,m4", "--out",
                                        str(tmp_path / "packs"), "--run-dir", str(run),
                                        "--max-variants", "3", "-v"])
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    # the summary names the target and what its candidates did, by kind
    assert "no kernel for h100" in res.output
    assert "none passed: generated x3: failed sweep at fp32 (max abs err 3.000e-01)" in res.output
    # every verdict line that says rejected says why
    rejected = [ln for ln in res.output.splitlines() if "-> rejected" in ln]
    assert rejected and all("rejected: failed sweep at fp32" in ln for ln in rejected)
    # the target that got a kernel (m4, emitted) is in the pack; h100 is not
    manifest = read_manifest(tmp_path / "packs" / "rmsnorm_s")
    assert {e["target"] for e in manifest["entries"]} == {"m4"}


def test_no_target_with_a_kernel_writes_no_pack(standin: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from porter.port import port

    _use_check(monkeypatch, FakeCheck(lambda config: False))
    res = port(standin, ["h100"], tmp_path / "packs", run_dir=tmp_path / "run", max_variants=2)
    assert [t.target for t in res.missing] == ["h100"]
    assert res.missing[0].failures and "failed sweep" in res.missing[0].failures[0]
    assert res.pack_path is None and not (tmp_path / "packs" / "rmsnorm_s").exists()


def test_a_corrupted_ledger_line_is_one_line_and_exit_2(standin: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from porter.commands.port import port_cmd

    _use_check(monkeypatch, FakeCheck())
    run = tmp_path / "run"
    args = [str(standin), "--targets", "h100", "--out", str(tmp_path / "packs"), "--run-dir",
            str(run), "--max-variants", "2"]
    assert CliRunner().invoke(port_cmd, args).exit_code == 0
    lines = (run / "ledger.jsonl").read_text().splitlines()
    lines[1] = '["not", "an", "entry"]'  # complete, newline-terminated: not a torn write
    (run / "ledger.jsonl").write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(port_cmd, args)
    assert res.exit_code == 2, res.output
    assert f"{run / 'ledger.jsonl'}:2: not a ledger entry" in res.output
    assert "Traceback" not in res.output and res.exception is None or isinstance(
        res.exception, SystemExit)


def test_out_naming_a_file_is_refused_before_any_work(standin: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from porter.commands.port import port_cmd

    check = _use_check(monkeypatch, FakeCheck())
    taken = tmp_path / "packs.txt"
    taken.write_text("not a folder\n")
    res = CliRunner().invoke(port_cmd, [str(standin), "--targets", "h100", "--out", str(taken),
                                        "--run-dir", str(tmp_path / "run")])
    assert res.exit_code == 2, res.output
    assert str(taken) in res.output and "Traceback" not in res.output
    assert check.calls == [] and not (tmp_path / "run" / "ledger.jsonl").exists()


def test_library_warnings_are_captured_not_printed(standin: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from porter.commands.port import port_cmd

    _use_check(monkeypatch, FakeCheck())
    # the planner runs the reference (on the meta device) in-process: its warning is raised
    # during the port
    standin.write_text(SPEC.replace("def reference(x, w):\n", "def reference(x, w):\n"
                                    "    import warnings\n"
                                    "    warnings.warn('spec noise 1234', UserWarning)\n"))
    run = tmp_path / "run"

    def to_terminal(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                    line: Any = None) -> None:
        sys.stderr.write(f"{filename}:{lineno}: {category.__name__}: {message}\n")

    # what a user's terminal does with a warning (pytest records them instead)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = to_terminal
        res = CliRunner().invoke(
            port_cmd, [str(standin), "--targets", "h100", "--out", str(tmp_path / "packs"),
                       "--run-dir", str(run), "--max-variants", "2"])
    assert res.exit_code == 0, res.output
    assert "spec noise 1234" not in res.output
    assert "spec noise 1234" in (run / "warnings.txt").read_text()
    assert f"library warnings during the port: {run / 'warnings.txt'}" in res.output


def test_default_output_is_one_line_per_unit_with_what_is_left(
        standin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from porter.port import port

    _use_check(monkeypatch, FakeCheck())
    lines: list[str] = []
    port(standin, TARGETS, None, run_dir=tmp_path / "run", progress=lines.append)
    # the budget is stated: the CPU tier's defaults (3 variants, 6 checks)
    assert any(ln.startswith("budget: 3 candidates per shape and dtype") and "6 interpreted"
               in ln for ln in lines), lines
    units = [ln for ln in lines if " left)" in ln]
    assert len(units) == 4  # 2 targets x 2 buckets x 1 dtype
    assert units[0].startswith("[h100] 1/2 ") and "s left)" in units[0]
    assert not any(ln.startswith("  [") for ln in lines)  # per-candidate lines only when verbose
