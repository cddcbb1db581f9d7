"""`porter hw list | show | validate | detect` through click's test runner."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import hwmodels
from porter.cli import main


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_list_shows_every_model(runner: CliRunner) -> None:
    result = runner.invoke(main, ["hw", "list"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "bandwidth GB/s" in lines[0] and "bf16 TFLOP/s" in lines[0]
    for hw in hwmodels.all_models():
        assert any(line.split()[0] == hw.name for line in lines[2:]), hw.name
    h100 = next(line.split() for line in lines[2:] if line.split()[0] == "h100")
    assert h100[1:] == [
        "nvidia",
        "sm_90a",
        "triton-cuda",
        "32",
        "3352",
        "3073.3",
        "989.4",
        "132",
        "50",
    ]
    m4 = next(line.split() for line in lines[2:] if line.split()[0] == "m4")
    assert m4[6:8] == ["-", "-"]  # nothing measured, no bf16 rate


def test_show_has_sources_measured_and_descriptor(runner: CliRunner) -> None:
    result = runner.invoke(main, ["hw", "show", "NVIDIA H100 80GB HBM3"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "CUDA C Programming Guide" in out  # sources are printed
    assert "copy_bandwidth_gbps: 3073.3" in out
    assert out.index("measured:") < out.index("descriptor")
    assert hwmodels.descriptor(hwmodels.get("h100")).rstrip("\n") in out


def test_show_unknown_device_is_one_line_exit_2(runner: CliRunner) -> None:
    result = runner.invoke(main, ["hw", "show", "rtx9090"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "unknown device 'rtx9090'" in result.output and "h100" in result.output


def test_broken_yaml_is_one_line_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "h100.yaml"
    shutil.copy(hwmodels.DEVICES_DIR / "h100.yaml", path)
    path.write_text(path.read_text().replace("value: 3352", "value: -3"))
    for args in (["hw", "show", str(path)], ["hw", "validate", str(path)]):
        result = runner.invoke(main, args)
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        assert (
            "h100.yaml: memory.bandwidth_gbps.value: must be a positive number, got -3"
            in result.output
        )


def test_validate_shipped(runner: CliRunner) -> None:
    result = runner.invoke(main, ["hw", "validate"])
    assert result.exit_code == 0, result.output
    assert f"ok: {len(hwmodels.all_models())} models" in result.output


def test_detect_never_fails(runner: CliRunner) -> None:
    result = runner.invoke(main, ["hw", "detect"])
    assert result.exit_code == 0, result.output
    assert "reason:" in result.output and "via:" in result.output
