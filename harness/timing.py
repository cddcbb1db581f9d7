"""Honest GPU timing: device events, flushed caches, rotated inputs, CUDA graphs, interleaving.

What a timed repetition looks like (events mode):

    flush LLC (write, then read, a buffer >= 2x the hardware model's last-level cache)
    start.record(); fn(*args[k]); end.record()          k rotates over K input sets

- Warm-up calls run first (compilation, autotuning, allocator growth are not timed).
- Only the region between the two events is timed; the flush is outside it, and it leaves the
  LLC clean: a write alone leaves it full of dirty lines, and the timed kernel then pays for
  their write-back (an H100 copy of 64 MB: 27.8 us after a write, 21.8 us after the write and a
  read; bench/NOTES.md item 32).
- When one input set fits in the LLC, K sets are built with `make_args()` (enough to overflow the
  LLC together) and used round-robin, so no repetition finds its inputs already cached.
- Kernels under ~20 us are dominated by launch cost; for them (graph=None) the calls are captured
  N at a time in a CUDA graph, each replay is timed and divided by N.
- Several providers (`compare`) are interleaved, each repetition in a fresh seeded order: in a
  fixed order a slot can be a few % slower than another (bench/NOTES.md item 21).
- Async-cheat guard: N back-to-back calls are also timed with a host wall clock between two full
  `torch.cuda.synchronize()`s. A kernel that does its work on another stream looks fast to events
  on the current stream but not to the wall clock; such results carry `async_suspect=True`.

On a machine without a GPU every entry point raises `TimingUnavailable`: interpreter timings mean
nothing, and we do not print them as if they did.
"""

from __future__ import annotations

import logging
import math
import random
import statistics
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import NamedTuple

import torch

from harness.roofline import derive_bytes

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)

GRAPH_THRESHOLD_MS = 0.020  # below this, launch overhead dominates events: use CUDA graphs
GRAPH_TARGET_MS = 1.0  # a captured graph holds enough calls to run about this long
# Device-side head start before each timed region (see _host_head_start): ~200 us at ~2 GHz,
# more than the host needs to launch any one provider here.
HEAD_START_CYCLES = 400_000
MAX_GRAPH_CALLS = 200
MAX_ARG_SETS = 32
MIN_FLUSH_BYTES = 64 << 20  # even a device with a small LLC gets a meaningful flush
WALL_CHECK_CALLS = 50
# The wall-clock check trusts a loop as device-bound when the final synchronize waited for at
# least this share of the loop's wall time (work still queued after the host finished launching).
DRAIN_SHARE = 0.25
# Flag when the wall clock per call exceeds events by this factor AND this absolute amount (the
# absolute part keeps small launch-bound kernels, whose wall time is host overhead, unflagged).
ASYNC_RATIO = 2.0
ASYNC_ABS_MS = 0.010

Mode = Literal["events", "graph"]


class TimingUnavailable(RuntimeError):
    """Timing was asked for where it cannot mean anything (no GPU)."""


@dataclass(frozen=True)
class CallArgs:
    """Positional and keyword arguments for one call, for `make_args` that need keywords."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Timing:
    """Per-call times in milliseconds over `reps` timed repetitions."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    reps: int
    mode: Mode
    notes: tuple[str, ...] = ()
    samples_ms: tuple[float, ...] = ()  # per repetition, in the order taken
    wall_ms_per_call: float | None = None  # from the synchronize-bracketed wall-clock check
    async_suspect: bool = False  # event time far below wall time: work escaping the events


class Ratio(NamedTuple):
    """Distribution of time(a) / time(b) over per-repetition pairs (< 1: a is faster).

    A tuple (median, p20, p80) as docs/INTERNAL_API.md states, with names for readability.
    """

    median: float
    p20: float
    p80: float


