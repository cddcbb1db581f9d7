"""A unit with no passing candidate says why, per candidate class, in its verdict line
(`porter.verdicts.failure_summary`); the ledger keeps each candidate's whole reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from porter.ledger import Ledger
from porter.verdicts import candidate_class
from porter.verdicts import failure_summary
from tests.porter.test_port_resume import SWEEP_FAIL
from tests.porter.test_port_resume import FakeCheck
from tests.porter.test_port_resume import RowsGenerated
from tests.porter.test_port_resume import _use_check
from tests.porter.test_port_standin import SPEC

MISFIT = "does not fit h100: 312 registers per thread > 255 (kernel _k)"
CRASH = "crashed at (64, 128): RuntimeError: CUDA error: an illegal memory access was encountered"


def _reject(ledger: Ledger, config: dict[str, Any], reason: str, n: int) -> None:
    ledger.judge(target="h100", bucket="4096x4096", dtype="fp32", config=config,
                 src_hash=f"{n:064x}", tier="compiled", passed=False, reason_failed=reason)


def test_summary_groups_by_class_then_by_kind(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    for i in range(3):
        _reject(ledger, {"strategy": "looped", "BLOCK_N": 1024 << i}, SWEEP_FAIL, i)
    _reject(ledger, {"strategy": "looped", "BLOCK_N": 65536}, MISFIT, 3)
    for i in range(2):
        _reject(ledger, {"strategy": "single_pass", "num_warps": 8 << i}, MISFIT, 10 + i)
    _reject(ledger, {"origin": "existing", "num_warps": 4}, CRASH, 20)
    text = failure_summary(ledger, "h100", "4096x4096", "fp32")
    assert text.startswith("7 candidates, none passed: ")
    # the largest class first; inside a class, counts only when its candidates differ
    assert ("looped x4: 3 failed sweep at fp32 (max abs err 3.000e-01), 1 misfit (registers); "
            "single_pass x2: misfit (registers); existing kernel x1: crashed (RuntimeError: "
            "CUDA error: an illegal memory access was encountered)") in text
    # the ledger still has every reason whole
    assert sum(e.reason == SWEEP_FAIL for e in ledger) == 3


def test_summary_of_a_unit_with_no_candidates(tmp_path: Path) -> None:
    assert "no candidate was offered" in failure_summary(Ledger(tmp_path / "l.jsonl"), "h100",
                                                         "1x1", "fp32")


def test_candidate_class() -> None:
    assert candidate_class({"strategy": "tiled", "BLOCK_M": 64}) == "tiled"
    assert candidate_class({"origin": "existing", "strategy": "x"}) == "existing kernel"
    assert candidate_class({"num_warps": 4}) == "generated"


class TwoClasses(RowsGenerated):
    """Two strategies: "looped" fails its check at sweep, "single_pass" does not fit."""

    def variant_space(self, hw: Any, shape: Any, dtype: Any) -> list[dict[str, Any]]:
        return [{"strategy": s, "num_warps": 4, "ROWS": r}
                for s in ("looped", "single_pass") for r in (1, 2)]

    def default_config(self, hw: Any, shape: Any, dtype: Any) -> dict[str, Any]:
        return {"strategy": "looped", "num_warps": 4, "ROWS": 1}


def test_port_with_every_candidate_failing_says_why_per_class(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import porter.port
    from porter.judge import compile_tier
    from porter.roles.benchmark import CPU_CHECKS

    monkeypatch.delitem(CPU_CHECKS, "emulator", raising=False)
    monkeypatch.setattr(porter.port, "generate_op", lambda ref, ex, name: TwoClasses(tmp_path))
    real_compile = compile_tier.compile_candidate

    def compile_or_misfit(session: Any, hw: Any, backend: Any, cand: Any, *rest: Any) -> Any:
        ok, details, why = real_compile(session, hw, backend, cand, *rest)
        if cand.config.get("strategy") == "single_pass":
            return False, details, MISFIT
        return ok, details, why

    monkeypatch.setattr(compile_tier, "compile_candidate", compile_or_misfit)
    _use_check(monkeypatch, FakeCheck(lambda config: False))
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC)
    lines: list[str] = []
    res = porter.port.port(spec, ["h100"], None, run_dir=tmp_path / "run", max_variants=4,
                           progress=lines.append)
    assert [t.target for t in res.missing] == ["h100"]
    failures = res.missing[0].failures
    assert failures and all("none passed: " in f for f in failures)
    for f in failures:
        assert "looped x2: failed sweep at fp32 (max abs err 3.000e-01)" in f
        assert "single_pass x2: misfit (registers)" in f
    # so do the target's notes (printed even when other units of the target got a kernel)
    assert any("no candidate passed: 4 candidates, none passed: " in n
               for n in res.missing[0].notes)
    # the per-unit progress line says the same
    units = [ln for ln in lines if "no kernel: 4 candidates, none passed: " in ln]
    assert units and all("looped x2: failed sweep" in ln and "single_pass x2: misfit" in ln
                         for ln in units)


def test_a_raised_exception_is_summed_up_with_the_first_line_of_its_text(
        tmp_path: Path) -> None:
    """"raised ValueError" alone hid which check failed (KernelBench 34/35 on an H100): the
    summary carries the exception's first line, without the trial's input description."""
    raised = ("smoke: candidate raised ValueError: kb_34: out (112, 64, 512, 512) torch.float32, "
              "expected (112, 8, 512, 512) torch.float32\nsecond line (input 'random', shape "
              "(112, 64, 512, 512), dtype float32, seed 0x1)")
    one_line = ("smoke: candidate raised ValueError: looped needs LANES dividing BLOCK_N 4096 "
                "(input 'random', shape (8, 8), dtype float32, seed 0x2)")
    ledger = Ledger(tmp_path / "ledger.jsonl")
    _reject(ledger, {"strategy": "looped", "BLOCK_N": 4096}, raised, 0)
    _reject(ledger, {"strategy": "split_row", "BLOCK_N": 4096}, one_line, 1)
    _reject(ledger, {"origin": "existing"}, CRASH + "\nCUDA kernel errors might be reported", 2)
    text = failure_summary(ledger, "h100", "4096x4096", "fp32")
    assert ("looped x1: failed smoke at float32 (raised ValueError: kb_34: out (112, 64, 512, "
            "512) torch.float32, expected (112, 8, 512, 512) torch.float32)") in text
    assert ("split_row x1: failed smoke at float32 (raised ValueError: looped needs LANES "
            "dividing BLOCK_N 4096)") in text
    assert ("existing kernel x1: crashed (RuntimeError: CUDA error: an illegal memory access "
            "was encountered)") in text


def test_a_crash_message_never_ends_at_its_colon() -> None:
    """"crashed (exit -11):" with nothing after it (issue 48): the signal is named, and a child
    that printed nothing is said to have."""
    from porter.verdicts import crash_message

    assert crash_message("interpreted check", -11, "") == (
        "interpreted check crashed (exit -11, SIGSEGV): it printed nothing")
    assert crash_message("emulated check", 1, " boom \n") == "emulated check crashed (exit 1): boom"
