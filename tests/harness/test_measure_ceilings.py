"""measure_ceilings: YAML rendering and appending on CPU; the real measurement on a GPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import hwmodels
from harness import measure_ceilings as mc

ENTRIES = [
    mc.Measurement(
        "copy_bandwidth_gbps",
        4321.06,
        "2026-11-23",
        'copy: "quoted" # not a comment',
        {"torch": "2.11.0", "triton": "3.6.0", "device": "NVIDIA H200"},
    ),
    mc.Measurement("matmul_bf16_tflops", 777.7, "2026-11-23", "bf16 8192^3", {"torch": "2.11.0"}),
]


def test_append_keeps_existing_entries_and_text(tmp_path: Path) -> None:
    path = tmp_path / "h100.yaml"
    shutil.copy(hwmodels.DEVICES_DIR / "h100.yaml", path)
    before = path.read_text()
    mc.append_to_yaml(path, ENTRIES)
    after = path.read_text()
    assert after.startswith(before)  # nothing rewritten, only appended
    n_before = len(hwmodels.load_file(hwmodels.DEVICES_DIR / "h100.yaml").measured)
    hw = hwmodels.load_file(path)
    assert len(hw.measured) == n_before + 2
    assert hw.measured[n_before].method == 'copy: "quoted" # not a comment'
    assert hw.measured[n_before].versions["device"] == "NVIDIA H200"
    assert hw.measured_value("copy_bandwidth_gbps") == pytest.approx(4321.1)
    assert hw.measured_value("matmul_bf16_tflops") == pytest.approx(777.7)


def test_append_creates_measured_section(tmp_path: Path) -> None:
    path = tmp_path / "mi300x.yaml"
    shutil.copy(hwmodels.DEVICES_DIR / "mi300x.yaml", path)
    mc.append_to_yaml(path, ENTRIES)
    assert [m.name for m in hwmodels.load_file(path).measured] == [e.name for e in ENTRIES]


def test_append_into_a_middle_section(tmp_path: Path) -> None:
    # m4 has `notes:` after features and no measured ceilings; put an empty measured section
    # before the notes to test insertion mid-file.
    path = tmp_path / "m4.yaml"
    text = (hwmodels.DEVICES_DIR / "m4.yaml").read_text()
    assert "measured:" not in text and "\nnotes:" in text
    text = text.replace("\nnotes:", "\nmeasured: []\nnotes:", 1)
    path.write_text(text)
    notes_before = hwmodels.load_file(path).notes
    mc.append_to_yaml(path, ENTRIES[:1])
    hw = hwmodels.load_file(path)
    assert len(hw.measured) == 1 and hw.notes == notes_before


def test_invalid_result_restores_file(tmp_path: Path) -> None:
    path = tmp_path / "h100.yaml"
    shutil.copy(hwmodels.DEVICES_DIR / "h100.yaml", path)
    before = path.read_text()
    bad = [mc.Measurement("copy_bandwidth_gbps", -1.0, "2026-11-23", "x")]
    with pytest.raises(hwmodels.HardwareModelError):
        mc.append_to_yaml(path, bad)
    assert path.read_text() == before


def test_cpu_exits_nonzero_with_message(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert mc.main([]) == mc.EXIT_NO_GPU
    err = capsys.readouterr().err
    assert "no CUDA/ROCm GPU" in err and "torch.cuda:" in err


@pytest.mark.gpu
def test_measures_plausible_ceilings() -> None:
    import torch

    gbps, _ = mc.measure_copy_bandwidth(torch, [1 << 28, 1 << 30], reps=10, warmup=3)
    tflops, _ = mc.measure_matmul_bf16(torch, 4096, reps=10, warmup=3)
    det = hwmodels.detect()
    if det.model is not None:
        # Measured can't beat the datasheet (small tolerance for rounding/boost); 20% is a
        # broken-measurement floor, far below any healthy GPU.
        assert 0.2 * det.model.peak_bandwidth_gbps < gbps < 1.05 * det.model.peak_bandwidth_gbps
        assert 0 < tflops < 1.05 * det.model.peak_tflops("bf16")
    else:
        assert gbps > 0 and tflops > 0