@dataclass(frozen=True)
class Comparison:
    """Interleaved timings of several providers on the same inputs."""

    timings: dict[str, Timing]
    order: tuple[str, ...]

    def ratio(self, a: str, b: str) -> Ratio:
        """time(a) / time(b), from the per-repetition pairs (so drift between reps cancels).

        Raises:
            KeyError: naming the unknown provider and the known ones.
        """
        for name in (a, b):
            if name not in self.timings:
                raise KeyError(f"Comparison.ratio: no provider {name!r}; have {list(self.order)}")
        ratios = [x / y for x, y in zip(self.timings[a].samples_ms, self.timings[b].samples_ms,
                                        strict=True) if y > 0]
        return Ratio(median=statistics.median(ratios), p20=quantile(ratios, 0.2),
                     p80=quantile(ratios, 0.8))

    def speedup(self, a: str, over: str) -> Ratio:
        """How many times faster `a` is than `over`: time(over) / time(a), per-rep pairs."""
        return self.ratio(over, a)


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (q in [0, 1]) of a non-empty sequence."""
    if not values:
        raise ValueError("quantile of an empty sequence")
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def require_gpu() -> torch.device:
    """The CUDA/ROCm device to time on.

    Raises:
        TimingUnavailable: on a machine without a GPU, saying so and where correctness runs.
    """
    if not torch.cuda.is_available():
        raise TimingUnavailable(
            "timing needs a GPU: torch.cuda.is_available() is False, so this machine has none; "
            "correctness still runs under the interpreter (porter check --interpret), and "
            "projections (labelled 'projected') are available without a device")
    return torch.device("cuda", torch.cuda.current_device())


# -- cache flushing -------------------------------------------------------------------------
# Kept for the process: allocating up to 512 MB per bench call would cost more than it frees.
_flush_buffers: dict[tuple[int, int], torch.Tensor] = {}


def flush_bytes(hw: HardwareModel) -> int:
    """Size of the flush buffer: at least twice the LLC (512 MB for a 256 MB Infinity Cache)."""
    return max(2 * int(hw.llc_bytes), MIN_FLUSH_BYTES)


def flush_llc(buf: torch.Tensor) -> None:
    """Evict everything cached and leave the LLC clean. The write evicts what was cached before
    (the last provider's output written back here, outside the timed region); the read then
    replaces the buffer's own dirty lines with clean ones, so no write-back is left for the
    timed kernel to pay. Triton's do_bench zeroes a buffer and stops there."""
    buf.fill_(1)
    buf.sum()


def _flush_buffer(hw: HardwareModel, device: torch.device) -> torch.Tensor:
    nbytes = flush_bytes(hw)
    key = (device.index or 0, nbytes)
    buf = _flush_buffers.get(key)
    if buf is None:
        buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device)
        _flush_buffers[key] = buf
    return buf


# -- argument sets --------------------------------------------------------------------------
def _as_call(args: Any) -> CallArgs:
    if isinstance(args, CallArgs):
        return args
    if isinstance(args, tuple):
        return CallArgs(args)
    return CallArgs((args,))


def arg_sets_needed(set_bytes: int, hw: HardwareModel) -> int:
    """How many input sets to rotate so that each one is evicted before it comes round again.

    One set when a set alone is at least the LLC size; otherwise enough sets to fill twice the
    LLC, capped at `MAX_ARG_SETS` (the flush between repetitions still covers the rest).
    """
    llc = int(hw.llc_bytes)
    if set_bytes <= 0 or set_bytes >= llc:
        return 1
    return min(MAX_ARG_SETS, math.ceil(2 * llc / set_bytes))


def _build_arg_sets(make_args: Callable[[], Any], hw: HardwareModel) -> list[CallArgs]:
    first = _as_call(make_args())
    set_bytes = derive_bytes(first.args, tuple(first.kwargs.values()))
    k = arg_sets_needed(set_bytes, hw)
    return [first] + [_as_call(make_args()) for _ in range(k - 1)]


