"""`porter compile` through click's CliRunner: table, exit codes, error messages."""

from __future__ import annotations

from click.testing import CliRunner

from porter.commands.compile import compile_cmd

from .conftest import RMSNORM
from .conftest import SMEM_STRESS

KERNEL = f"{RMSNORM}::_rmsnorm_fwd_kernel"


def _run(*args):
    return CliRunner().invoke(compile_cmd, list(args))


def test_compile_reports_every_target():
    result = _run(KERNEL, "--targets", "a100,h100,b200,mi300x", "--constexpr", "BLOCK_N=4096",
                  "--num-warps", "8")
    assert result.exit_code == 0, result.output
    for device, arch in [("a100", "80"), ("h100", "90"), ("b200", "100"), ("mi300x", "gfx942")]:
        row = next(line for line in result.output.splitlines() if line.startswith(device))
        assert arch in row and "compiled" in row and row.rstrip().endswith("fits")
    assert "regs/thread" in result.output and "occupancy" in result.output
    assert "mi300x (triton-hip gfx942) ..." in result.output  # progress line per target


def test_no_fit_is_reported_not_failed():
    divisible = ("M", "N", "K", "stride_am", "stride_bk", "stride_cm")
    result = _run(f"{SMEM_STRESS}::_matmul_fwd_kernel", "--targets", "h100,mi300x",
                  "--dtype", "bf16", "--constexpr", "BLOCK_M=128", "--constexpr", "BLOCK_N=128",
                  "--constexpr", "BLOCK_K=64", "--num-warps", "4", "--num-stages", "4",
                  *sum((["--divisible", n] for n in divisible), []))
    assert result.exit_code == 0, result.output
    mi_row = next(line for line in result.output.splitlines() if line.startswith("mi300x"))
    assert "NO: LDS" in mi_row and "> 65536 B LDS per CU on mi300x" in mi_row
    h_row = next(line for line in result.output.splitlines() if line.startswith("h100"))
    assert h_row.rstrip().endswith("fits")


def test_unknown_target_lists_known_devices():
    result = _run(KERNEL, "--targets", "h100,h900", "--constexpr", "BLOCK_N=64")
    assert result.exit_code == 2
    assert "h900" in result.output and "mi300x" in result.output


def test_bad_kernel_spec_and_missing_kernel():
    result = _run(str(RMSNORM), "--targets", "h100")
    assert result.exit_code == 2 and "FILE::KERNEL" in result.output
    result = _run(f"{RMSNORM}::nope", "--targets", "h100")
    assert result.exit_code == 2
    assert "no kernel 'nope'" in result.output and "kernel.py" in result.output


def test_unset_constexpr_is_named():
    result = _run(KERNEL, "--targets", "h100")
    assert result.exit_code == 2 and "constexpr BLOCK_N not set" in result.output


def test_compile_error_exits_nonzero_with_message():
    result = _run(KERNEL, "--targets", "h100", "--constexpr", "BLOCK_N=1000")
    assert result.exit_code == 1
    assert "error: h100: Triton failed to compile _rmsnorm_fwd_kernel for h100" in result.output


def test_unknown_knob_is_a_compile_error():
    result = _run(
        KERNEL, "--targets", "h100", "--constexpr", "BLOCK_N=64", "--knob", "waves_per_eu=2"
    )
    assert result.exit_code == 1 and "unknown knob 'waves_per_eu' for triton-cuda" in result.output


def test_a_block_size_that_is_not_an_integer_is_bad_input():
    """--constexpr BLOCK_N=abc was reported as a compile failure (issue 48): bad input, exit 2."""
    result = _run(KERNEL, "--targets", "h100", "--constexpr", "BLOCK_N=abc")
    assert result.exit_code == 2 and "BLOCK_N=abc" in result.output
    assert "must be an integer" in result.output
