"""descriptor(): byte-stable, and carries the numbers an agent needs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import hwmodels
from hwmodels import descriptor

NAMES = [hw.name for hw in hwmodels.all_models()]


@pytest.mark.parametrize("name", NAMES)
def test_same_model_same_bytes(name: str) -> None:
    hw = hwmodels.get(name)
    text = descriptor(hw)
    assert descriptor(hwmodels.load_file(hw.source_file)) == text
    # Dict and set order must not leak in: rebuild with reversed dtype dict and measured tuple.
    shuffled = dataclasses.replace(
        hw,
        dense_tflops=dict(reversed(list(hw.dense_tflops.items()))),
        measured=tuple(reversed(hw.measured)),
        features=frozenset(sorted(hw.features, reverse=True)),
    )
    assert descriptor(shuffled) == text
    assert text.endswith("\n") and len(text) < 1500


def test_same_bytes_across_processes() -> None:
    # Different PYTHONHASHSEED -> different set iteration order; the text must not change.
    code = "import hwmodels,sys; sys.stdout.write(hwmodels.descriptor(hwmodels.get('b200')))"
    root = Path(hwmodels.__file__).resolve().parents[1]
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outs) == 1


def test_h100_key_numbers() -> None:
    text = descriptor(hwmodels.get("h100"))
    for needle in (
        "sm_90a",
        "triton-cuda",
        "warp width: 32",
        "3352 GB/s",
        "3073.3 GB/s measured",
        "50 MiB L2",
        "bf16 989.4",
        "fp8 1978.9",
        "132 SMs",
        "1980 MHz",
        "228 KiB",
        "227 KiB",
        "65536",
        "tma",
        "wgmma",
        "matmul_bf16_tflops 757",
    ):
        assert needle in text, needle


def test_mi300x_uses_amd_terms() -> None:
    text = descriptor(hwmodels.get("mi300x"))
    for needle in (
        "gfx942",
        "wavefront width: 64",
        "5300 GB/s",
        "256 MiB Infinity Cache",
        "304 CUs",
        "LDS 64 KiB",
        "bf16 1307.4",
        "mfma",
    ):
        assert needle in text, needle
    assert "measured" not in text  # nothing measured on MI300X yet


def test_non_spec_numbers_are_marked() -> None:
    assert "60 MiB L2 [measured]" in descriptor(hwmodels.get("h200"))
    assert "fp32 3.76 [derived]" in descriptor(hwmodels.get("m4"))
