"""Benchmark one op's providers side by side: the engine of `porter bench` and the suite.

For each shape x dtype: fresh random inputs from `problem.make_inputs`, all providers timed
interleaved on the same inputs (`harness.timing.compare`), bytes/FLOPs from the problem (or
derived from inputs + outputs), the roofline against datasheet and measured ceilings, the
speed-of-light flag, and each provider's speedup over every baseline with its spread.

Providers come in two calling conventions, both accepted:
    candidate(*inputs, out=out) -> out      the harness's out contract (ported kernels)
    baseline(*inputs) -> result             eager PyTorch, torch.compile, Liger, ...
A provider whose signature has an `out` parameter (or **kwargs) is called the first way; others
the second. Pass `out_contract` to say so explicitly where a signature cannot be read.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

import torch

from harness import roofline
from harness import timing

if TYPE_CHECKING:
    from harness.problem import Problem
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchRow:
    """One provider on one shape and dtype. Times in ms; percentages 0-100."""

    op: str
    provider: str
    shape: tuple[int, ...]
    dtype: str  # hardware-model key: "bf16"
    device: str  # hardware model name
    median_ms: float | None
    p20_ms: float | None
    p80_ms: float | None
    bytes_moved: int
    flops: int
    gbps: float | None = None
    tflops: float | None = None
    pct_measured_peak: float | None = None  # % of the binding measured ceiling
    pct_datasheet_peak: float | None = None  # % of the binding datasheet ceiling
    bound: str | None = None
    speedup: dict[str, timing.Ratio] = field(default_factory=dict)  # baseline -> t_base/t_self
    sol_exceeded: bool = False
    async_suspect: bool = False
    mode: str = ""
    notes: tuple[str, ...] = ()
    error: str | None = None  # set when the provider could not run; no numbers then

    @property
    def ok(self) -> bool:
        """True when timed and not flagged (neither beyond light nor escaping the events)."""
        return self.error is None and not self.sol_exceeded and not self.async_suspect


def takes_out(fn: Callable[..., Any]) -> bool:
    """True when `fn` follows the out contract (has an `out` parameter or **kwargs)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins and some C extensions have no signature
        return False
    return any(p.name == "out" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _empty_like(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return torch.empty_like(obj)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_empty_like(o) for o in obj)
    raise TypeError(f"bench_op: reference returned {type(obj).__name__}; expected tensor(s)")


def _wrap(fn: Callable[..., Any], out_contract: bool) -> Callable[..., Any]:
    # Argument sets are (*inputs, out): the out buffer travels with its inputs so every rotated
    # set has its own, and a plain baseline simply ignores it.
    if out_contract:
        return lambda *a: fn(*a[:-1], out=a[-1])
    return lambda *a: fn(*a[:-1])


def bench_op(problem: Problem, providers: Mapping[str, Callable[..., Any]], *,
             hw: HardwareModel, shapes: Sequence[tuple[int, ...]],
             dtypes: Sequence[torch.dtype], reps: int = 100, warmup: int = 10,
             baselines: Sequence[str] | None = None,
             out_contract: Mapping[str, bool] | None = None,
             graph: bool | None = None) -> list[BenchRow]:
    """Time every provider on every shape x dtype, interleaved, with roofline and speedups.

    Args:
        problem: the op (`make_inputs`, `reference` for output shapes, bytes/FLOPs).
        providers: name -> callable (out contract or plain; see the module docstring).
        hw: the hardware model of the device being timed on.
        shapes: problem shapes to sweep.
        dtypes: torch dtypes to sweep.
        reps: timed repetitions per provider.
        warmup: untimed calls per provider first.
        baselines: providers to compute speedups against; default every plain provider.
        out_contract: per-provider override of the calling convention.
        graph: passed to `timing.compare` (None: CUDA graphs for kernels under ~20 us).

    Returns:
        One `BenchRow` per provider per shape per dtype, in sweep order. A provider that raises
        on its first call gets a row with `error` set and is left out of that comparison.

    Raises:
        TimingUnavailable: on a machine without a GPU (before any input is built).
    """
    device = timing.require_gpu()
    if not providers:
        raise ValueError("bench_op: no providers given")
    conv = {name: (out_contract or {}).get(name, takes_out(fn)) for name, fn in providers.items()}
    base_names = list(baselines) if baselines is not None else [n for n, c in conv.items() if not c]
    unknown = [b for b in base_names if b not in providers]
    if unknown:
        raise ValueError(f"bench_op: baselines {unknown} are not providers {list(providers)}")

    rows: list[BenchRow] = []
    for shape in shapes:
        for dtype in dtypes:
            rows.extend(_bench_one(problem, providers, conv, base_names, hw, tuple(shape), dtype,
                                   device, reps, warmup, graph))
    return rows


def _bench_one(problem: Problem, providers: Mapping[str, Callable[..., Any]],
               conv: Mapping[str, bool], base_names: Sequence[str], hw: HardwareModel,
               shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, reps: int,
               warmup: int, graph: bool | None) -> list[BenchRow]:
    key = roofline.dtype_key(dtype)
    gen = torch.Generator(device=device)

    def make_inputs() -> tuple[Any, ...]:
        gen.seed()  # fresh, nondeterministic inputs for every set
        return tuple(problem.make_inputs(shape, dtype, device, gen))

    first = make_inputs()
    with torch.no_grad():
        template = problem.reference(*first)  # output shapes and dtypes, computed once

    def make_args() -> tuple[Any, ...]:
        return (*make_inputs(), _empty_like(template))

    probe = (*first, _empty_like(template))
    inputs, out = probe[:-1], probe[-1]
    n_bytes = (problem.bytes_moved(inputs, out) if problem.bytes_moved is not None
               else roofline.derive_bytes(inputs, out))
    n_flops = problem.flops(inputs, out) if problem.flops is not None else 0

    runnable: dict[str, Callable[..., Any]] = {}
    rows: dict[str, BenchRow] = {}
    for name, fn in providers.items():
        wrapped = _wrap(fn, conv[name])
        try:
            with torch.no_grad():
                wrapped(*probe)
            torch.cuda.synchronize()
            runnable[name] = wrapped
        except Exception as exc:  # a provider that cannot run is reported, not fatal
            log.warning("bench_op: %s failed on %s %s: %s", name, shape, key, exc)
            rows[name] = BenchRow(op=problem.name, provider=name, shape=shape, dtype=key,
                                  device=hw.name, median_ms=None, p20_ms=None, p80_ms=None,
                                  bytes_moved=n_bytes, flops=n_flops,
                                  error=f"{type(exc).__name__}: {exc}")
    del probe, first, inputs, out  # free before timing; `template` stays for make_args

    if runnable:
        with torch.no_grad():
            cmp = timing.compare(runnable, make_args, hw=hw, reps=reps, warmup=warmup,
                                 graph=graph)
        for name in runnable:
            t = cmp.timings[name]
            rl = roofline.analyze(n_bytes, n_flops, t.median_ms, hw, key)
            speedups = {b: cmp.speedup(name, over=b) for b in base_names
                        if b in runnable and b != name}
            rows[name] = BenchRow(
                op=problem.name, provider=name, shape=shape, dtype=key, device=hw.name,
                median_ms=t.median_ms, p20_ms=t.p20_ms, p80_ms=t.p80_ms,
                bytes_moved=n_bytes, flops=n_flops, gbps=rl.achieved_gbps,
                tflops=rl.achieved_tflops, pct_measured_peak=rl.pct_measured_peak,
                pct_datasheet_peak=rl.pct_peak, bound=rl.bound, speedup=speedups,
                sol_exceeded=rl.exceeds_speed_of_light, async_suspect=t.async_suspect,
                mode=t.mode,
                notes=t.notes + ((rl.message,) if rl.exceeds_speed_of_light else ()))
    return [rows[name] for name in providers]


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def format_table(rows: Sequence[BenchRow]) -> str:
    """Render rows as a plain-text table (median, p20-p80, GB/s or TFLOP/s, % peaks, speedups).

    Flags: "SOL!" for a time beyond the speed of light (not a win), "ASYNC?" for work escaping
    the timed stream, "ERR" for a provider that did not run (its error in the last column).
    """
    from tabulate import tabulate

    baselines = sorted({b for r in rows for b in r.speedup})
    headers = ["op", "shape", "dtype", "provider", "median ms", "p20-p80 ms", "GB/s", "TFLOP/s",
               "% meas", "% sheet"] + [f"x vs {b}" for b in baselines] + ["flags"]
    table = []
    for r in rows:
        flags = []
        if r.error:
            flags.append(f"ERR {r.error}")
        if r.sol_exceeded:
            flags.append("SOL! (beyond roofline: not a win)")
        if r.async_suspect:
            flags.append("ASYNC?")
        if r.mode == "graph":
            flags.append("graph")
        spd = []
        for b in baselines:
            s = r.speedup.get(b)
            spd.append("-" if s is None else f"{s.median:.2f} [{s.p20:.2f},{s.p80:.2f}]")
        table.append([
            r.op, "x".join(map(str, r.shape)), r.dtype, r.provider,
            _fmt(r.median_ms, ".4f"),
            "-" if r.p20_ms is None else f"{r.p20_ms:.4f}-{r.p80_ms:.4f}",
            _fmt(r.gbps, ".0f"),
            _fmt(r.tflops, ".1f") if r.flops else "-",
            _fmt(r.pct_measured_peak, ".1f"), _fmt(r.pct_datasheet_peak, ".1f"),
            *spd, " ".join(flags),
        ])
    return tabulate(table, headers=headers, tablefmt="simple", disable_numparse=True)
