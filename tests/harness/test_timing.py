"""Timing: refuses to time without a GPU; ratio/quantile math; flush and rotation sizing; and,
on a GPU, events, CUDA graphs, interleaving and the async-cheat guard."""

from __future__ import annotations

import pytest
import torch

import hwmodels
from harness import roofline
from harness import timing

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")


@pytest.fixture(scope="module")
def h100() -> hwmodels.HardwareModel:
    return hwmodels.get("h100")


# -- CPU ------------------------------------------------------------------------------------
@no_gpu
def test_bench_without_gpu_refuses_clearly(h100):
    def make_args():
        raise AssertionError("inputs must not be built when timing is impossible")

    with pytest.raises(timing.TimingUnavailable) as exc:
        timing.bench(torch.add, make_args, hw=h100)
    msg = str(exc.value)
    assert msg.startswith("timing needs a GPU:")
    assert "has none" in msg and "interpreter" in msg
    with pytest.raises(timing.TimingUnavailable, match="timing needs a GPU"):
        timing.compare({"a": torch.add}, make_args, hw=h100)


def _timing(samples: list[float]) -> timing.Timing:
    return timing.Timing(median_ms=0, p20_ms=0, p80_ms=0, min_ms=0, reps=len(samples),
                         mode="events", samples_ms=tuple(samples))


def test_ratio_from_per_rep_pairs():
    # Machine drift (each rep 2x slower than the last) hits both alike: the pairwise ratio is
    # exactly 0.8 every time, while the spread of each provider alone is enormous.
    drift = [2.0**i for i in range(10)]
    cmp = timing.Comparison(timings={"a": _timing([0.8 * d for d in drift]),
                                     "b": _timing(list(drift))}, order=("a", "b"))
    r = cmp.ratio("a", "b")
    assert (r.median, r.p20, r.p80) == pytest.approx((0.8, 0.8, 0.8))
    assert cmp.speedup("a", over="b").median == pytest.approx(1.25)
    median, p20, p80 = cmp.ratio("b", "a")  # the tuple form docs/INTERNAL_API.md promises
    assert (median, p20, p80) == pytest.approx((1.25, 1.25, 1.25))
    with pytest.raises(KeyError, match="'c'"):
        cmp.ratio("a", "c")


def test_ratio_is_median_of_pairs_not_ratio_of_medians():
    cmp = timing.Comparison(timings={"a": _timing([1.0, 10.0, 3.0]),
                                     "b": _timing([2.0, 5.0, 3.0])}, order=("a", "b"))
    # pairs: 0.5, 2.0, 1.0 -> median 1.0 (ratio of medians would be 3/3 too; p20/p80 differ)
    r = cmp.ratio("a", "b")
    assert r.median == pytest.approx(1.0)
    assert r.p20 == pytest.approx(timing.quantile([0.5, 1.0, 2.0], 0.2))
    assert r.p20 < 1.0 < r.p80


def test_quantile():
    assert timing.quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert timing.quantile([1.0, 2.0], 0.2) == pytest.approx(1.2)
    assert timing.quantile([5.0], 0.8) == 5.0
    with pytest.raises(ValueError):
        timing.quantile([], 0.5)


def test_flush_buffer_sized_from_the_model(h100):
    mi300x = hwmodels.get("mi300x")
    assert mi300x.llc_bytes == 256 * 2**20
    assert timing.flush_bytes(mi300x) == 2 * mi300x.llc_bytes  # 512 MiB; 256 MB would not do
    assert timing.flush_bytes(h100) == max(2 * h100.llc_bytes, timing.MIN_FLUSH_BYTES)


def test_flush_writes_the_buffer_then_reads_it_so_the_cache_is_left_clean():
    # a write alone leaves the LLC dirty and the timed kernel pays the write-back (NOTES item 32)
    class Recorder:
        def __init__(self):
            self.calls = []

        def fill_(self, value):
            self.calls.append("write")

        def sum(self):
            self.calls.append("read")

    buf = Recorder()
    timing.flush_llc(buf)
    assert buf.calls == ["write", "read"]
    real = torch.zeros(1000, dtype=torch.int32)
    timing.flush_llc(real)
    assert bool((real == 1).all())


