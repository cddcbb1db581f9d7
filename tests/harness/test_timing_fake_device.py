"""Timing's control flow on a simulated device (this CPU has no GPU).

torch.cuda's events, streams, graphs and synchronize are replaced by fakes that run work on the
host: an event records the host clock, a "side stream" is a one-thread executor that
`synchronize` drains. Real device behaviour is covered by the @gpu tests in test_timing.py;
these check what the code decides (modes, interleaving, division by graph calls, rotation, the
async-cheat guard) where no device exists.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import hwmodels
from harness import timing


class _FakeCuda:
    def __init__(self) -> None:
        self.side = ThreadPoolExecutor(max_workers=1)
        self.pending: list[Future] = []
        self.capturing = False
        self.captured = 0

    def synchronize(self) -> None:
        for f in self.pending:
            f.result()
        self.pending.clear()

    def submit_side(self, seconds: float) -> None:
        self.pending.append(self.side.submit(time.sleep, seconds))


class _Event:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = None

    def record(self, stream=None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _Event) -> float:
        return (end.t - self.t) * 1e3


@pytest.fixture
def fake(monkeypatch):
    f = _FakeCuda()

    class _Graph:
        def __init__(self):
            self.n = 0

        def replay(self):
            time.sleep(self.n * 1e-6)  # each captured call "costs" 1 us on replay

    @contextlib.contextmanager
    def graph_ctx(g):
        f.capturing, f.captured = True, 0
        try:
            yield
            g.n = f.captured
        finally:
            f.capturing = False

    class _Stream:
        def wait_stream(self, other):
            pass

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "synchronize", f.synchronize)
    # the device-side head start before each timed region is a no-op on the fake device
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None, raising=False)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: _Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph_ctx)
    monkeypatch.setattr(timing, "_flush_buffer", lambda hw, device: torch.empty(16))
    yield f
    f.side.shutdown(wait=True)


@pytest.fixture(scope="module")
def h100():
    return hwmodels.get("h100")


def _small_args():
    return (torch.empty(256),)


def test_events_mode_interleaved(fake, h100):
    order: list[str] = []

    def make(name, seconds):
        def fn(x):
            order.append(name)
            time.sleep(seconds)
        return fn

    cmp = timing.compare({"a": make("a", 0.0005), "b": make("b", 0.0015)}, _small_args,
                         hw=h100, reps=8, warmup=1)
    ta, tb = cmp.timings["a"], cmp.timings["b"]
    assert ta.mode == tb.mode == "events"
    assert ta.reps == len(ta.samples_ms) == 8
    assert 0.4 < ta.median_ms < tb.median_ms
    assert cmp.ratio("a", "b").median < 0.7
    assert cmp.speedup("a", over="b").median > 1.4
    assert not ta.async_suspect and not tb.async_suspect
    # Warm-up and estimates run per provider (a.. b..); the 8 timed reps are interleaved,
    # each in a fresh order, so neither provider always takes the first slot.
    orders = ["".join("ab"[i] for i in o) for o in timing.rep_orders(2, 8, shuffle=True)]
    assert {"ab", "ba"} <= set(orders)
    assert "".join(orders) in "".join(order)
    assert any("rotating input sets" in n for n in ta.notes)
    order.clear()
    timing.compare({"a": make("a", 0.0005), "b": make("b", 0.0005)}, _small_args,
                   hw=h100, reps=8, warmup=1, shuffle=False)
    assert "ab" * 8 in "".join(order)


def test_rep_orders_shuffle_each_repetition() -> None:
    fixed = timing.rep_orders(3, 4, shuffle=False)
    assert fixed == [[0, 1, 2]] * 4
    orders = timing.rep_orders(3, 60, shuffle=True)
    assert all(sorted(o) == [0, 1, 2] for o in orders)
    assert orders == timing.rep_orders(3, 60, shuffle=True)  # seeded: every run the same
    firsts = {o[0] for o in orders}
    assert firsts == {0, 1, 2}  # every provider takes the first slot sometimes


def test_tiny_kernel_goes_to_graph_and_divides(fake, h100):
    def fn(x):
        if fake.capturing:
            fake.captured += 1

    t = timing.bench(fn, _small_args, hw=h100, reps=5, warmup=1)
    assert t.mode == "graph"
    assert fake.captured == timing.MAX_GRAPH_CALLS  # ~0 us estimate -> the cap
    # Each replay sleeps captured x 1 us; divided back per call: about 1 us plus overhead.
    assert 0.0005 < t.median_ms < 0.05
    assert any("CUDA graph" in n for n in t.notes)
    assert any("cache-warm" in n for n in t.notes)  # 1 KB sets: said, not hidden
    assert timing.bench(fn, _small_args, hw=h100, reps=3, warmup=1, graph=False).mode == "events"


def test_graph_capture_failure_falls_back_only_when_automatic(fake, h100):
    def fn(x):
        if fake.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")

    t = timing.bench(fn, _small_args, hw=h100, reps=3, warmup=1)
    assert t.mode == "events"
    assert any("graph capture failed" in n for n in t.notes)
    with pytest.raises(RuntimeError, match="capturing"):
        timing.bench(fn, _small_args, hw=h100, reps=3, warmup=1, graph=True)


def test_work_on_another_stream_is_flagged(fake, h100):
    def cheat(x):
        fake.submit_side(0.002)  # 2 ms of work the timed stream never sees

    def honest(x):
        time.sleep(0.002)

    t = timing.bench(cheat, _small_args, hw=h100, reps=5, warmup=1, graph=False)
    fake.synchronize()
    assert t.async_suspect
    assert t.wall_ms_per_call > 1.5
    assert any("ASYNC SUSPECT" in n for n in t.notes)
    h = timing.bench(honest, _small_args, hw=h100, reps=5, warmup=1, graph=False)
    assert not h.async_suspect
    assert h.wall_ms_per_call == pytest.approx(h.median_ms, rel=0.5)


def test_launch_bound_kernel_is_not_flagged(fake, h100):
    # Host overhead (50 us spent on the host per call) with tiny device work: the wall clock is
    # far above the event time, but nothing was left to drain, so no accusation.
    def launch_bound(x):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 5e-5:
            pass

    t = timing.bench(launch_bound, _small_args, hw=h100, reps=5, warmup=1, graph=False)
    assert not t.async_suspect


def test_large_inputs_are_not_rotated(fake, h100):
    calls = []

    def make_args():
        calls.append(1)
        return (torch.empty(h100.llc_bytes // 4 + 1),)

    t = timing.bench(lambda x: time.sleep(0.0003), make_args, hw=h100, reps=2, warmup=1)
    assert len(calls) == 1
    assert not any("rotating" in n for n in t.notes)
