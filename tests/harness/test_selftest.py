"""The self-test: every bad kernel caught by the stage built for it; the good one passes."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from harness import selftest
from harness.selftest import PASS
from harness.selftest import SelftestRow


@pytest.fixture(scope="module")
def cpu_rows() -> list[SelftestRow]:
    return selftest.run("cpu")


def test_every_case_is_judged(cpu_rows: list[SelftestRow]) -> None:
    assert [r.kernel for r in cpu_rows] == [c.name for c in selftest.CASES]


@pytest.mark.parametrize("case", selftest.CASES, ids=lambda c: c.name)
def test_caught_for_the_right_reason_on_cpu(
    case: selftest.runner._Case, cpu_rows: list[SelftestRow]
) -> None:
    row = next(r for r in cpu_rows if r.kernel == case.name)
    assert row.ok, (
        f"{row.kernel}: expected {row.expected_stage}/{row.expected_reason}, "
        f"got {row.caught_by}/{row.reason}: {row.message}"
    )
    if case.expected_stage == PASS:
        assert row.caught_by is None
    else:
        assert row.caught_by == case.expected_stage
        assert row.message  # the failure text is carried to the table


def test_expected_catches_cover_every_stage_and_guard() -> None:
    expected = {c.expected_stage for c in selftest.CASES}
    assert {
        "smoke",
        "odd_sizes",
        "determinism",
        "no_torch_compute",
        "completion",
        "stale_output",
    } <= expected


def test_a_slipped_kernel_fails_the_row(monkeypatch: pytest.MonkeyPatch) -> None:
    # A "bad" case whose kernel is actually the good one must come out not ok: the runner does
    # not simply trust its expectations.
    fake = selftest.runner._Case("bias", lambda k: k.softmax_good, "smoke", "mismatch")
    monkeypatch.setattr(selftest.runner, "CASES", (fake,))
    (row,) = selftest.run("cpu")
    assert not row.ok and row.caught_by is None and "slipped through" in row.message


def test_unknown_device_is_refused() -> None:
    with pytest.raises(ValueError, match="cpu, cuda or auto"):
        selftest.resolve_device("tpu")


def _rows(ok: bool) -> list[SelftestRow]:
    return [
        SelftestRow("good", PASS, None, "all five stages passed", True),
        SelftestRow(
            "bias",
            "smoke",
            "smoke" if ok else None,
            "x" if ok else "slipped through",
            ok,
            "mismatch",
            "mismatch" if ok else None,
        ),
    ]


@pytest.mark.parametrize("ok", [True, False], ids=["all-caught", "one-slipped"])
def test_cli_table_and_exit_code(ok: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from porter.commands.selftest import selftest_cmd

    monkeypatch.setattr(selftest, "run", lambda dev, progress=None: _rows(ok))
    result = CliRunner().invoke(selftest_cmd, ["--device", "cpu"])
    assert (result.exit_code == 0) is ok, result.output
    assert "expected catch" in result.output and "caught by" in result.output
    assert "bias" in result.output and ("FAIL" in result.output) is (not ok)


@pytest.mark.gpu
def test_selftest_on_gpu() -> None:
    rows = selftest.run("cuda")
    assert [r.kernel for r in rows][-1] == "memoize_timing"
    bad = [r for r in rows if not r.ok]
    assert not bad, "\n".join(f"{r.kernel}: {r.caught_by} {r.message}" for r in bad)


# -- Metal kernels on the CPU executor (issue 34) ---------------------------------------------

METAL = [c for c in selftest.CASES if c.backend == "metal"]


def test_metal_cases_cover_the_five_bugs_and_three_stages() -> None:
    names = {c.name for c in METAL}
    assert names == {"metal_good", "metal_missing_barrier", "metal_wrong_threads",
                     "metal_small_threadgroup", "metal_full_simd", "metal_off_by_one",
                     "metal_row_overrun"}
    assert {c.expected_stage for c in METAL} == {PASS, "smoke", "sweep", "odd_sizes"}


def test_metal_rows_name_the_broken_rule(cpu_rows: list[SelftestRow]) -> None:
    rows = {r.kernel: r for r in cpu_rows}
    assert "data race on threadgroup memory part" in rows["metal_missing_barrier"].message
    assert "no thread wrote it" in rows["metal_wrong_threads"].message
    assert "part[256] indexed at" in rows["metal_small_threadgroup"].message
    assert "NaN" in rows["metal_off_by_one"].message


def test_metal_kernels_really_run_on_the_executor() -> None:
    from harness.selftest.metal_kernels import MetalSoftmax
    from harness.selftest.metal_kernels import program

    before = program().launches
    x = torch.randn(3, 40)
    out = torch.full_like(x, float("nan"))
    MetalSoftmax("good")(x, out=out)
    assert program().launches == before + 1
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_a_metal_catch_for_the_wrong_rule_fails_the_row(monkeypatch: pytest.MonkeyPatch) -> None:
    # caught by the right stage and reason, but the message names another rule: not ok
    case = next(c for c in METAL if c.name == "metal_wrong_threads")
    wrong = selftest.runner._Case(case.name, case.make, "smoke", "error", "metal", "data race")
    monkeypatch.setattr(selftest.runner, "CASES", (wrong,))
    (row,) = selftest.run("cpu")
    assert row.caught_by == "smoke" and not row.ok


def test_metal_rows_say_why_without_a_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    import targets.metal_exec

    monkeypatch.setattr(targets.metal_exec, "available", lambda: (False, "no C++ compiler"))
    monkeypatch.setattr(selftest.runner, "CASES", tuple(METAL[:1]))
    (row,) = selftest.run("cpu")
    assert not row.ok and "no C++ compiler" in row.message
