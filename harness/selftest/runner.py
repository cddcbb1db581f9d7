"""Run every self-test kernel through the judge and say which stage caught it.

A bad kernel is caught "for the right reason" only when the stage (or guard) that failed it is
the one it was built for and the failure kind matches (e.g. the unwritten-row kernel must fail on
NaN poison, not on a numeric mismatch). The correct kernel must pass all five stages.

The `metal_*` cases are Metal kernels run on the CPU Metal executor (harness.selftest.
metal_kernels): always on the CPU, whatever the device, and their errors must also name the
Metal rule broken (`expected_message`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from harness.check import check
from harness.selftest.problem import softmax_problem
from targets.interpreter import import_file
from targets.interpreter import triton_interpret

log = logging.getLogger(__name__)

PASS = "passes all stages"
# Shape for the speed-of-light case on a GPU: 256 MiB per fp32 tensor, far above any LLC, so the
# timer uses one input set (every call sees the same buffers, which is what the memoizer needs).
SOL_SHAPE = (8192, 8192)


@dataclass(frozen=True)
class SelftestRow:
    """One self-test kernel's verdict.

    `expected_stage` is the stage or guard that must catch it (`PASS` for the good kernel);
    `caught_by` is what actually failed it (None: nothing did).
    """

    kernel: str
    expected_stage: str
    caught_by: str | None
    message: str
    ok: bool
    expected_reason: str | None = None
    reason: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class _Case:
    name: str
    make: Callable[[ModuleType], Callable[..., Any]]  # builds a fresh candidate (stateful ones)
    expected_stage: str
    expected_reason: str | None = None
    # None: a Triton kernel, judged on the self-test device; else the target backend whose
    # candidate it is, judged on the CPU by that backend's CPU check ("metal": the executor)
    backend: str | None = None
    expected_message: str | None = None  # must appear in the failure message


def _metal(variant: str) -> Callable[[ModuleType], Callable[..., Any]]:
    def make(_kernels: ModuleType) -> Callable[..., Any]:
        from harness.selftest.metal_kernels import MetalSoftmax

        return MetalSoftmax(variant)

    return make


CASES: tuple[_Case, ...] = (
    _Case("good", lambda k: k.softmax_good, PASS),
    _Case("bias", lambda k: k.softmax_bias, "smoke", "mismatch"),
    _Case("unwritten", lambda k: k.softmax_unwritten, "smoke", "nonfinite"),
    _Case("pow2_only", lambda k: k.softmax_pow2, "odd_sizes"),
    _Case("nondeterministic", lambda k: k.softmax_noisy, "determinism", "nondeterministic"),
    _Case("torch_compute", lambda k: k.softmax_torch, "no_torch_compute", "torch_compute"),
    _Case("early_return", lambda k: k.SoftmaxEarly(), "completion", "early_return"),
    _Case("memoize", lambda k: k.SoftmaxMemo(), "stale_output", "stale"),
    _Case("metal_good", _metal("good"), PASS, backend="metal"),
    _Case("metal_missing_barrier", _metal("missing_barrier"), "smoke", "error", "metal",
          "data race on threadgroup memory"),
    _Case("metal_wrong_threads", _metal("wrong_threads"), "smoke", "error", "metal",
          "no thread wrote it"),
    _Case("metal_small_threadgroup", _metal("small_threadgroup"), "sweep", "error", "metal",
          "out of bounds"),
    _Case("metal_full_simd", _metal("full_simd"), "odd_sizes", "nonfinite", "metal"),
    _Case("metal_off_by_one", _metal("off_by_one"), "odd_sizes", "nonfinite", "metal"),
    _Case("metal_row_overrun", _metal("row_overrun"), "smoke", "error", "metal",
          "written by threadgroup 1 after threadgroup 0"),
)


def load_kernels(interpret: bool) -> ModuleType:
    """Import `kernels.py` with TRITON_INTERPRET set for the mode, once per mode.

    @triton.jit decides interpreter-or-compiler when the decorator runs, so the interpreted and
    the compiled kernels are two module objects under two names.
    """
    name = f"harness.selftest._kernels_{'interpreted' if interpret else 'native'}"
    if name in sys.modules:
        return sys.modules[name]
    with triton_interpret(interpret):
        module = import_file(Path(__file__).with_name("kernels.py"), name)
    return module


def resolve_device(device: str | None) -> str:
    """ "cpu" | "cuda"; None or "auto": cuda when torch sees a GPU."""
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"self-test device must be cpu, cuda or auto, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("self-test device cuda asked for, but torch.cuda.is_available() is False")
    return device


def run(
    device: str | None = "cpu",
    *,
    progress: Callable[[str], None] | None = None,
    only: tuple[str, ...] | None = None,
) -> list[SelftestRow]:
    """Judge every self-test kernel on `device`.

    Args:
        device: "cpu" (Triton interpreter), "cuda" (real launches, plus the speed-of-light
            check through harness.timing and harness.roofline), or None/"auto".
        progress: called with each kernel's name before it is judged.
        only: restrict to these case names (tests use it to stay fast).

    Returns:
        One `SelftestRow` per kernel (and, on a GPU, one for the memoizer's timing).
    """
    dev = resolve_device(device)
    interpret = dev == "cpu"
    kernels = load_kernels(interpret)
    problem = softmax_problem()
    rows: list[SelftestRow] = []
    for case in CASES:
        if only is not None and case.name not in only:
            continue
        if progress is not None:
            progress(case.name)
        if case.backend is not None and (why := _no_cpu_check(case.backend)) is not None:
            rows.append(SelftestRow(case.name, case.expected_stage, None, why, False,
                                    case.expected_reason))
            continue
        candidate = case.make(kernels)
        on = dev if case.backend is None else "cpu"
        report = check(problem, candidate, device=on, interpret=interpret or on == "cpu")
        if hasattr(candidate, "join"):
            candidate.join()  # no late writer may outlive its case
        failed = report.failed
        seconds = sum(s.seconds for s in report.stages)
        if case.expected_stage == PASS:
            ok = report.passed
            message = (
                "all five stages passed" if ok else (failed.message if failed else "incomplete")
            )
            caught, reason = (None, None) if failed is None else (failed.caught_by, failed.reason)
        else:
            caught = None if failed is None else failed.caught_by
            reason = None if failed is None else failed.reason
            message = failed.message if failed is not None else "slipped through every stage"
            ok = caught == case.expected_stage and (
                case.expected_reason is None or reason == case.expected_reason
            ) and (case.expected_message is None or case.expected_message in message)
        rows.append(
            SelftestRow(
                case.name,
                case.expected_stage,
                caught,
                message,
                ok,
                case.expected_reason,
                reason,
                seconds,
            )
        )
    if dev == "cuda" and (only is None or "memoize_timing" in only):
        if progress is not None:
            progress("memoize_timing")
        rows.append(_speed_of_light_row(kernels))
    return rows


def _no_cpu_check(backend: str) -> str | None:
    """Why a case of `backend` cannot be judged here (the backend's capabilities name no CPU
    check), or None. The Metal executor's own reason (no C++ compiler) is given where known."""
    from targets.registry import get_backend

    if get_backend(backend).capabilities().cpu_check is not None:
        return None
    from targets.metal_exec import available

    ok, why = available()
    return f"not run: {why}" if not ok else f"not run: the {backend} backend has no CPU check here"


def _speed_of_light_row(kernels: ModuleType) -> SelftestRow:
    """Time the memoizer on the GPU; the roofline must flag its time as impossible."""
    import hwmodels
    from harness import roofline
    from harness import timing

    name, expected = "memoize_timing", "speed_of_light"
    detection = hwmodels.detect()
    hw = detection.model
    if hw is None:
        return SelftestRow(name, expected, None, f"no hardware model: {detection.reason}", False)
    problem = softmax_problem()
    gen = torch.Generator(device="cuda")
    gen.manual_seed(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))
    (x,) = problem.make_inputs(SOL_SHAPE, torch.float32, torch.device("cuda"), gen)
    out = torch.empty_like(x)
    memo = kernels.SoftmaxMemo()
    # graph=False: the memoizer launches nothing after the first call, and an empty CUDA graph
    # is not what we want to time; events around a no-op give the honest "impossibly fast" time.
    t = timing.bench(
        lambda a, o: memo(a, out=o), lambda: (x, out), hw=hw, reps=20, warmup=3, graph=False
    )
    assert problem.bytes_moved is not None
    bytes_moved = problem.bytes_moved((x,), out)
    # A no-op can time at 0.0 ms on the event clock; the smallest positive time keeps
    # analyze's "time > 0" rule and is still (correctly) faster than light.
    time_ms = max(t.median_ms, 1e-6)
    r = roofline.analyze(bytes_moved, 0, time_ms, hw, torch.float32)
    message = (
        f"median {t.median_ms:.4f} ms for {bytes_moved / 1e6:.0f} MB; floor "
        f"{r.floor_ms:.4f} ms; {r.message}"
    )
    caught = "speed_of_light" if r.exceeds_speed_of_light else None
    return SelftestRow(
        name,
        expected,
        caught,
        message,
        caught == expected,
        "exceeds_speed_of_light",
        "exceeds_speed_of_light" if caught else None,
    )
