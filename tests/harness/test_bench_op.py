"""bench_op: both calling conventions, bytes/FLOPs, speedups, flags and the table; on a CPU it
refuses before building inputs, and its flow runs end to end on the simulated device."""

from __future__ import annotations

import time

import pytest
import torch

import hwmodels
from harness import bench_op as bo
from harness import timing
from harness.problem import Problem
from tests.harness.test_timing_fake_device import fake  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def h100():
    return hwmodels.get("h100")


def _rmsnorm_ref(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _make_inputs(shape, dtype, device, gen):
    x = torch.randn(shape, dtype=torch.float32, device=device, generator=gen).to(dtype)
    w = torch.randn(shape[-1], dtype=torch.float32, device=device, generator=gen).to(dtype)
    return x, w


def _problem(**kw) -> Problem:
    return Problem(name="rmsnorm", reference=_rmsnorm_ref, make_inputs=_make_inputs,
                   smoke_shape=(4, 64), sweep_shapes=[(4, 64)], **kw)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
def test_refuses_without_gpu_before_building_inputs(h100):
    def never(*a):
        raise AssertionError("inputs built on a machine that cannot time them")

    prob = Problem(name="x", reference=_rmsnorm_ref, make_inputs=never, smoke_shape=(1,),
                   sweep_shapes=[(1,)])
    with pytest.raises(timing.TimingUnavailable, match="timing needs a GPU"):
        bo.bench_op(prob, {"eager": _rmsnorm_ref}, hw=h100, shapes=[(8, 8)],
                    dtypes=[torch.float32])


def test_takes_out():
    def cand(x, w, *, out):
        return out

    def kw(x, **kwargs):
        return x

    assert bo.takes_out(cand)
    assert bo.takes_out(kw)
    assert not bo.takes_out(_rmsnorm_ref)
    assert not bo.takes_out(len)  # builtin without a readable signature -> plain


@pytest.mark.usefixtures("fake")
def test_both_conventions_end_to_end(h100, monkeypatch):
    monkeypatch.setattr(timing, "require_gpu", lambda: torch.device("cpu"))
    seen = {"cand": 0}

    def candidate(x, w, out):
        out.copy_(_rmsnorm_ref(x, w))
        seen["cand"] += 1
        return out

    def slow_eager(x, w):
        time.sleep(0.001)
        return _rmsnorm_ref(x, w)

    def broken(x, w, out):
        raise RuntimeError("no kernel for this dtype")

    shapes, dtypes = [(64, 256), (33, 100)], [torch.float32, torch.bfloat16]
    rows = bo.bench_op(_problem(), {"cand": candidate, "eager": slow_eager, "broken": broken},
                       hw=h100, shapes=shapes, dtypes=dtypes, reps=5, warmup=1)
    assert len(rows) == 3 * len(shapes) * len(dtypes)
    assert seen["cand"] > 5
    by = {(r.provider, r.shape, r.dtype): r for r in rows}
    c = by[("cand", (64, 256), "fp32")]
    # bytes derived from inputs + outputs: x, w read, y written.
    assert c.bytes_moved == 64 * 256 * 4 + 256 * 4 + 64 * 256 * 4
    assert c.flops == 0 and c.bound == "memory"
    assert c.gbps == pytest.approx(c.bytes_moved / (c.median_ms * 1e-3) / 1e9)
    assert c.pct_measured_peak == pytest.approx(c.gbps / 3073.3 * 100)
    assert c.pct_datasheet_peak == pytest.approx(c.gbps / 3352 * 100)
    assert set(c.speedup) == {"eager"}  # the plain provider is the default baseline
    assert c.speedup["eager"].median > 1.0  # eager sleeps 1 ms per call
    assert by[("eager", (64, 256), "fp32")].speedup == {}
    assert by[("cand", (33, 100), "bf16")].bytes_moved == 33 * 100 * 2 * 2 + 100 * 2
    b = by[("broken", (64, 256), "fp32")]
    assert b.error and "no kernel" in b.error and b.median_ms is None and not b.ok
    table = bo.format_table(rows)
    assert "x vs eager" in table and "ERR RuntimeError" in table and "64x256" in table


@pytest.mark.usefixtures("fake")
def test_declared_costs_and_sol_flag(h100, monkeypatch):
    monkeypatch.setattr(timing, "require_gpu", lambda: torch.device("cpu"))
    # Declares a terabyte moved: any host-measured time is then beyond light on an H100.
    prob = _problem(bytes_moved=lambda inputs, out: 10**12, flops=lambda inputs, out: 7)
    rows = bo.bench_op(prob, {"eager": _rmsnorm_ref}, hw=h100, shapes=[(8, 64)],
                       dtypes=[torch.float32], reps=3, warmup=1)
    (r,) = rows
    assert r.bytes_moved == 10**12 and r.flops == 7
    assert r.sol_exceeded and not r.ok
    assert any("not a win" in n for n in r.notes)
    assert "SOL!" in bo.format_table(rows)


@pytest.mark.usefixtures("fake")
def test_unknown_baseline_rejected(h100, monkeypatch):
    monkeypatch.setattr(timing, "require_gpu", lambda: torch.device("cpu"))
    with pytest.raises(ValueError, match="liger"):
        bo.bench_op(_problem(), {"eager": _rmsnorm_ref}, hw=h100, shapes=[(8, 64)],
                    dtypes=[torch.float32], baselines=["liger"])


@pytest.mark.gpu
def test_rmsnorm_on_gpu():
    det = hwmodels.detect()
    hw = det.model if det.model is not None else hwmodels.get("h100")

    def candidate(x, w, out):
        return torch.mul(x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(
            x.dtype), w, out=out)

    rows = bo.bench_op(_problem(), {"cand": candidate, "eager": _rmsnorm_ref}, hw=hw,
                       shapes=[(4096, 4096)], dtypes=[torch.bfloat16], reps=20)
    cand = rows[0]
    assert cand.median_ms > 0 and cand.gbps > 0 and "eager" in cand.speedup
    assert not cand.sol_exceeded and not cand.async_suspect
    print(bo.format_table(rows))
