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
import sys
import time
import types
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

import torch

from harness.problem import Problem
from harness.problem import Shape
from harness.shapes import INTERPRET_ODD_BUDGET  # noqa: F401 - importable from here as before
from harness.shapes import INTERPRET_SWEEP_BUDGET  # noqa: F401 - importable from here as before
from harness.shapes import ODD_INNER_SIZES  # noqa: F401 - importable from here as before
from harness.shapes import generic_adversarial
from harness.shapes import odd_shapes
from harness.shapes import shrink_shape  # noqa: F401 - importable from here as before
from harness.shapes import sweep_shapes
from harness.trial import CPU_COMPLETION_WAIT_S  # noqa: F401 - importable from here as before
from harness.trial import NATIVE_ERROR_FACTOR
from harness.trial import SENSITIVITY_FACTOR  # noqa: F401 - importable from here as before
from harness.trial import CheckContext
from harness.trial import Progress
from harness.trial import TrialFailed
from harness.trial import at_trial
from harness.trial import call_problem
from harness.trial import check_input_dtypes
from harness.trial import describe_trial
from harness.trial import dtype_text
from harness.trial import dtype_texts
from harness.trial import flat_index
from harness.trial import fresh_inputs
from harness.trial import generator
from harness.trial import native_outputs
from harness.trial import new_seed
from harness.trial import reference_outputs
from harness.trial import representable
from harness.trial import run_trial
from harness.trial import same_values
from harness.trial import stale_output_guard
from targets.interpreter import triton_interpret
from targets.tiers import Tier

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)

