"""One trial of the judge: fresh inputs, the reference in a wider dtype, the candidate run into
poisoned outputs under the guards, and the comparison against the tolerance (with eager
PyTorch's own error and the problem's sensitivity as floors on ill-conditioned inputs).
`harness.check` runs the stages out of these trials; `CheckContext` carries one check's state.
"""

from __future__ import annotations

import logging
import math
import os
import threading
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
from harness.screen import CHUNK_ELEMENTS
from harness.screen import screen
from harness.tolerance import Tolerance
from harness.tolerance import tolerance

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)

# On ill-conditioned inputs a candidate may be off by at most this many times eager PyTorch's own
# error in the same dtype (both against the float64/float32 reference); see compare_outputs.
NATIVE_ERROR_FACTOR = 4.0
# ... or within this many times the exact result's own change when every input moves by up to
# one ulp of its dtype (backward stability; see Sensitivity).
SENSITIVITY_FACTOR = 8.0
SENSITIVITY_DRAWS = 4  # perturbation draws of `Sensitivity` (the largest change of each)
CPU_COMPLETION_WAIT_S = 0.05
# (stage, shape, dtype) at the start of each trial; see `check(progress=...)`.
Progress = Callable[[str, Shape, torch.dtype], None]


class TrialFailed(Exception):
    """A trial failed; carries the stage-independent part of the message."""

    def __init__(self, reason: str, message: str, guard: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.guard = guard


@dataclass
class CheckContext:
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


def run_trial(
    ctx: CheckContext,
    inputs: tuple[Any, ...],
    label: str,
    shape: Shape,
    dtype: torch.dtype,
    seed: int,
    *,
    with_guards: bool = False,
    ref: tuple[list[torch.Tensor], bool] | None = None,
    native: list[torch.Tensor] | None = None,
    out: Any = None,
) -> list[torch.Tensor]:
    """Run the candidate once on `inputs` and compare; raise `TrialFailed` on any problem.

    `ref` (`reference_outputs`) and `native` (`native_outputs`) of these inputs, where the caller
    has them already (the same inputs run again): a reference of inputs of several GB runs on
    the host when the device cannot hold its float64 copies.

    Returns the output tensors (the harness's buffers) so callers can reuse or compare them.
    """
    where = describe_trial(label, shape, dtype, seed)
    ref_outs, single = reference_outputs(ctx, inputs, dtype) if ref is None else ref
    native_outs = native_outputs(ctx, inputs) if native is None else native
    if out is None:
        out = alloc_out(ref_outs, dtype, ctx.device, single)
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    for t in outs:
        poison(t)
    recorder = guards.TorchOpRecorder() if with_guards else None
    threads_before = set(threading.enumerate())
    try:
        if recorder is not None:
            with recorder:
                returned = ctx.candidate(*inputs, out=out)
        else:
            returned = ctx.candidate(*inputs, out=out)
    except Exception as e:  # the candidate's failure is a verdict, not a harness crash
        raise TrialFailed("error", f"candidate raised {type(e).__name__}: {e} ({where})") from e
    if with_guards:
        late = guards.completion_diff(out, ctx.device, CPU_COMPLETION_WAIT_S, threads_before)
    else:
        guards.sync_current_stream(ctx.device)
        late = None
    if recorder is not None:
        bad = guards.torch_compute_ops(recorder.ops)
        if bad:
            raise TrialFailed(
                "torch_compute",
                f"{guards.torch_compute_message(bad)} ({where})",
                guard="no_torch_compute",
            )
    if late is not None:
        raise TrialFailed("early_return", f"{late} ({where})", guard="completion")
    check_returned(returned, out, where)
    sensitivity = Sensitivity(ctx, inputs, dtype)
    for i, (o, r) in enumerate(zip(outs, ref_outs, strict=True)):
        compare_outputs(ctx, o, r, i, where, native=native_outs[i] if native_outs else None,
                 sensitivity=sensitivity)
    return outs


def stale_output_guard(
    ctx: CheckContext,
    inputs: tuple[Any, ...],
    outs: list[torch.Tensor],
    shape: Shape,
    dtype: torch.dtype,
) -> None:
    """Same input tensors, new contents written in place, same output buffers: must follow."""
    fresh, seed = fresh_inputs(ctx, shape, dtype)
    for old, new in zip(inputs, fresh, strict=True):
        if isinstance(old, torch.Tensor):
            old.copy_(new)
    out = outs[0] if len(outs) == 1 else tuple(outs)
    try:
        run_trial(ctx, inputs, "same tensors, new contents", shape, dtype, seed, out=out)
    except TrialFailed as f:
        if f.reason in ("mismatch", "nonfinite"):
            raise TrialFailed(
                "stale",
                "second call with the same input tensors (contents changed in place) did not "
                f"follow the new contents (memoized by pointer?): {f.message}",
                guard="stale_output",
            ) from f
        raise


def check_returned(returned: Any, out: Any, where: str) -> None:
    if isinstance(out, torch.Tensor):
        ok = isinstance(returned, torch.Tensor) and same_buffer(returned, out)
    else:
        ok = (
            isinstance(returned, (tuple, list))
            and len(returned) == len(out)
            and all(
                isinstance(r, torch.Tensor) and same_buffer(r, o)
                for r, o in zip(returned, out, strict=True)
            )
        )
    if not ok:
        got = type(returned).__name__
        if isinstance(returned, torch.Tensor):
            got = f"a tensor of shape {tuple(returned.shape)} {dtype_text(returned.dtype)}"
        raise TrialFailed(
            "contract", f"candidate must write into and return `out`; it returned {got} ({where})"
        )


def same_buffer(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.dtype == b.dtype


def native_outputs(ctx: CheckContext, inputs: tuple[Any, ...]) -> list[torch.Tensor] | None:
    """The reference run by PyTorch itself in the inputs' own dtype (before the candidate runs).

    It sets the floor of the tolerance on ill-conditioned inputs (see `compare_outputs`). None
    when the reference cannot run in that dtype.
    """
    try:
        with torch.no_grad():
            res = ctx.problem.reference(*tuple(
                t.detach().clone() if isinstance(t, torch.Tensor) else t for t in inputs))
    except Exception:  # noqa: BLE001 - e.g. an op with no half kernel on CPU: no floor then
        return None
    outs = [res] if isinstance(res, torch.Tensor) else list(res)
    return outs if all(isinstance(r, torch.Tensor) for r in outs) else None


class Sensitivity:
    """How much the exact result moves when the inputs move by their own rounding.

    |ref(x * (1 + u * eps)) - ref(x)| in the reference precision, u uniform in [-1, 1] per
    element and eps the I/O dtype's machine epsilon, the largest of SENSITIVITY_DRAWS draws of
    u per output: an output no further from the reference
    than SENSITIVITY_FACTOR times this is the exact answer to inputs a few ulps away (backward
    stable), whatever the op's conditioning (cancelling sums, near-zero variance). Computed only
    when a comparison fails the policy.
    """

    def __init__(self, ctx: CheckContext, inputs: tuple[Any, ...], dtype: torch.dtype) -> None:
        self.ctx, self.inputs, self.dtype = ctx, inputs, dtype
        self._outs: list[torch.Tensor] | None = None

    def output(self, index: int, ref: torch.Tensor) -> torch.Tensor | None:
        if self._outs is None:
            eps = torch.finfo(self.dtype).eps if self.dtype.is_floating_point else 0.0
            gen = torch.Generator(device=ref.device).manual_seed(0x5EED)
            base, _ = reference_outputs(self.ctx, self.inputs, self.dtype)
            # One draw's change of an output is a random sum of its terms' perturbations, which
            # at a few outputs of many comes out near zero by chance: the largest change over
            # SENSITIVITY_DRAWS draws (a linear layer on 1e4-valued inputs failed 1 check in 40
            # with one draw, at an output where eager's own fp32 error was no smaller)
            for _ in range(SENSITIVITY_DRAWS):
                moved = []
                for t in self.inputs:
                    if isinstance(t, torch.Tensor) and t.is_floating_point():
                        hi = t.detach().to(device=ref.device, dtype=ref.dtype)
                        u = torch.rand(hi.shape, generator=gen, device=hi.device, dtype=hi.dtype)
                        moved.append(hi * (1 + (2 * u - 1) * eps))
                    else:
                        moved.append(t)
                with torch.no_grad():
                    res = call_problem(self.ctx, "reference (on 1-ulp perturbed inputs)",
                                        self.ctx.problem.reference, *moved)
                res = [res] if isinstance(res, torch.Tensor) else list(res)
                change = [(m.to(b.dtype) - b).abs() for m, b in zip(res, base, strict=True)]
                self._outs = change if self._outs is None else [
                    torch.maximum(a, c) for a, c in zip(self._outs, change, strict=True)]
        out = self._outs[index] if index < len(self._outs) else None
        return out if out is not None and out.shape == ref.shape else None


def compare_outputs(ctx: CheckContext, out: torch.Tensor, ref: torch.Tensor, index: int, where: str,
             native: torch.Tensor | None = None,
             sensitivity: Sensitivity | None = None) -> None:
    tol = tolerance(out.dtype, ctx.hw, ctx.uses_matrix_units)
    ctx.used_tolerances.setdefault(dtype_text(out.dtype), tol)
    if out.shape != ref.shape:
        raise TrialFailed(
            "contract",
            f"output {index} has shape {tuple(out.shape)}, reference {tuple(ref.shape)} ({where})",
        )
    if out.is_floating_point() and ref.numel() > CHUNK_ELEMENTS:
        # Large outputs: a chunked pass first (bounded memory); the whole-tensor comparison
        # below runs only to explain a failure.
        first = screen(out, ref, tol)
        ctx.max_abs, ctx.max_rel = max(ctx.max_abs, first.max_abs), max(ctx.max_rel, first.max_rel)
        if first.clean:
            return
    o = out.to(device=ref.device, dtype=ref.dtype)
    if not out.is_floating_point():
        bad = o != ref
        if bool(bad.any()):
            first = flat_index(bad.flatten().nonzero()[0, 0], bad.shape)
            poison = poison_value(out.dtype)
            raise TrialFailed(
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
        first = flat_index(mask.flatten().nonzero()[0, 0], mask.shape)
        n_nan = int((nonfinite & o.isnan()).sum())
        raise TrialFailed(
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
        n = native.to(device=ref.device, dtype=ref.dtype)
        n_err = (n - ref).abs().where(ref_finite & torch.isfinite(n),
                                      torch.zeros((), dtype=ref.dtype, device=ref.device))
        floor = NATIVE_ERROR_FACTOR * float(n_err.max()) if n_err.numel() else 0.0
        if bool((n_err > allowed).any()) and max_abs <= floor:
            ctx.native_floor_used.append(
                f"{where}: max abs err {max_abs:.3e} within {NATIVE_ERROR_FACTOR}x eager "
                f"PyTorch's own {float(n_err.max()):.3e} in {dtype_text(out.dtype)} "
                "(ill-conditioned input: the policy tolerance is below the dtype's own rounding "
                "here)")
            return
    if bool(bad.any()):
        worst = flat_index(excess.argmax(), excess.shape)
        raise TrialFailed(
            "mismatch",
            f"output {index}: {int(bad.sum())} of {bad.numel()} elements out of tolerance; "
            f"worst at index {worst}: got {o[worst].item():.6g}, expected {ref[worst].item():.6g} "
            f"(abs err {err[worst].item():.3e}, rel err {rel[worst].item():.3e}); max abs err "
            f"{max_abs:.3e}, max rel err {max_rel:.3e}; tolerance {tol.describe()} ({where})",
        )


# --------------------------------------------------------------------------------------
# helpers


def reference_outputs(
    ctx: CheckContext, inputs: tuple[Any, ...], dtype: torch.dtype
) -> tuple[list[torch.Tensor], bool]:
    """Reference outputs from upcast copies of `inputs`, and whether it returned one tensor."""
    # fp32 candidates are judged against float64 on every device: a float32 reference has
    # errors of its own as large as the candidate's on ill-conditioned inputs.
    ref_dtype = torch.float64 if dtype in (torch.float64, torch.float32) else ctx.ref_dtype_default
    try:
        result = _reference_on(ctx, inputs, ref_dtype, None)
    except ProblemError as e:
        if not isinstance(e.__cause__, torch.OutOfMemoryError):
            raise
        # Inputs of several GB: the reference's upcast copies and temporaries do not fit in
        # device memory beside the candidate's buffers. The host has more; same precision.
        log.info("%s: the reference ran out of device memory; running it on the host CPU",
                 ctx.problem.name)
        torch.cuda.empty_cache()
        result = _reference_on(ctx, inputs, ref_dtype, torch.device("cpu"))
    outs = [result] if isinstance(result, torch.Tensor) else list(result)
    if not all(isinstance(r, torch.Tensor) for r in outs):
        raise problem_error(ctx, "reference must return a tensor or a tuple of tensors, "
                                  f"it returned {type(result).__name__}")
    return outs, isinstance(result, torch.Tensor)


def _reference_on(ctx: CheckContext, inputs: tuple[Any, ...], ref_dtype: torch.dtype,
                  device: torch.device | None) -> Any:
    """The reference on upcast copies of `inputs`, on `device` (None: where the inputs are)."""
    copies = tuple(
        (t.detach().to(device=device or t.device, dtype=ref_dtype) if t.is_floating_point()
         else t.detach().to(device or t.device, copy=True))
        if isinstance(t, torch.Tensor)
        else t
        for t in inputs
    )
    with torch.no_grad():
        return call_problem(ctx, "reference", ctx.problem.reference, *copies)


def alloc_out(
    ref_outs: list[torch.Tensor], dtype: torch.dtype, device: torch.device, single: bool
) -> Any:
    bufs = [
        torch.empty(r.shape, dtype=dtype if r.is_floating_point() else r.dtype, device=device)
        for r in ref_outs
    ]
    return bufs[0] if single else tuple(bufs)


def poison_value(dtype: torch.dtype) -> float | int | bool:
    if dtype.is_floating_point:
        return math.nan
    if dtype == torch.bool:
        return True  # no spare value in a bool; True at least catches unwritten False outputs
    return torch.iinfo(dtype).min


def poison(t: torch.Tensor) -> None:
    t.fill_(poison_value(t.dtype))


def representable(ref_outs: list[torch.Tensor], dtype: torch.dtype) -> bool:
    for r in ref_outs:
        if not r.is_floating_point():
            continue
        if not bool(torch.isfinite(r).all()):
            return False
        if r.numel() and float(r.abs().max()) > torch.finfo(dtype).max:
            return False
    return True


def fresh_inputs(
    ctx: CheckContext, shape: Shape, dtype: torch.dtype
) -> tuple[tuple[Any, ...], int]:
    seed = new_seed()
    at_trial(ctx, shape, dtype, seed)
    inputs = tuple(call_problem(ctx, "make_inputs", ctx.problem.make_inputs,
                                 shape, dtype, ctx.device, generator(ctx.device, seed)))
    check_input_dtypes(ctx, inputs, dtype, "make_inputs")
    floats = [
        t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()
    ]
    if floats and all(not bool(t.any()) for t in floats):
        raise problem_error(
            ctx, "make_inputs returned all-zero tensors; zeros hide unwritten outputs and "
                 "wrong scaling, draw random values")
    return inputs, seed


def check_input_dtypes(
    ctx: CheckContext, inputs: tuple[Any, ...], dtype: torch.dtype, what: str
) -> None:
    """Every floating-point input has the dtype under test; raise ProblemError otherwise.

    Integer and bool inputs (class targets, indices, masks) are exempt: their dtype is part of
    the op. A float input in another dtype would make the candidate run on, say, float32 while
    the verdict says bfloat16 was checked.
    """
    if not dtype.is_floating_point:
        return
    for i, t in enumerate(inputs):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != dtype:
            raise problem_error(
                ctx, f"{what} returned input {i} as {dtype_text(t.dtype)} when "
                     f"{dtype_text(dtype)} was asked for (cast floating-point inputs to the "
                     "requested dtype; integer and bool inputs may keep their own)")


def at_trial(ctx: CheckContext, shape: Shape, dtype: torch.dtype, seed: int) -> None:
    """Record the trial about to start; tell `ctx.progress` when its shape or dtype is new."""
    new = (tuple(shape), dtype) != (ctx.shape, ctx.dtype)
    ctx.shape, ctx.dtype, ctx.seed = tuple(shape), dtype, seed
    if new and ctx.progress is not None and ctx.stage is not None:
        ctx.progress(ctx.stage, ctx.shape, dtype)


def problem_error(ctx: CheckContext, detail: str) -> ProblemError:
    dtype = dtype_text(ctx.dtype) if ctx.dtype is not None else None
    return ProblemError(ctx.problem.name, detail, stage=ctx.stage, shape=ctx.shape, dtype=dtype,
                        seed=ctx.seed)


def call_problem(ctx: CheckContext, what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call the problem's own code (make_inputs, reference, adversarial): an exception there
    means the spec is wrong, not the candidate, so it becomes a ProblemError naming the trial."""
    try:
        return fn(*args)
    except ProblemError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the spec's code raises, the spec is at fault
        lines = str(e).strip().splitlines()
        first = lines[0][:300] if lines else ""
        raise problem_error(ctx, f"{what} raised {type(e).__name__}: {first}") from e


def new_seed() -> int:
    return int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)


def generator(device: torch.device, seed: int) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def describe_trial(label: str, shape: Shape, dtype: torch.dtype, seed: int) -> str:
    return f"input '{label}', shape {tuple(shape)}, dtype {dtype_text(dtype)}, seed {seed:#x}"


def same_values(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    if tol == 0:  # bitwise: compare the bytes, so -0.0 vs 0.0 and NaN payloads count too
        # reshape(-1) first: a 0-dim tensor (a loss) cannot be viewed as bytes directly
        return torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                           b.contiguous().reshape(-1).view(torch.uint8))
    return bool(torch.isclose(a.double(), b.double(), rtol=tol, atol=tol, equal_nan=True).all())


def flat_index(flat: torch.Tensor | int, shape: torch.Size) -> tuple[int, ...]:
    flat = int(flat)
    idx = []
    for d in reversed(shape):
        idx.append(flat % d)
        flat //= d
    return tuple(reversed(idx))






def dtype_text(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_texts(dtypes: Sequence[torch.dtype]) -> tuple[str, ...]:
    return tuple(dtype_text(d) for d in dtypes)


