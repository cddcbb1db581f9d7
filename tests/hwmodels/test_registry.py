"""Lookup by name and alias, unknown names, model_hash, and that importing stays light."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

import hwmodels
from hwmodels import UnknownDeviceError


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("h100", "h100"),
        ("H100", "h100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("nvidia h100 80gb hbm3", "h100"),
        ("  NVIDIA   H100 80GB HBM3 ", "h100"),
        ("sm_90", "h100"),
        ("SM_90A", "h100"),
        ("NVIDIA H100 SXM5 80GB", "h100"),  # full_name
        ("gfx942", "mi300x"),
        ("AMD Instinct MI300X", "mi300x"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("sm_80", "a100"),
        ("NVIDIA B200", "b200"),
        ("sm_100a", "b200"),
        ("Apple M4", "m4"),
        ("apple-m4", "m4"),
        ("gfx950", "mi355x"),
    ],
)
def test_aliases_resolve(query: str, name: str) -> None:
    assert hwmodels.get(query).name == name


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(UnknownDeviceError) as info:
        hwmodels.get("NVIDIA H100 PCIe")
    msg = str(info.value)
    assert "NVIDIA H100 PCIe" in msg
    for hw in hwmodels.all_models():
        assert hw.name in msg
    assert info.value.known == tuple(sorted(hw.name for hw in hwmodels.all_models()))


def test_get_is_cached() -> None:
    assert hwmodels.get("h100") is hwmodels.get("H100")


def test_model_hash_is_sha256_of_file_bytes() -> None:
    hw = hwmodels.get("mi300x")
    expected = hashlib.sha256(Path(hw.source_file).read_bytes()).hexdigest()
    assert hwmodels.model_hash(hw) == expected
    assert hwmodels.model_hash(hwmodels.get("h100")) != expected


def test_model_hash_changes_with_content(tmp_path: Path) -> None:
    path = tmp_path / "h100.yaml"
    path.write_bytes((hwmodels.DEVICES_DIR / "h100.yaml").read_bytes())
    before = hwmodels.model_hash(hwmodels.load_file(path))
    path.write_text(path.read_text() + "# a comment\n")
    assert hwmodels.model_hash(hwmodels.load_file(path)) != before


def test_import_does_not_pull_torch() -> None:
    code = (
        "import sys, hwmodels; hwmodels.all_models(); "
        "print('torch' in sys.modules, 'pynvml' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(hwmodels.__file__).resolve().parents[1],
    )
    assert out.stdout.split() == ["False", "False"]