def test_rotating_input_sets(h100):
    llc = h100.llc_bytes
    assert timing.arg_sets_needed(llc, h100) == 1
    assert timing.arg_sets_needed(4 * llc, h100) == 1
    assert timing.arg_sets_needed(llc // 4, h100) == 8  # 8 sets of llc/4 fill 2x the LLC
    assert timing.arg_sets_needed(1024, h100) == timing.MAX_ARG_SETS
    calls = []

    def make_args():
        calls.append(1)
        return (torch.empty(llc // 4 // 5, dtype=torch.float32),)  # a fifth of the LLC

    sets = timing._build_arg_sets(make_args, h100)
    assert len(sets) == len(calls) == 10
    assert len({id(s.args[0]) for s in sets}) == 10  # distinct tensors, not one reused


# -- GPU ------------------------------------------------------------------------------------
def _gpu_hw() -> hwmodels.HardwareModel:
    det = hwmodels.detect()
    return det.model if det.model is not None else hwmodels.get("h100")


@pytest.mark.gpu
def test_bench_copy_is_plausible():
    hw = _gpu_hw()
    n = 64 * 2**20 // 4  # 64 MiB each way

    def make_args():
        return (torch.empty(n, device="cuda"), torch.randn(n, device="cuda"))

    t = timing.bench(lambda dst, src: dst.copy_(src), make_args, hw=hw, reps=30)
    assert t.mode == "events"
    assert 0 < t.min_ms <= t.p20_ms <= t.median_ms <= t.p80_ms
    assert not t.async_suspect
    r = roofline.analyze(2 * n * 4, 0, t.median_ms, hw, torch.float32)
    assert not r.exceeds_speed_of_light
    assert 30 < r.pct_datasheet_bw <= 105


@pytest.mark.gpu
def test_tiny_kernel_uses_cuda_graph():
    hw = _gpu_hw()
    calls = []

    def make_args():
        calls.append(1)
        return (torch.randn(1024, device="cuda"), torch.empty(1024, device="cuda"))

    t = timing.bench(lambda x, out: torch.mul(x, 2.0, out=out), make_args, hw=hw, reps=20)
    assert t.mode == "graph"
    assert t.median_ms < timing.GRAPH_THRESHOLD_MS
    assert len(calls) == timing.MAX_ARG_SETS  # 8 KB sets: rotated to overflow the LLC
    forced = timing.bench(lambda x, out: torch.mul(x, 2.0, out=out), make_args, hw=hw, reps=20,
                          graph=False)
    assert forced.mode == "events"


@pytest.mark.gpu
def test_compare_identical_providers_ratio_near_one():
    hw = _gpu_hw()
    n = 32 * 2**20

    def make_args():
        return (torch.randn(n, device="cuda"),)

    cmp = timing.compare({"a": torch.neg, "b": torch.neg, "slow": lambda x: torch.neg(x) * 2},
                         make_args, hw=hw, reps=30)
    assert 0.85 < cmp.ratio("a", "b").median < 1.15
    assert cmp.speedup("a", over="slow").median > 1.3  # two kernels vs one


@pytest.mark.gpu
def test_async_cheat_is_flagged():
    hw = _gpu_hw()
    side = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device="cuda")
    c = torch.empty_like(a)

    def cheat(x):
        # The real work goes to another stream; the timed stream sees nothing.
        with torch.cuda.stream(side):
            for _ in range(4):
                torch.matmul(a, a, out=c)
        return x

    def make_args():
        return (torch.randn(1024, device="cuda"),)

    t = timing.bench(cheat, make_args, hw=hw, reps=10, warmup=2, graph=False)
    torch.cuda.synchronize()
    assert t.async_suspect
    assert any("ASYNC SUSPECT" in n for n in t.notes)
    honest = timing.bench(lambda x: torch.matmul(a, a, out=c), make_args, hw=hw, reps=10,
                          warmup=2, graph=False)
    assert not honest.async_suspect
