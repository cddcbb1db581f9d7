"""Roofline math on hand-computed cases, the speed-of-light gate and derived byte counts."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import hwmodels
from harness import roofline


@pytest.fixture(scope="module")
def h100() -> hwmodels.HardwareModel:
    return hwmodels.get("h100")


def test_one_gigabyte_in_half_a_millisecond(h100):
    # 1e9 B / 0.5e-3 s = 2000 GB/s; 2000/3352 = 59.67 %; 2000/3073.3 = 65.08 %.
    r = roofline.analyze(1_000_000_000, 0, 0.5, h100, torch.bfloat16)
    assert r.achieved_gbps == pytest.approx(2000.0)
    assert r.pct_datasheet_bw == pytest.approx(59.67, abs=0.01)
    assert r.pct_measured_bw == pytest.approx(65.08, abs=0.01)
    assert r.bound == "memory"
    assert r.floor_ms == pytest.approx(1e9 / 3352e9 * 1e3)
    assert r.measured_floor_ms == pytest.approx(1e9 / 3073.3e9 * 1e3)
    assert r.pct_of_sol == pytest.approx(r.floor_ms / 0.5 * 100)
    assert r.pct_peak == r.pct_datasheet_bw
    assert r.pct_measured_peak == r.pct_measured_bw
    assert not r.exceeds_speed_of_light
    assert r.dtype == "bf16"


def test_speed_of_light_gate(h100):
    floor = roofline.analyze(10**9, 0, 1.0, h100, "bf16").floor_ms
    cheat = roofline.analyze(10**9, 0, floor * 0.90, h100, "bf16")
    assert cheat.exceeds_speed_of_light
    assert "not a win" in cheat.message
    # Within the 5 % margin (boost clocks, timer granularity): not flagged.
    close = roofline.analyze(10**9, 0, floor * 0.97, h100, "bf16")
    assert not close.exceeds_speed_of_light
    assert close.pct_datasheet_bw > 100


def test_compute_bound_matmul_against_measured_peak(h100):
    n = 8192
    flops = 2 * n**3
    bytes_moved = 3 * n * n * 2
    t_ms = flops / 757e12 * 1e3  # exactly the measured cuBLAS rate
    r = roofline.analyze(bytes_moved, flops, t_ms, h100, torch.bfloat16)
    assert r.bound == "compute"
    assert r.achieved_tflops == pytest.approx(757.0)
    assert r.pct_measured_flops == pytest.approx(100.0)
    assert r.pct_datasheet_flops == pytest.approx(757 / 989.4 * 100)
    assert r.pct_peak == r.pct_datasheet_flops
    assert not r.exceeds_speed_of_light


def test_fp32_uses_simt_rate_but_gate_allows_tf32(h100):
    flops = 2 * 4096**3
    t_ms = flops / 300e12 * 1e3  # 300 TFLOP/s: above fp32 SIMT (66.9), legal as tf32 (494.7)
    r = roofline.analyze(3 * 4096 * 4096 * 4, flops, t_ms, h100, torch.float32)
    assert r.datasheet_tflops == pytest.approx(66.9)
    assert r.pct_datasheet_flops > 100
    assert not r.exceeds_speed_of_light
    assert roofline.analyze(0, flops, t_ms, h100, "fp32", math="matrix").datasheet_tflops == \
        pytest.approx(494.7)
    # Faster than even tf32 allows: flagged.
    assert roofline.analyze(0, flops, flops / 600e12 * 1e3, h100, "fp32").exceeds_speed_of_light


def test_no_measured_ceilings(h100):
    bare = dataclasses.replace(h100, measured=())
    r = roofline.analyze(10**9, 0, 0.5, bare, "fp16")
    assert r.pct_measured_bw is None
    assert r.measured_floor_ms is None
    assert r.pct_measured_peak is None
    assert r.pct_datasheet_bw == pytest.approx(59.67, abs=0.01)


@pytest.mark.parametrize("given, key", [
    (torch.float32, "fp32"), (torch.bfloat16, "bf16"), (torch.float16, "fp16"),
    ("bfloat16", "bf16"), ("torch.float16", "fp16"), ("FP32", "fp32"), ("float8_e4m3fn", "fp8"),
], ids=str)
def test_dtype_key(given, key):
    assert roofline.dtype_key(given) == key


def test_bad_inputs(h100):
    with pytest.raises(ValueError, match="int7"):
        roofline.dtype_key("int7")
    with pytest.raises(ValueError, match="time_ms"):
        roofline.analyze(1, 0, 0.0, h100, "bf16")
    with pytest.raises(ValueError, match="bytes_moved"):
        roofline.analyze(-1, 0, 1.0, h100, "bf16")


def test_derive_bytes():
    x = torch.empty(123, 781, dtype=torch.bfloat16)
    w = torch.empty(781, dtype=torch.float32)
    out = torch.empty(123, 781, dtype=torch.bfloat16)
    expected = 123 * 781 * 2 + 781 * 4 + 123 * 781 * 2
    assert roofline.derive_bytes((x, w, 1e-6), out) == expected
    assert roofline.derive_bytes([x, {"w": w}], (out,)) == expected
    assert roofline.derive_bytes((), ()) == 0
