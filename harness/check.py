"""Five-stage correctness check: smoke, sweep, adversarial, determinism, odd sizes.

`check(problem, candidate)` runs the stages in order and stops at the first that fails. Every
trial follows the same rules:

- fresh inputs from `problem.make_inputs`, with a generator seeded from `os.urandom` (the seed is
  in every failure message, so a failure can be replayed); every floating-point input must have
  the dtype asked for (integer and bool inputs, e.g. class targets, are exempt): a spec that
  always returns float32 would otherwise pass as "fp16/bf16 checked" without either being run;
- the reference runs on upcast copies of those same inputs, in float64 on CPU and float32 on a
  GPU (float64 there is slow on most parts and float32 already has ~2^-24 error, far below the
  tolerances of the low-precision dtypes);
- the harness allocates the outputs (reference's shape, candidate's dtype) and poisons them with
  NaN (integers: the dtype's minimum), so an element the kernel never wrote fails;
- the candidate is called as `candidate(*inputs, out=out)` and must return `out`;
- NaN/Inf where the reference is finite always fails; the rest is compared with the
  per-dtype, per-target policy of `harness.tolerance`.

During smoke and sweep the guards also run: no torch compute (`harness.guards`), completion
(the output does not change after the call returned), and, once in smoke, stale output (the same
input tensors with new contents must give new results).

On CPU the Triton interpreter runs the kernels; sweep shapes are shrunk there (same rank, same
power-of-two-ness) so a stage takes seconds, and the shapes actually used are in the report.

The problem's own code (make_inputs, reference, adversarial) failing is not a verdict on the
candidate: the check raises `ProblemError` naming the stage, shape, dtype and seed instead.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
import types
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

import torch

from harness import guards
from harness.problem import Problem
from harness.problem import ProblemError
from harness.problem import Shape
from harness.tolerance import Tolerance
from harness.tolerance import tolerance
from targets.interpreter import triton_interpret

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)

STAGES: tuple[str, ...] = ("smoke", "sweep", "adversarial", "determinism", "odd_sizes")
# On ill-conditioned inputs a candidate may be off by at most this many times eager PyTorch's own
# error in the same dtype (both against the float64/float32 reference); see _compare.
NATIVE_ERROR_FACTOR = 4.0
# ... or within this many times the exact result's own change when every input moves by up to
# one ulp of its dtype (backward stability; see _Sensitivity).
SENSITIVITY_FACTOR = 8.0
GUARDS: tuple[str, ...] = ("no_torch_compute", "completion", "stale_output")
# Sizes the odd-sizes stage puts in the innermost dim: non-powers of two around common widths,
# a single element and a small prime.
ODD_INNER_SIZES: tuple[int, ...] = (1023, 1537, 4097, 1, 7)
# Under the interpreter, shapes are shrunk until the product of their dims fits these budgets.
INTERPRET_SWEEP_BUDGET = 1 << 14
INTERPRET_ODD_BUDGET = 1 << 16
DETERMINISM_RUNS = 3
CPU_COMPLETION_WAIT_S = 0.05
# Trials the adversarial stage runs per dtype, for `planned_trials` (generic_adversarial has 5
# or 6 cases; a problem's own maker may have more or fewer).
ADVERSARIAL_CASES_ESTIMATE = 6
# (stage, shape, dtype) at the start of each trial; see `check(progress=...)`.
Progress = Callable[[str, Shape, torch.dtype], None]


@dataclass(frozen=True)
class StageResult:
    """Outcome of one stage.

    `caught_by` is the stage name, or the guard's name when a guard failed inside the stage;
    `reason` is a short code: mismatch | nonfinite | error | contract | torch_compute |
    early_return | stale | nondeterministic.
    """

    name: str
    passed: bool
    message: str
    shapes: tuple[Shape, ...] = ()
    dtypes: tuple[str, ...] = ()
    trials: int = 0
    seconds: float = 0.0
    caught_by: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class CheckReport:
    """All stages run for one candidate; stages after the first failure are absent."""

    problem: str
    device: str
    interpreted: bool
    stages: tuple[StageResult, ...]
    tolerances: str
    requested: tuple[str, ...] = STAGES
    shapes: dict[str, tuple[Shape, ...]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        ran = [s.name for s in self.stages]
        return all(s.passed for s in self.stages) and ran == list(self.requested)

    @property
    def failed(self) -> StageResult | None:
        return next((s for s in self.stages if not s.passed), None)

    @property
    def caught_by(self) -> str | None:
        failed = self.failed
        return None if failed is None else failed.caught_by

    def summary(self) -> str:
        """Multi-line text: one line per stage, then the tolerance policy."""
        mode = "interpreter" if self.interpreted else "native"
        lines = [
            f"check {self.problem} on {self.device} ({mode}): {'PASS' if self.passed else 'FAIL'}"
        ]
        for s in self.stages:
            tag = "ok  " if s.passed else "FAIL"
            lines.append(f"  {tag} {s.name:<12} {s.seconds:6.2f}s  {s.message}")
        lines.append(f"  tolerances: {self.tolerances}")
        return "\n".join(lines)


class _Fail(Exception):
    """A trial failed; carries the stage-independent part of the message."""

    def __init__(self, reason: str, message: str, guard: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.guard = guard


@dataclass
class _Ctx:
    problem: Problem
    candidate: Callable[..., Any]
    device: torch.device
    interpreted: bool
    hw: HardwareModel | None
    uses_matrix_units: bool
    ref_dtype_default: torch.dtype
    used_tolerances: dict[str, Tolerance] = field(default_factory=dict)
    native_floor_used: list[str] = field(default_factory=list)
    max_abs: float = 0.0
    max_rel: float = 0.0
    progress: Progress | None = None
    # Where the check is now, for `progress` and for ProblemError's message.
    stage: str | None = None
    shape: Shape | None = None
    dtype: torch.dtype | None = None
    seed: int | None = None


# --------------------------------------------------------------------------------------
# public entry point


def check(
    problem: Problem,
    candidate: Callable[..., Any],
    *,
    device: str | torch.device = "cpu",
    interpret: bool | None = None,
    hw: HardwareModel | None = None,
    stages: Sequence[str] | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    store: Any | None = None,
    progress: Progress | None = None,
) -> CheckReport:
    """Judge `candidate` against `problem.reference` in up to five stages.

    Args:
        problem: what the op means (reference, inputs, shapes, dtypes).
        candidate: `candidate(*inputs, out=out) -> out`.
        device: "cpu" or "cuda" (or a torch.device); inputs and outputs live there.
        interpret: run Triton kernels in the interpreter. None: yes on CPU, no on a GPU.
            The candidate's module must have been imported with TRITON_INTERPRET=1 for the
            interpreter to take effect; the variable is kept "1" while the check runs.
        hw: the target device's hardware model (tolerance overrides). None on a GPU: detected.
        stages: a subset of STAGES to run, in the canonical order. None: all five.
        dtypes: the dtypes to check; None: `problem.dtypes`.
        store: optional results store (`harness.store.ResultsStore`); the outcome is recorded.
        progress: called as `progress(stage, shape, dtype)` whenever a trial starts on a new
            (stage, shape, dtype), before its inputs are made; e.g. so that a parent process
            can say where a candidate that crashed its process was.

    Returns:
        A `CheckReport`; `report.passed` is True only if every requested stage passed.

    Raises:
        ProblemError: the problem's own code failed (make_inputs or the reference raised, the
            inputs are all zeros or a floating input has another dtype than the one asked).
        ValueError: unknown stage names, or no dtypes to check.
    """
    dev = torch.device(device)
    interpreted = dev.type == "cpu" if interpret is None else interpret
    wanted = tuple(STAGES) if stages is None else tuple(s for s in STAGES if s in set(stages))
    unknown = set(stages or ()) - set(STAGES)
    if unknown:
        raise ValueError(f"unknown stage(s) {sorted(unknown)}; stages are {list(STAGES)}")
    if hw is None and dev.type == "cuda":
        hw = _detect_hw()
    dts = tuple(dtypes) if dtypes is not None else tuple(problem.dtypes)
    if not dts:
        raise ValueError(f"problem {problem.name}: no dtypes to check")
    ctx = _Ctx(
        problem=problem,
        candidate=candidate,
        device=dev,
        interpreted=interpreted,
        hw=hw,
        uses_matrix_units=bool(problem.extra.get("uses_matrix_units", False)),
        ref_dtype_default=torch.float64 if dev.type == "cpu" else torch.float32,
        progress=progress,
    )
    runners = {
        "smoke": _stage_smoke,
        "sweep": _stage_sweep,
        "adversarial": _stage_adversarial,
        "determinism": _stage_determinism,
        "odd_sizes": _stage_odd_sizes,
    }
    results: list[StageResult] = []
    shapes: dict[str, tuple[Shape, ...]] = {}
    with triton_interpret(True if interpreted else None):
        for name in wanted:
            ctx.stage, ctx.shape, ctx.dtype, ctx.seed = name, None, None, None
            t0 = time.perf_counter()
            result = runners[name](ctx, dts)
            result = _with_seconds(result, time.perf_counter() - t0)
            log.info("%s %s: %s", problem.name, name, "pass" if result.passed else result.message)
            results.append(result)
            shapes[name] = result.shapes
            if not result.passed:
                break
    report = CheckReport(
        problem=problem.name,
        device=str(dev),
        interpreted=interpreted,
        stages=tuple(results),
        tolerances="; ".join(
            [f"{k}: {v.describe()}" for k, v in ctx.used_tolerances.items()]
            + ([f"{len(ctx.native_floor_used)} ill-conditioned comparison(s) held to input "
                f"sensitivity or {NATIVE_ERROR_FACTOR:g}x eager PyTorch's own error, e.g. "
                f"{ctx.native_floor_used[0]}"] if ctx.native_floor_used else [])),
        requested=wanted,
        shapes=shapes,
    )
    if store is not None:
        variant = getattr(candidate, "__name__", type(candidate).__name__)
        _record(store, report, hw, variant, ctx.max_abs, ctx.max_rel)
    return report


# --------------------------------------------------------------------------------------
# stages


def _stage_smoke(ctx: _Ctx, dtypes: tuple[torch.dtype, ...]) -> StageResult:
    shape = tuple(ctx.problem.smoke_shape)
    dtype = dtypes[0]
    try:
        inputs, seed = _fresh_inputs(ctx, shape, dtype)
        out = _run_trial(ctx, inputs, "random", shape, dtype, seed, with_guards=True)
        _stale_output_guard(ctx, inputs, out, shape, dtype)
    except _Fail as f:
        return _failed("smoke", f, (shape,), dtype)
    return StageResult("smoke", True, _pass_text(ctx, 1, 1), (shape,), (_dn(dtype),), 1)


def _stage_sweep(ctx: _Ctx, dtypes: tuple[torch.dtype, ...]) -> StageResult:
    shapes = sweep_shapes(ctx.problem, ctx.interpreted)
    trials = 0
    for dtype in dtypes:
        for shape in shapes:
            try:
                inputs, seed = _fresh_inputs(ctx, shape, dtype)
                _run_trial(ctx, inputs, "random", shape, dtype, seed, with_guards=True)
            except _Fail as f:
                return _failed("sweep", f, shapes, dtype, trials)
            trials += 1
    return StageResult(
        "sweep", True, _pass_text(ctx, len(shapes), len(dtypes)), shapes, _dns(dtypes), trials
    )


def _stage_adversarial(ctx: _Ctx, dtypes: tuple[torch.dtype, ...]) -> StageResult:
    shape = tuple(ctx.problem.smoke_shape)
    trials = 0
    skipped: list[str] = []
    for dtype in dtypes:
        seed = _new_seed()
        _at(ctx, shape, dtype, seed)
        gen = _generator(ctx.device, seed)
        if ctx.problem.adversarial is not None:
            cases = _call_problem(ctx, "adversarial", ctx.problem.adversarial,
                                  shape, dtype, ctx.device, gen)
        else:
            # generic_adversarial starts from make_inputs: its failure is the problem's too
            cases = _call_problem(ctx, "make_inputs (for the adversarial cases)",
                                  generic_adversarial, ctx.problem, shape, dtype, ctx.device, gen)
        for label, inputs in cases:
            _check_input_dtypes(ctx, inputs, dtype, f"adversarial case {label!r}")
            ref = _reference(ctx, inputs, dtype)
            if not _representable(ref[0], dtype):
                # e.g. squares of near-max fp16 values: no fp16 output could hold the answer.
                skipped.append(f"{label}/{_dn(dtype)}")
                continue
            try:
                _run_trial(ctx, inputs, label, shape, dtype, seed, ref=ref)
            except _Fail as f:
                return _failed("adversarial", f, (shape,), dtype, trials)
            trials += 1
    if trials == 0:
        msg = f"no adversarial case was representable in the output dtype (skipped {skipped})"
        return StageResult(
            "adversarial",
            False,
            msg,
            (shape,),
            _dns(dtypes),
            0,
            reason="error",
            caught_by="adversarial",
        )
    note = f"; skipped (reference not representable): {', '.join(skipped)}" if skipped else ""
    return StageResult(
        "adversarial",
        True,
        f"{trials} cases" + note + "; " + _pass_text(ctx, 1, len(dtypes)),
        (shape,),
        _dns(dtypes),
        trials,
    )


def _stage_determinism(ctx: _Ctx, dtypes: tuple[torch.dtype, ...]) -> StageResult:
    shape = tuple(ctx.problem.smoke_shape)
    tol = ctx.problem.nondeterminism_tolerance
    for dtype in dtypes:
        try:
            inputs, seed = _fresh_inputs(ctx, shape, dtype)
            first = _run_trial(ctx, inputs, "random", shape, dtype, seed)
            first = [t.clone() for t in first]
            for run in range(1, DETERMINISM_RUNS):
                again = _run_trial(ctx, inputs, "random", shape, dtype, seed)
                for i, (a, b) in enumerate(zip(first, again, strict=True)):
                    if _same(a, b, tol):
                        continue
                    diff = (a.double() - b.double()).abs().nan_to_num(nan=math.inf)
                    worst = _index(diff.argmax(), diff.shape)
                    limit = "bitwise identical" if tol == 0 else f"within {tol:g}"
                    raise _Fail(
                        "nondeterministic",
                        f"run {run + 1} of {DETERMINISM_RUNS} on the same input differs from "
                        f"run 1 (expected {limit}): output {i}, "
                        f"{int((diff > tol).sum())} of {diff.numel()} elements differ, "
                        f"max diff {float(diff.max()):.3e} at index {worst} "
                        f"({_describe_trial('random', shape, dtype, seed)})",
                    )
        except _Fail as f:
            return _failed("determinism", f, (shape,), dtype)
    if tol == 0:
        msg = f"{DETERMINISM_RUNS} runs bitwise identical for {', '.join(_dns(dtypes))}"
    else:
        msg = (
            f"{DETERMINISM_RUNS} runs within declared tolerance {tol:g} "
            f"(reason: {ctx.problem.nondeterminism_reason or 'none given'})"
        )
    return StageResult(
        "determinism", True, msg, (shape,), _dns(dtypes), DETERMINISM_RUNS * len(dtypes)
    )


def _stage_odd_sizes(ctx: _Ctx, dtypes: tuple[torch.dtype, ...]) -> StageResult:
    shapes = odd_shapes(ctx.problem, ctx.interpreted)
    dtype = dtypes[0]
    trials = 0
    for shape in shapes:
        try:
            inputs, seed = _fresh_inputs(ctx, shape, dtype)
            _run_trial(ctx, inputs, "random", shape, dtype, seed)
        except _Fail as f:
            return _failed("odd_sizes", f, shapes, dtype, trials)
        trials += 1
    return StageResult(
        "odd_sizes", True, _pass_text(ctx, len(shapes), 1), shapes, (_dn(dtype),), trials
    )


# --------------------------------------------------------------------------------------
# shapes


def shrink_shape(shape: Shape, budget: int, keep_last: bool = False) -> Shape:
    """Shrink `shape` until the product of its dims is <= budget, keeping its structure.

    The largest dim is halved (earliest first on ties); rank never changes and a dim that was
    not a power of two stays one (4097 -> 2048 -> 2047), so masking paths stay exercised.
    With `keep_last`, the innermost dim is never touched (odd-sizes: it is the point).
    """
    dims = list(shape)
    candidates = list(range(len(dims) - 1 if keep_last else len(dims)))
    while math.prod(dims) > budget:
        shrinkable = [i for i in candidates if dims[i] > 1]
        if not shrinkable:
            break
        i = max(shrinkable, key=lambda k: (dims[k], -k))
        d = dims[i]
        nd = max(1, d // 2)
        if not _is_pow2(d) and _is_pow2(nd) and nd > 2:
            nd -= 1
        dims[i] = nd
    return tuple(dims)


def sweep_shapes(problem: Problem, interpreted: bool) -> tuple[Shape, ...]:
    """The sweep stage's shapes: the problem's, or (interpreter) shrunk ones, de-duplicated.

    `problem.extra["interpret_shapes"]` overrides the shrinking under the interpreter.
    """
    if not interpreted:
        return _dedup(tuple(s) for s in problem.sweep_shapes)
    given = problem.extra.get("interpret_shapes")
    if given:
        return _dedup(tuple(s) for s in given)
    return _dedup(shrink_shape(tuple(s), INTERPRET_SWEEP_BUDGET) for s in problem.sweep_shapes)


def odd_shapes(problem: Problem, interpreted: bool) -> tuple[Shape, ...]:
    """The odd-sizes stage's shapes: the problem's, or derived from the smoke shape.

    Derived: the innermost dim replaced by each of ODD_INNER_SIZES, plus one shape whose outer
    dims are odd too (3 and 5 rows). Under the interpreter, outer dims shrink only when the
    shape exceeds INTERPRET_ODD_BUDGET.
    """
    if problem.odd_shapes:
        shapes = [tuple(s) for s in problem.odd_shapes]
    else:
        smoke = tuple(problem.smoke_shape)
        shapes = [smoke[:-1] + (n,) for n in ODD_INNER_SIZES]
        if len(smoke) >= 2:
            shapes.append(
                tuple(3 if i % 2 == 0 else 5 for i in range(len(smoke) - 1)) + (ODD_INNER_SIZES[0],)
            )
    if interpreted:
        shapes = [shrink_shape(s, INTERPRET_ODD_BUDGET, keep_last=True) for s in shapes]
    return _dedup(shapes)


def planned_trials(problem: Problem, interpreted: bool, stages: Sequence[str] | None = None,
                   dtypes: Sequence[torch.dtype] | None = None) -> int:
    """How many trials `check` runs when every stage passes (an estimate for adversarial).

    For time limits that scale with the work: a caller running the check in a child process
    gives it a base time plus an allowance per trial.
    """
    wanted = STAGES if stages is None else tuple(s for s in STAGES if s in set(stages))
    n_dtypes = len(dtypes if dtypes is not None else problem.dtypes)
    per_stage = {
        "smoke": 2,  # the trial and the stale-output guard's second call
        "sweep": len(sweep_shapes(problem, interpreted)) * n_dtypes,
        "adversarial": ADVERSARIAL_CASES_ESTIMATE * n_dtypes,
        "determinism": DETERMINISM_RUNS * n_dtypes,
        "odd_sizes": len(odd_shapes(problem, interpreted)),
    }
    return sum(per_stage[s] for s in wanted)


def generic_adversarial(
    problem: Problem, shape: Shape, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> list[tuple[str, tuple[Any, ...]]]:
    """Adversarial inputs that make sense for any floating-point op.

    Only the first floating tensor input (the data) is replaced; others (weights, ...) keep
    their random values, so the op's own parameters stay in a sane range. Rows are the
    innermost dim.

    Cases: all values large and identical (softmax max-subtraction, norm overflow of x^2 in
    low precision), one all-equal row among random ones, near-zero-variance rows, values
    spanning many decades, values near the smallest normal, and for dtypes whose max squared
    still fits fp32 (fp16, fp8) values near the dtype's max.
    """
    base = problem.make_inputs(shape, dtype, device, gen)
    idx = next(
        (i for i, t in enumerate(base) if isinstance(t, torch.Tensor) and t.is_floating_point()),
        None,
    )
    if idx is None:
        return []
    x0 = base[idx]
    fi = torch.finfo(dtype)
    large = 0.9 * fi.max if fi.max < 1e5 else 1e4
    # Magnitudes 10^-d .. 10^d: d <= 6 keeps squares and sums of squares inside fp32 (the
    # accumulation dtype of a sane kernel), and 10^d stays a decade below the dtype's max.
    decades = min(6.0, math.log10(fi.max) - 1.0)

    def with_x(x: torch.Tensor) -> tuple[Any, ...]:
        x = x.to(device)
        return tuple(x.to(dtype) if i == idx else t for i, t in enumerate(base))

    def rand_like(x: torch.Tensor) -> torch.Tensor:
        # float64 so fp64's smallest normal does not underflow before the cast to `dtype`
        return torch.rand(x.shape, generator=gen, device=device, dtype=torch.float64)

    sign = torch.where(rand_like(x0) < 0.5, -1.0, 1.0)
    rows = x0.float().reshape(-1, x0.shape[-1]) if x0.dim() else x0.float().reshape(1, 1)
    cases: list[tuple[str, tuple[Any, ...]]] = []
    cases.append(
        (f"large_identical({large:g})", with_x(torch.full(x0.shape, large, device=device)))
    )
    eq = rows.clone()
    eq[0] = 3.0
    cases.append(("all_equal_row", with_x(eq.reshape(x0.shape))))
    centre = 1.0 + 4.0 * torch.rand(
        (rows.shape[0], 1), generator=gen, device=device, dtype=torch.float64
    )
    noise = 1e-3 * (torch.rand(rows.shape, generator=gen, device=device, dtype=torch.float64) - 0.5)
    cases.append(("near_zero_variance", with_x((centre * (1.0 + noise)).reshape(x0.shape))))
    expo = (rand_like(x0) * 2.0 - 1.0) * decades
    cases.append((f"dynamic_range(1e+-{decades:.0f})", with_x(sign * torch.pow(10.0, expo))))
    cases.append(("near_smallest_normal", with_x(sign * fi.tiny * (1.0 + 7.0 * rand_like(x0)))))
    if fi.max**2 < torch.finfo(torch.float32).max:
        cases.append(("near_dtype_max", with_x(sign * fi.max * (0.5 + 0.4 * rand_like(x0)))))
    return cases


# --------------------------------------------------------------------------------------
# one trial


def _run_trial(
    ctx: _Ctx,
    inputs: tuple[Any, ...],
    label: str,
    shape: Shape,
    dtype: torch.dtype,
    seed: int,
    *,
    with_guards: bool = False,
    ref: tuple[list[torch.Tensor], bool] | None = None,
    out: Any = None,
) -> list[torch.Tensor]:
    """Run the candidate once on `inputs` and compare; raise `_Fail` on any problem.

    Returns the output tensors (the harness's buffers) so callers can reuse or compare them.
    """
    where = _describe_trial(label, shape, dtype, seed)
    ref_outs, single = _reference(ctx, inputs, dtype) if ref is None else ref
    native_outs = _native(ctx, inputs)
    if out is None:
        out = _alloc_out(ref_outs, dtype, ctx.device, single)
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    for t in outs:
        _poison(t)
    recorder = guards.TorchOpRecorder() if with_guards else None
    threads_before = set(threading.enumerate())
    try:
        if recorder is not None:
            with recorder:
                returned = ctx.candidate(*inputs, out=out)
        else:
            returned = ctx.candidate(*inputs, out=out)
    except Exception as e:  # the candidate's failure is a verdict, not a harness crash
        raise _Fail("error", f"candidate raised {type(e).__name__}: {e} ({where})") from e
    if with_guards:
        late = guards.completion_diff(out, ctx.device, CPU_COMPLETION_WAIT_S, threads_before)
    else:
        guards.sync_current_stream(ctx.device)
        late = None
    if recorder is not None:
        bad = guards.torch_compute_ops(recorder.ops)
        if bad:
            raise _Fail(
                "torch_compute",
                f"{guards.torch_compute_message(bad)} ({where})",
                guard="no_torch_compute",
            )
    if late is not None:
        raise _Fail("early_return", f"{late} ({where})", guard="completion")
    _check_returned(returned, out, where)
    sensitivity = _Sensitivity(ctx, inputs, dtype)
    for i, (o, r) in enumerate(zip(outs, ref_outs, strict=True)):
        _compare(ctx, o, r, i, where, native=native_outs[i] if native_outs else None,
                 sensitivity=sensitivity)
    return outs


def _stale_output_guard(
    ctx: _Ctx, inputs: tuple[Any, ...], outs: list[torch.Tensor], shape: Shape, dtype: torch.dtype
) -> None:
    """Same input tensors, new contents written in place, same output buffers: must follow."""
    fresh, seed = _fresh_inputs(ctx, shape, dtype)
    for old, new in zip(inputs, fresh, strict=True):
        if isinstance(old, torch.Tensor):
            old.copy_(new)
    out = outs[0] if len(outs) == 1 else tuple(outs)
    try:
        _run_trial(ctx, inputs, "same tensors, new contents", shape, dtype, seed, out=out)
    except _Fail as f:
        if f.reason in ("mismatch", "nonfinite"):
            raise _Fail(
                "stale",
                "second call with the same input tensors (contents changed in place) did not "
                f"follow the new contents (memoized by pointer?): {f.message}",
                guard="stale_output",
            ) from f
        raise


def _check_returned(returned: Any, out: Any, where: str) -> None:
    if isinstance(out, torch.Tensor):
        ok = isinstance(returned, torch.Tensor) and _same_buffer(returned, out)
    else:
        ok = (
            isinstance(returned, (tuple, list))
            and len(returned) == len(out)
            and all(
                isinstance(r, torch.Tensor) and _same_buffer(r, o)
                for r, o in zip(returned, out, strict=True)
            )
        )
    if not ok:
        got = type(returned).__name__
        if isinstance(returned, torch.Tensor):
            got = f"a tensor of shape {tuple(returned.shape)} {_dn(returned.dtype)}"
        raise _Fail(
            "contract", f"candidate must write into and return `out`; it returned {got} ({where})"
        )


def _same_buffer(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.dtype == b.dtype


def _native(ctx: _Ctx, inputs: tuple[Any, ...]) -> list[torch.Tensor] | None:
    """The reference run by PyTorch itself in the inputs' own dtype (before the candidate runs).

    It sets the floor of the tolerance on ill-conditioned inputs (see `_compare`). None when the
    reference cannot run in that dtype.
    """
    try:
        with torch.no_grad():
            res = ctx.problem.reference(*tuple(
                t.detach().clone() if isinstance(t, torch.Tensor) else t for t in inputs))
    except Exception:  # noqa: BLE001 - e.g. an op with no half kernel on CPU: no floor then
        return None
    outs = [res] if isinstance(res, torch.Tensor) else list(res)
    return outs if all(isinstance(r, torch.Tensor) for r in outs) else None


class _Sensitivity:
    """How much the exact result moves when the inputs move by their own rounding.

    |ref(x * (1 + u * eps)) - ref(x)| in the reference precision, u uniform in [-1, 1] per
    element and eps the I/O dtype's machine epsilon: an output no further from the reference
    than SENSITIVITY_FACTOR times this is the exact answer to inputs a few ulps away (backward
    stable), whatever the op's conditioning (cancelling sums, near-zero variance). Computed only
    when a comparison fails the policy.
    """

    def __init__(self, ctx: _Ctx, inputs: tuple[Any, ...], dtype: torch.dtype) -> None:
        self.ctx, self.inputs, self.dtype = ctx, inputs, dtype
        self._outs: list[torch.Tensor] | None = None

    def output(self, index: int, ref: torch.Tensor) -> torch.Tensor | None:
        if self._outs is None:
            eps = torch.finfo(self.dtype).eps if self.dtype.is_floating_point else 0.0
            gen = torch.Generator(device=ref.device).manual_seed(0x5EED)
            moved = []
            for t in self.inputs:
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    hi = t.detach().to(ref.dtype)
                    u = torch.rand(hi.shape, generator=gen, device=hi.device, dtype=hi.dtype)
                    moved.append(hi * (1 + (2 * u - 1) * eps))
                else:
                    moved.append(t)
            base, _ = _reference(self.ctx, self.inputs, self.dtype)
            with torch.no_grad():
                res = _call_problem(self.ctx, "reference (on 1-ulp perturbed inputs)",
                                    self.ctx.problem.reference, *moved)
            res = [res] if isinstance(res, torch.Tensor) else list(res)
            self._outs = [(m.to(b.dtype) - b).abs() for m, b in zip(res, base, strict=True)]
        out = self._outs[index] if index < len(self._outs) else None
        return out if out is not None and out.shape == ref.shape else None


def _compare(ctx: _Ctx, out: torch.Tensor, ref: torch.Tensor, index: int, where: str,
             native: torch.Tensor | None = None,
             sensitivity: _Sensitivity | None = None) -> None:
    tol = tolerance(out.dtype, ctx.hw, ctx.uses_matrix_units)
    ctx.used_tolerances.setdefault(_dn(out.dtype), tol)
    if out.shape != ref.shape:
        raise _Fail(
            "contract",
            f"output {index} has shape {tuple(out.shape)}, reference {tuple(ref.shape)} ({where})",
        )
    o = out.to(ref.dtype)
    if not out.is_floating_point():
        bad = o != ref
        if bool(bad.any()):
            first = _index(bad.flatten().nonzero()[0, 0], bad.shape)
            poison = _poison_value(out.dtype)
            raise _Fail(
                "mismatch",
                f"output {index}: {int(bad.sum())} of {bad.numel()} integer "
                f"elements differ, first at index {first}: got {out[first].item()}, "
                f"expected {ref[first].item()} (poison sentinel is {poison}) ({where})",
            )
        return
    ref_finite = torch.isfinite(ref)
    nonfinite = ref_finite & ~torch.isfinite(o)
    special = (~ref_finite) & ~((o == ref) | (o.isnan() & ref.isnan()))
    if bool(nonfinite.any()) or bool(special.any()):
        mask = nonfinite | special
        first = _index(mask.flatten().nonzero()[0, 0], mask.shape)
        n_nan = int((nonfinite & o.isnan()).sum())
        raise _Fail(
            "nonfinite",
            f"output {index}: {int(mask.sum())} of {mask.numel()} elements are NaN/Inf where the "
            f"reference is finite ({n_nan} NaN; the output was poisoned with NaN before the call, "
            f"so elements left unwritten show up as NaN), first at index {first}: "
            f"got {o[first].item():.6g}, expected {ref[first].item():.6g} ({where})",
        )
    err = (o - ref).abs().where(ref_finite, torch.zeros((), dtype=ref.dtype, device=ref.device))
    rel = err / ref.abs().clamp_min(torch.finfo(out.dtype).tiny)
    allowed = tol.atol + tol.rtol * ref.abs()
    excess = err / allowed
    max_abs, max_rel = (
        float(err.max()) if err.numel() else 0.0,
        float(rel.max()) if rel.numel() else 0.0,
    )
    ctx.max_abs, ctx.max_rel = max(ctx.max_abs, max_abs), max(ctx.max_rel, max_rel)
    bad = err > allowed
    if bool(bad.any()) and sensitivity is not None:
        sens = sensitivity.output(index, ref)
        if sens is not None:
            sens = sens.where(torch.isfinite(sens), torch.zeros((), dtype=sens.dtype,
                                                                device=sens.device))
            widened = allowed + SENSITIVITY_FACTOR * sens
            if not bool((err > widened).any()):
                ctx.native_floor_used.append(
                    f"{where}: within {SENSITIVITY_FACTOR:g}x the reference's own change under "
                    f"1-ulp input perturbations (ill-conditioned input)")
                return
    if bool(bad.any()) and native is not None and native.shape == ref.shape:
        # Ill-conditioned inputs (near-zero variance, cancellation): the dtype's rounding alone
        # puts PyTorch's own result outside the policy. Such a case is held to PyTorch in the
        # same dtype instead: the candidate's worst error may be at most NATIVE_ERROR_FACTOR
        # times eager's worst error against the same high-precision reference.
        n = native.to(ref.dtype)
        n_err = (n - ref).abs().where(ref_finite & torch.isfinite(n),
                                      torch.zeros((), dtype=ref.dtype, device=ref.device))
        floor = NATIVE_ERROR_FACTOR * float(n_err.max()) if n_err.numel() else 0.0
        if bool((n_err > allowed).any()) and max_abs <= floor:
            ctx.native_floor_used.append(
                f"{where}: max abs err {max_abs:.3e} within {NATIVE_ERROR_FACTOR}x eager "
                f"PyTorch's own {float(n_err.max()):.3e} in {_dn(out.dtype)} (ill-conditioned "
                "input: the policy tolerance is below the dtype's own rounding here)")
            return
    if bool(bad.any()):
        worst = _index(excess.argmax(), excess.shape)
        raise _Fail(
            "mismatch",
            f"output {index}: {int(bad.sum())} of {bad.numel()} elements out of tolerance; "
            f"worst at index {worst}: got {o[worst].item():.6g}, expected {ref[worst].item():.6g} "
            f"(abs err {err[worst].item():.3e}, rel err {rel[worst].item():.3e}); max abs err "
            f"{max_abs:.3e}, max rel err {max_rel:.3e}; tolerance {tol.describe()} ({where})",
        )


# --------------------------------------------------------------------------------------
# helpers


def _reference(
    ctx: _Ctx, inputs: tuple[Any, ...], dtype: torch.dtype
) -> tuple[list[torch.Tensor], bool]:
    """Reference outputs from upcast copies of `inputs`, and whether it returned one tensor."""
    # fp32 candidates are judged against float64 on every device: a float32 reference has
    # errors of its own as large as the candidate's on ill-conditioned inputs.
    ref_dtype = torch.float64 if dtype in (torch.float64, torch.float32) else ctx.ref_dtype_default
    copies = tuple(
        (t.detach().to(ref_dtype) if t.is_floating_point() else t.detach().clone())
        if isinstance(t, torch.Tensor)
        else t
        for t in inputs
    )
    with torch.no_grad():
        result = _call_problem(ctx, "reference", ctx.problem.reference, *copies)
    outs = [result] if isinstance(result, torch.Tensor) else list(result)
    if not all(isinstance(r, torch.Tensor) for r in outs):
        raise _problem_error(ctx, "reference must return a tensor or a tuple of tensors, "
                                  f"it returned {type(result).__name__}")
    return outs, isinstance(result, torch.Tensor)


def _alloc_out(
    ref_outs: list[torch.Tensor], dtype: torch.dtype, device: torch.device, single: bool
) -> Any:
    bufs = [
        torch.empty(r.shape, dtype=dtype if r.is_floating_point() else r.dtype, device=device)
        for r in ref_outs
    ]
    return bufs[0] if single else tuple(bufs)


def _poison_value(dtype: torch.dtype) -> float | int | bool:
    if dtype.is_floating_point:
        return math.nan
    if dtype == torch.bool:
        return True  # no spare value in a bool; True at least catches unwritten False outputs
    return torch.iinfo(dtype).min


def _poison(t: torch.Tensor) -> None:
    t.fill_(_poison_value(t.dtype))


def _representable(ref_outs: list[torch.Tensor], dtype: torch.dtype) -> bool:
    for r in ref_outs:
        if not r.is_floating_point():
            continue
        if not bool(torch.isfinite(r).all()):
            return False
        if r.numel() and float(r.abs().max()) > torch.finfo(dtype).max:
            return False
    return True


def _fresh_inputs(ctx: _Ctx, shape: Shape, dtype: torch.dtype) -> tuple[tuple[Any, ...], int]:
    seed = _new_seed()
    _at(ctx, shape, dtype, seed)
    inputs = tuple(_call_problem(ctx, "make_inputs", ctx.problem.make_inputs,
                                 shape, dtype, ctx.device, _generator(ctx.device, seed)))
    _check_input_dtypes(ctx, inputs, dtype, "make_inputs")
    floats = [
        t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()
    ]
    if floats and all(not bool(t.any()) for t in floats):
        raise _problem_error(
            ctx, "make_inputs returned all-zero tensors; zeros hide unwritten outputs and "
                 "wrong scaling, draw random values")
    return inputs, seed


def _check_input_dtypes(ctx: _Ctx, inputs: tuple[Any, ...], dtype: torch.dtype, what: str) -> None:
    """Every floating-point input has the dtype under test; raise ProblemError otherwise.

    Integer and bool inputs (class targets, indices, masks) are exempt: their dtype is part of
    the op. A float input in another dtype would make the candidate run on, say, float32 while
    the verdict says bfloat16 was checked.
    """
    if not dtype.is_floating_point:
        return
    for i, t in enumerate(inputs):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != dtype:
            raise _problem_error(
                ctx, f"{what} returned input {i} as {_dn(t.dtype)} when {_dn(dtype)} was asked "
                     "for (cast floating-point inputs to the requested dtype; integer and bool "
                     "inputs may keep their own)")


def _at(ctx: _Ctx, shape: Shape, dtype: torch.dtype, seed: int) -> None:
    """Record the trial about to start; tell `ctx.progress` when its shape or dtype is new."""
    new = (tuple(shape), dtype) != (ctx.shape, ctx.dtype)
    ctx.shape, ctx.dtype, ctx.seed = tuple(shape), dtype, seed
    if new and ctx.progress is not None and ctx.stage is not None:
        ctx.progress(ctx.stage, ctx.shape, dtype)


def _problem_error(ctx: _Ctx, detail: str) -> ProblemError:
    return ProblemError(ctx.problem.name, detail, stage=ctx.stage, shape=ctx.shape,
                        dtype=_dn(ctx.dtype) if ctx.dtype is not None else None, seed=ctx.seed)


def _call_problem(ctx: _Ctx, what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call the problem's own code (make_inputs, reference, adversarial): an exception there
    means the spec is wrong, not the candidate, so it becomes a ProblemError naming the trial."""
    try:
        return fn(*args)
    except ProblemError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the spec's code raises, the spec is at fault
        lines = str(e).strip().splitlines()
        first = lines[0][:300] if lines else ""
        raise _problem_error(ctx, f"{what} raised {type(e).__name__}: {first}") from e


def _new_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def _generator(device: torch.device, seed: int) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def _describe_trial(label: str, shape: Shape, dtype: torch.dtype, seed: int) -> str:
    return f"input '{label}', shape {tuple(shape)}, dtype {_dn(dtype)}, seed {seed:#x}"


def _same(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    if tol == 0:  # bitwise: compare the bytes, so -0.0 vs 0.0 and NaN payloads count too
        # reshape(-1) first: a 0-dim tensor (a loss) cannot be viewed as bytes directly
        return torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                           b.contiguous().reshape(-1).view(torch.uint8))
    return bool(torch.isclose(a.double(), b.double(), rtol=tol, atol=tol, equal_nan=True).all())


def _index(flat: torch.Tensor | int, shape: torch.Size) -> tuple[int, ...]:
    flat = int(flat)
    idx = []
    for d in reversed(shape):
        idx.append(flat % d)
        flat //= d
    return tuple(reversed(idx))


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _dedup(shapes: Any) -> tuple[Shape, ...]:
    seen: list[Shape] = []
    for s in shapes:
        if s not in seen:
            seen.append(s)
    return tuple(seen)


def _dn(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dns(dtypes: Sequence[torch.dtype]) -> tuple[str, ...]:
    return tuple(_dn(d) for d in dtypes)


def _failed(
    stage: str, f: _Fail, shapes: Sequence[Shape], dtype: torch.dtype, trials: int = 0
) -> StageResult:
    prefix = f"[{f.guard}] " if f.guard else ""
    return StageResult(
        stage,
        False,
        prefix + f.message,
        tuple(shapes),
        (_dn(dtype),),
        trials,
        caught_by=f.guard or stage,
        reason=f.reason,
    )


def _pass_text(ctx: _Ctx, n_shapes: int, n_dtypes: int) -> str:
    return (
        f"{n_shapes} shape(s) x {n_dtypes} dtype(s); max abs err so far {ctx.max_abs:.2e}, "
        f"max rel err {ctx.max_rel:.2e}"
    )


def _with_seconds(r: StageResult, seconds: float) -> StageResult:
    from dataclasses import replace

    return replace(r, seconds=seconds)


def _detect_hw() -> HardwareModel | None:
    try:
        import hwmodels

        detection = hwmodels.detect()
    except (ImportError, AttributeError) as e:
        log.warning(
            "no hardware model for tolerance overrides: hwmodels.detect unavailable (%s)", e
        )
        return None
    if detection.model is None:
        log.warning("no hardware model for tolerance overrides: %s", detection.reason)
    return detection.model


def _record(
    store: Any,
    report: CheckReport,
    hw: HardwareModel | None,
    variant: str,
    max_abs: float,
    max_rel: float,
) -> None:
    """Append one row for this check to the results store (`harness.store.ResultsStore`).

    Interpreter runs are tier "interpreted"; native runs on the device are tier "measured" (the
    device-verified tier), with no `median_ms`, so `store.best()` never ranks a check as a time.
    """
    from harness.store import Record

    failed = report.failed
    store.record(
        Record(
            op=report.problem,
            variant=variant,
            device=hw.name if hw is not None else report.device,
            tier="interpreted" if report.interpreted else "measured",
            passed=report.passed,
            shape=report.shapes.get("smoke", ((),))[0],
            dtype=report.stages[0].dtypes[0] if report.stages and report.stages[0].dtypes else "",
            config={"stages": list(report.requested)},
            metrics={
                "stages_passed": sum(s.passed for s in report.stages),
                "caught_by": report.caught_by,
                "max_abs_err": max_abs,
                "max_rel_err": max_rel,
            },
            message=failed.message if failed is not None else report.tolerances,
        )
    )


class _CallableModule(types.ModuleType):
    """`harness.check` names both this module and the function; whichever Python binds to the
    package attribute first (the function via the lazy `harness.__getattr__`, or this module via
    `import harness.check`), `harness.check(problem, candidate)` must call the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> CheckReport:
        return check(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