# -- one provider prepared for timing --------------------------------------------------------
class _Runner:
    """Runs one repetition of one provider: a plain call, or a graph replay of N calls."""

    def __init__(self, name: str, fn: Callable[..., Any], sets: list[CallArgs]) -> None:
        self.name = name
        self.fn = fn
        self.sets = sets
        self.k = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.calls_per_rep = 1
        self.notes: list[str] = []

    def call(self) -> None:
        a = self.sets[self.k % len(self.sets)]
        self.k += 1
        self.fn(*a.args, **a.kwargs)

    def step(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.call()

    def capture(self, n_calls: int, llc_bytes: int) -> None:
        # Warm up on a side stream first, as torch.cuda.graphs requires for lazy init.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.call()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n_calls):
                self.call()
        torch.cuda.synchronize()
        self.graph = graph
        self.calls_per_rep = n_calls
        self.notes.append(f"CUDA graph of {n_calls} calls per replay over {len(self.sets)} "
                          f"input set(s)")
        touched = min(n_calls, len(self.sets)) * derive_bytes(self.sets[0].args,
                                                              tuple(self.sets[0].kwargs.values()))
        if n_calls > 1 and touched < llc_bytes:
            # The flush runs between replays only; calls inside one replay can hit the LLC.
            self.notes.append(f"inputs touched per replay ({touched} B) fit in the "
                              f"{llc_bytes} B LLC: calls after the first may run cache-warm")


def _host_head_start() -> None:
    """Queue ~200 us (HEAD_START_CYCLES) of idle device time so the host gets ahead of the device.

    Events bracket what the device executes between them. If the host is still preparing the
    launch (Python, argument checks, the Triton launcher) when the start event executes, the
    device idles inside the window and host overhead is counted as kernel time. A device-side
    sleep queued before the start event gives the host that head start, so every provider is
    timed on its device work alone, launch overhead excluded for all alike.
    """
    torch.cuda._sleep(HEAD_START_CYCLES)


def _estimate_ms(runner: _Runner, calls: int) -> float:
    """Median event time of single calls (warm cache): used only to choose graph mode."""
    times = []
    for _ in range(calls):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _host_head_start()
        s.record()
        runner.call()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def _wall_check(runner: _Runner, event_median_ms: float) -> tuple[float, bool, str | None]:
    """Time back-to-back calls between full synchronizes; flag events far below the wall clock.

    Only a device-bound loop says anything: if the final synchronize waited for a real backlog
    (the device drained queued work long after the host finished launching), the wall clock per
    call is the device's time per call. A launch-bound loop (host slower than the kernels) has
    almost nothing left to drain, and its high wall time is host overhead, not escaped work.
    """
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(WALL_CHECK_CALLS):
        runner.call()
    t_host = time.perf_counter()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    wall_total, drain = t1 - t0, t1 - t_host
    wall = wall_total * 1e3 / WALL_CHECK_CALLS
    device_bound = drain > DRAIN_SHARE * wall_total
    suspect = (device_bound and wall > ASYNC_RATIO * event_median_ms
               and wall - event_median_ms > ASYNC_ABS_MS)
    note = None
    if suspect:
        note = (f"ASYNC SUSPECT: {wall:.4g} ms/call by wall clock (synchronize-bracketed) vs "
                f"{event_median_ms:.4g} ms by events; work is escaping the timed stream")
        log.warning("%s: %s", runner.name, note)
    return wall, suspect, note


def _choose_graph(runners: Sequence[_Runner], graph: bool | None, warmup: int) -> list[int]:
    """Calls per graph replay for each runner (all 0 = events mode), after warming them up.

    The mode is one for all providers (launch overhead removed for all or none); the number of
    calls per replay is each provider's own, so a slow provider beside a tiny one is not
    captured hundreds of times over.
    """
    estimates = []
    for r in runners:
        for _ in range(warmup):
            r.call()
        torch.cuda.synchronize()
        estimates.append(_estimate_ms(r, 5))
    if graph is False or (graph is None and min(estimates) >= GRAPH_THRESHOLD_MS):
        return [0] * len(runners)
    return [max(1, min(MAX_GRAPH_CALLS, math.ceil(GRAPH_TARGET_MS / max(est, 1e-4))))
            for est in estimates]


def _prepare(fns: Mapping[str, Callable[..., Any]], make_args: Callable[[], Any],
             hw: HardwareModel, graph: bool | None, warmup: int) -> tuple[list[_Runner], Mode]:
    sets = _build_arg_sets(make_args, hw)
    runners = [_Runner(name, fn, sets) for name, fn in fns.items()]
    counts = _choose_graph(runners, graph, warmup)
    if not any(counts):
        return runners, "events"
    try:
        for r, n_calls in zip(runners, counts, strict=True):
            r.capture(n_calls, int(hw.llc_bytes))
    except Exception as exc:  # capture fails for host syncs, allocations, unsupported ops
        if graph is True:
            raise
        log.warning("CUDA graph capture failed (%s); timing all providers with events", exc)
        torch.cuda.synchronize()
        for r in runners:
            r.graph = None
            r.calls_per_rep = 1
            r.notes = [f"graph capture failed ({type(exc).__name__}: {exc}); events mode, "
                       "launch overhead included"]
        return runners, "events"
    return runners, "graph"


def rep_orders(n: int, reps: int, shuffle: bool) -> list[list[int]]:
    """The order of n providers in each repetition: the given order every time, or a fresh
    permutation per repetition (seeded, so every run times the same orders). In a fixed order
    one callable measured up to 5% apart at two positions of one run on an H100 (16 us
    kernels, bench/NOTES.md item 21); shuffled, the two agreed within 1.3%."""
    rng = random.Random(0)
    orders = []
    for _ in range(reps):
        order = list(range(n))
        if shuffle:
            rng.shuffle(order)
        orders.append(order)
    return orders


def _run_interleaved(runners: Sequence[_Runner], hw: HardwareModel, reps: int,
                     flush: bool, mode: Mode, shuffle: bool) -> dict[str, Timing]:
    device = torch.device("cuda", torch.cuda.current_device())
    buf = _flush_buffer(hw, device) if flush else None
    events = {r.name: [] for r in runners}
    for order in rep_orders(len(runners), reps, shuffle):
        for r in (runners[i] for i in order):
            if buf is not None:
                flush_llc(buf)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            _host_head_start()
            s.record()
            r.step()
            e.record()
            events[r.name].append((s, e))
    torch.cuda.synchronize()
    out = {}
    for r in runners:
        samples = [s.elapsed_time(e) / r.calls_per_rep for s, e in events[r.name]]
        med = statistics.median(samples)
        wall, suspect, note = _wall_check(r, med)
        notes = list(r.notes)
        if not flush:
            notes.append("LLC not flushed between repetitions")
        if len(r.sets) > 1:
            notes.append(f"{len(r.sets)} rotating input sets")
        if note:
            notes.append(note)
        out[r.name] = Timing(median_ms=med, p20_ms=quantile(samples, 0.2),
                             p80_ms=quantile(samples, 0.8), min_ms=min(samples), reps=reps,
                             mode=mode, notes=tuple(notes), samples_ms=tuple(samples),
                             wall_ms_per_call=wall, async_suspect=suspect)
    return out


def bench(fn: Callable[..., Any], make_args: Callable[[], Any], *, hw: HardwareModel,
          reps: int = 100, warmup: int = 10, graph: bool | None = None,
          flush: bool = True) -> Timing:
    """Time `fn(*make_args())` on the GPU.

    Args:
        fn: the callable to time; it must launch its work on the current CUDA stream.
        make_args: builds one argument set (a tuple, or `CallArgs` for keywords); called K
            times when one set fits in the LLC, so sets can rotate.
        hw: the device's hardware model (sizes the flush buffer and input rotation).
        reps: timed repetitions.
        warmup: untimed calls first.
        graph: True forces CUDA-graph mode (raising if capture fails), False forbids it, None
            uses it for kernels under ~20 us.
        flush: write a >= 2x LLC buffer before each repetition.

    Returns:
        `Timing` with median/p20/p80/min per call in ms, the mode, notes and the async flag.

    Raises:
        TimingUnavailable: on a machine without a GPU.
    """
    return compare({"fn": fn}, make_args, hw=hw, reps=reps, warmup=warmup, graph=graph,
                   flush=flush).timings["fn"]


def compare(providers: Mapping[str, Callable[..., Any]], make_args: Callable[[], Any], *,
            hw: HardwareModel, reps: int = 100, warmup: int = 10, graph: bool | None = None,
            flush: bool = True, shuffle: bool = True) -> Comparison:
    """Time several providers interleaved (A B C, C A B, ...: a fresh order every repetition)
    on the same argument sets.

    Each repetition of each provider is preceded by its own flush, so no provider inherits a
    warm cache from the one before it; machine drift (clocks, temperature) hits all providers
    alike and cancels in `Comparison.ratio`. All providers use the same mode: graph mode when
    the fastest is under ~20 us (and graph is not False), so launch overhead is removed for all
    or none.

    Args:
        providers: name -> callable, each called as fn(*args) with the same argument sets.
        make_args: as for `bench`.
        hw, reps, warmup, graph, flush: as for `bench`.
        shuffle: a fresh (seeded) order of the providers every repetition (`rep_orders`), so
            that no provider always takes the same slot; False keeps the given order.

    Returns:
        A `Comparison` with one `Timing` per provider.

    Raises:
        TimingUnavailable: on a machine without a GPU.
        ValueError: with no providers or reps < 1.
    """
    require_gpu()
    if not providers:
        raise ValueError("timing.compare: no providers given")
    if reps < 1:
        raise ValueError(f"timing.compare: reps must be >= 1, got {reps}")
    runners, mode = _prepare(providers, make_args, hw, graph, warmup)
    timings = _run_interleaved(runners, hw, reps, flush, mode, shuffle)
    return Comparison(timings=timings, order=tuple(providers))


@dataclass(frozen=True)
class CallTime:
    """What a Python caller sees, calling back to back on one input set (a model's loop).

    cpu_us: host time per call until the call returned (its Python and launch cost; the work is
    still queued). call_us: host time per call until the device finished them all: the larger
    of the CPU cost and the device time, plus gaps. The one that binds a speed claim is call_us.
    """

    cpu_us: float
    call_us: float
    calls: int  # calls per round; medians over `rounds`
    rounds: int


def call_time(fn: Callable[..., Any], args: Sequence[Any], *, calls: int = 200, rounds: int = 7,
              warmup: int = 20) -> CallTime:
    """`fn(*args)` called `calls` times back to back, `rounds` times: medians of `CallTime`.

    The same inputs every call, as a model's layers see one activation size after another; no
    cache flush (a call's few MB may sit in L2, as they would in the model). 200 calls of up to
    three launches each stay under the launch queue's depth, so the CPU time is not the queue's.

    Raises:
        TimingUnavailable: on a machine without a GPU.
    """
    require_gpu()
    for _ in range(warmup):
        fn(*args)
    torch.cuda.synchronize()
    cpu, wall = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        cpu.append((t1 - t0) / calls * 1e6)
        wall.append((t2 - t0) / calls * 1e6)
    return CallTime(statistics.median(cpu), statistics.median(wall), calls, rounds)