STAGES: tuple[str, ...] = ("smoke", "sweep", "adversarial", "determinism", "odd_sizes")
GUARDS: tuple[str, ...] = ("no_torch_compute", "completion", "stale_output")
DETERMINISM_RUNS = 3
# Trials the adversarial stage runs per dtype, for `planned_trials` (generic_adversarial has 5
# or 6 cases; a problem's own maker may have more or fewer).
ADVERSARIAL_CASES_ESTIMATE = 6


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
    ctx = CheckContext(
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


def _stage_smoke(ctx: CheckContext, dtypes: tuple[torch.dtype, ...]) -> StageResult:
    shape = tuple(ctx.problem.smoke_shape)
    dtype = dtypes[0]
    try:
        inputs, seed = fresh_inputs(ctx, shape, dtype)
        out = run_trial(ctx, inputs, "random", shape, dtype, seed, with_guards=True)
        stale_output_guard(ctx, inputs, out, shape, dtype)
    except TrialFailed as f:
        return _failed("smoke", f, (shape,), dtype)
    return StageResult("smoke", True, _pass_text(ctx, 1, 1), (shape,), (dtype_text(dtype),), 1)


def _stage_sweep(ctx: CheckContext, dtypes: tuple[torch.dtype, ...]) -> StageResult:
    shapes = sweep_shapes(ctx.problem, ctx.interpreted)
    trials = 0
    for dtype in dtypes:
        for shape in shapes:
            try:
                inputs, seed = fresh_inputs(ctx, shape, dtype)
                run_trial(ctx, inputs, "random", shape, dtype, seed, with_guards=True)
            except TrialFailed as f:
                return _failed("sweep", f, shapes, dtype, trials)
            trials += 1
    message = _pass_text(ctx, len(shapes), len(dtypes))
    return StageResult("sweep", True, message, shapes, dtype_texts(dtypes), trials)


def _stage_adversarial(ctx: CheckContext, dtypes: tuple[torch.dtype, ...]) -> StageResult:
    shape = tuple(ctx.problem.smoke_shape)
    trials = 0
    skipped: list[str] = []
    for dtype in dtypes:
        seed = new_seed()
        at_trial(ctx, shape, dtype, seed)
        gen = generator(ctx.device, seed)
        if ctx.problem.adversarial is not None:
            cases = call_problem(ctx, "adversarial", ctx.problem.adversarial,
                                  shape, dtype, ctx.device, gen)
        else:
            # generic_adversarial starts from make_inputs: its failure is the problem's too
            cases = call_problem(ctx, "make_inputs (for the adversarial cases)",
                                  generic_adversarial, ctx.problem, shape, dtype, ctx.device, gen)
        for label, inputs in cases:
            check_input_dtypes(ctx, inputs, dtype, f"adversarial case {label!r}")
            ref = reference_outputs(ctx, inputs, dtype)
            if not representable(ref[0], dtype):
                # e.g. squares of near-max fp16 values: no fp16 output could hold the answer.
                skipped.append(f"{label}/{dtype_text(dtype)}")
                continue
            try:
                run_trial(ctx, inputs, label, shape, dtype, seed, ref=ref)
            except TrialFailed as f:
                return _failed("adversarial", f, (shape,), dtype, trials)
            trials += 1
    if trials == 0:
        msg = f"no adversarial case was representable in the output dtype (skipped {skipped})"
        return StageResult(
            "adversarial",
            False,
            msg,
            (shape,),
            dtype_texts(dtypes),
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
        dtype_texts(dtypes),
        trials,
    )


def _stage_determinism(ctx: CheckContext, dtypes: tuple[torch.dtype, ...]) -> StageResult:
    shape = tuple(ctx.problem.smoke_shape)
    tol = ctx.problem.nondeterminism_tolerance
    for dtype in dtypes:
        try:
            inputs, seed = fresh_inputs(ctx, shape, dtype)
            # one reference for every run: the inputs do not change
            ref = reference_outputs(ctx, inputs, dtype)
            native = native_outputs(ctx, inputs)
            first = run_trial(ctx, inputs, "random", shape, dtype, seed, ref=ref, native=native)
            first = [t.clone() for t in first]
            for run in range(1, DETERMINISM_RUNS):
                again = run_trial(ctx, inputs, "random", shape, dtype, seed, ref=ref,
                                  native=native)
                for i, (a, b) in enumerate(zip(first, again, strict=True)):
                    if same_values(a, b, tol):
                        continue
                    diff = (a.double() - b.double()).abs().nan_to_num(nan=math.inf)
                    worst = flat_index(diff.argmax(), diff.shape)
                    limit = "bitwise identical" if tol == 0 else f"within {tol:g}"
                    raise TrialFailed(
                        "nondeterministic",
                        f"run {run + 1} of {DETERMINISM_RUNS} on the same input differs from "
                        f"run 1 (expected {limit}): output {i}, "
                        f"{int((diff > tol).sum())} of {diff.numel()} elements differ, "
                        f"max diff {float(diff.max()):.3e} at index {worst} "
                        f"({describe_trial('random', shape, dtype, seed)})",
                    )
        except TrialFailed as f:
            return _failed("determinism", f, (shape,), dtype)
    if tol == 0:
        msg = f"{DETERMINISM_RUNS} runs bitwise identical for {', '.join(dtype_texts(dtypes))}"
    else:
        msg = (
            f"{DETERMINISM_RUNS} runs within declared tolerance {tol:g} "
            f"(reason: {ctx.problem.nondeterminism_reason or 'none given'})"
        )
    return StageResult(
        "determinism", True, msg, (shape,), dtype_texts(dtypes), DETERMINISM_RUNS * len(dtypes)
    )


def _stage_odd_sizes(ctx: CheckContext, dtypes: tuple[torch.dtype, ...]) -> StageResult:
    shapes = odd_shapes(ctx.problem, ctx.interpreted)
    dtype = dtypes[0]
    trials = 0
    for shape in shapes:
        try:
            inputs, seed = fresh_inputs(ctx, shape, dtype)
            run_trial(ctx, inputs, "random", shape, dtype, seed)
        except TrialFailed as f:
            return _failed("odd_sizes", f, shapes, dtype, trials)
        trials += 1
    return StageResult(
        "odd_sizes", True, _pass_text(ctx, len(shapes), 1), shapes, (dtype_text(dtype),), trials
    )


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


def _failed(
    stage: str, f: TrialFailed, shapes: Sequence[Shape], dtype: torch.dtype, trials: int = 0
) -> StageResult:
    prefix = f"[{f.guard}] " if f.guard else ""
    return StageResult(
        stage,
        False,
        prefix + f.message,
        tuple(shapes),
        (dtype_text(dtype),),
        trials,
        caught_by=f.guard or stage,
        reason=f.reason,
    )


def _pass_text(ctx: CheckContext, n_shapes: int, n_dtypes: int) -> str:
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
            tier=Tier.INTERPRETED if report.interpreted else Tier.MEASURED,
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
