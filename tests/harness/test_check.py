"""harness.check: the five stages, their rules, and the messages a failure carries.

Candidates are the self-test's Triton kernels (run in the interpreter) or small torch-written
functions judged with `stages=` that do not run the torch-compute guard. Shapes stay tiny.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
import torch

import harness
from harness.check import STAGES
from harness.check import generic_adversarial
from harness.check import odd_shapes
from harness.check import planned_trials
from harness.check import shrink_shape
from harness.check import sweep_shapes
from harness.problem import Problem
from harness.problem import ProblemError
from harness.selftest import load_kernels
from harness.selftest.problem import softmax_problem


@pytest.fixture(scope="module")
def kernels() -> Any:
    return load_kernels(interpret=True)


@pytest.fixture
def small() -> Problem:
    # Two sweep shapes keep this file fast; the full sweep runs in test_selftest.py.
    return dataclasses.replace(softmax_problem(), sweep_shapes=((4, 64), (2, 256)))


def _torch_softmax(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(torch.softmax(x.float(), -1))


# -- the correct kernel ------------------------------------------------------------------------


def test_good_kernel_passes_all_five_stages(kernels: Any, small: Problem) -> None:
    report = harness.check(small, kernels.softmax_good)
    assert report.passed, report.summary()
    assert [s.name for s in report.stages] == list(STAGES)
    assert report.interpreted and report.device == "cpu"
    assert "float32: atol=" in report.tolerances and "bfloat16" in report.tolerances
    assert report.shapes["sweep"] == ((4, 64), (2, 256))
    assert report.shapes["odd_sizes"][0] == (8, 1023)
    assert all(s.seconds > 0 for s in report.stages)


def test_check_is_callable_after_importing_the_module(kernels: Any, small: Problem) -> None:
    import harness.check as check_module  # the submodule shares the function's name

    assert check_module(small, kernels.softmax_good, stages=["smoke"]).passed
    assert harness.check(small, kernels.softmax_good, stages=["smoke"]).passed


# -- failures and their messages -----------------------------------------------------------------


def test_bias_fails_smoke_with_shape_dtype_index_and_errors(kernels: Any, small: Problem) -> None:
    report = harness.check(small, kernels.softmax_bias)
    assert not report.passed
    assert [s.name for s in report.stages] == ["smoke"]  # stops at the first failing stage
    failed = report.failed
    assert failed is not None and failed.reason == "mismatch" and report.caught_by == "smoke"
    msg = failed.message
    for part in (
        "shape (8, 64)",
        "dtype float32",
        "worst at index (",
        "max abs err",
        "max rel err",
        "tolerance atol=",
        "seed 0x",
    ):
        assert part in msg, f"{part!r} missing from: {msg}"
    rel = float(re.search(r"max rel err ([0-9.e+-]+)", msg).group(1))  # type: ignore[union-attr]
    assert 0.9e-3 < rel < 1.1e-3  # the kernel's bias is 1e-3 relative


def test_poisoned_output_is_detected(small: Problem) -> None:
    # Writes every row but the last with plain copies (allowed ops), leaving NaN poison.
    def half(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        ref = torch.softmax(x.double(), -1)
        out[:-1].copy_(ref[:-1])
        return out

    report = harness.check(small, half, stages=["odd_sizes"])
    failed = report.failed
    assert failed is not None and failed.reason == "nonfinite"
    assert "poisoned with NaN" in failed.message and "dtype float32" in failed.message
    assert re.search(r"first at index \(\d+, 0\)", failed.message)


def test_integer_outputs_are_poisoned_with_a_sentinel() -> None:
    argmax = Problem(
        name="argmax",
        reference=lambda x: torch.argmax(x, -1),
        make_inputs=lambda s, d, dev, g: (torch.randn(s, generator=g, device=dev).to(d),),
        smoke_shape=(4, 16),
        sweep_shapes=((4, 16),),
        dtypes=(torch.float32,),
    )
    report = harness.check(argmax, lambda x, *, out: out, stages=["odd_sizes"])
    failed = report.failed
    assert failed is not None and failed.reason == "mismatch"
    assert f"poison sentinel is {torch.iinfo(torch.int64).min}" in failed.message


def test_candidate_must_return_out(small: Problem) -> None:
    report = harness.check(small, lambda x, *, out: torch.softmax(x, -1), stages=["odd_sizes"])
    assert report.failed is not None and report.failed.reason == "contract"
    assert "return `out`" in report.failed.message


def test_exceptions_are_a_verdict(small: Problem) -> None:
    def broken(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("BLOCK_N too large")

    report = harness.check(small, broken)
    assert report.caught_by == "smoke" and report.failed.reason == "error"  # type: ignore[union-attr]
    assert "RuntimeError: BLOCK_N too large" in report.failed.message  # type: ignore[union-attr]


def test_torch_compute_guard_names_the_op(small: Problem) -> None:
    report = harness.check(small, _torch_softmax)
    assert report.caught_by == "no_torch_compute"
    assert "calls torch for the computation it claims to do: aten._softmax" in report.failed.message  # type: ignore[union-attr]


def test_pow2_kernel_is_caught_by_odd_sizes_only(kernels: Any, small: Problem) -> None:
    report = harness.check(small, kernels.softmax_pow2)
    assert [s.passed for s in report.stages] == [True, True, True, True, False]
    assert report.caught_by == "odd_sizes"


def test_naive_softmax_fails_adversarial(small: Problem) -> None:
    # No max subtraction: exp(1e4) overflows, which the large-identical-values case exposes.
    def naive(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x.float())
        return out.copy_(e / e.sum(-1, keepdim=True))

    report = harness.check(small, naive, stages=["adversarial"], dtypes=[torch.float32])
    failed = report.failed
    assert failed is not None and failed.reason == "nonfinite"
    assert "large_identical" in failed.message


def test_declared_nondeterminism_is_tolerated_and_quoted(kernels: Any, small: Problem) -> None:
    noisy = kernels.softmax_noisy
    # fp32 only: in bf16 a 5e-7 perturbation sometimes flips an output rounding (one bf16 ulp,
    # up to ~4e-4 here), beyond the 1e-5 declared below; that made this test flaky.
    fp32 = [torch.float32]
    strict = harness.check(small, noisy, stages=["determinism"], dtypes=fp32)
    assert strict.caught_by == "determinism" and "bitwise identical" in strict.failed.message  # type: ignore[union-attr]
    lenient = dataclasses.replace(
        small,
        nondeterminism_tolerance=1e-5,
        nondeterminism_reason="atomic adds in the row reduction",
    )
    report = harness.check(lenient, noisy, stages=["determinism"], dtypes=fp32)
    assert report.passed, report.summary()
    assert "atomic adds in the row reduction" in report.stages[0].message


def test_stale_output_guard(kernels: Any, small: Problem) -> None:
    report = harness.check(small, kernels.SoftmaxMemo())
    assert report.caught_by == "stale_output" and report.failed.reason == "stale"  # type: ignore[union-attr]


def test_completion_guard(kernels: Any, small: Problem) -> None:
    early = kernels.SoftmaxEarly()
    report = harness.check(small, early)
    early.join()
    assert report.caught_by == "completion"


# -- inputs and reference ----------------------------------------------------------------------


def test_fresh_inputs_and_float64_reference_from_the_same_inputs(small: Problem) -> None:
    seen_inputs: list[torch.Tensor] = []
    ref_dtypes: list[torch.dtype] = []

    def reference(x: torch.Tensor) -> torch.Tensor:
        ref_dtypes.append(x.dtype)
        return torch.softmax(x, -1)

    def candidate(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        seen_inputs.append(x.clone())
        return out.copy_(torch.softmax(x.double(), -1))

    problem = dataclasses.replace(small, reference=reference, dtypes=(torch.float16,))
    report = harness.check(problem, candidate, stages=["determinism", "odd_sizes"])
    assert report.passed, report.summary()
    # the reference the output is compared with runs in float64; one more call in the inputs'
    # own dtype gives eager PyTorch's error (the floor on ill-conditioned inputs only)
    assert set(ref_dtypes) == {torch.float64, torch.float16}
    assert ref_dtypes.count(torch.float64) == ref_dtypes.count(torch.float16)
    assert all(t.dtype == torch.float16 for t in seen_inputs)
    # determinism reuses one input 3 times; odd sizes draws fresh ones each trial
    assert torch.equal(seen_inputs[0], seen_inputs[1])
    assert not torch.equal(seen_inputs[3][:, :64], seen_inputs[4][:, :64])


def test_all_zero_inputs_are_refused(small: Problem) -> None:
    zeros = dataclasses.replace(small, make_inputs=lambda s, d, dev, g: (torch.zeros(s, dtype=d),))
    with pytest.raises(ValueError, match="all-zero"):
        harness.check(zeros, _torch_softmax, stages=["odd_sizes"])


# -- the problem's own faults: a ProblemError naming the trial, never a verdict on the candidate --


def test_reference_failing_at_a_later_sweep_shape_is_a_problem_error(kernels: Any,
                                                                      small: Problem) -> None:
    # Smoke (8, 64) and the first sweep shape (4, 64) pass; the reference raises at (2, 256).
    def narrow_only(x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] > 64:
            raise RuntimeError("rows wider than 64 are not supported")
        return torch.softmax(x, -1)

    problem = dataclasses.replace(small, reference=narrow_only)
    with pytest.raises(ProblemError) as info:
        harness.check(problem, kernels.softmax_good, stages=["smoke", "sweep"],
                      dtypes=[torch.float32])
    err = info.value
    assert (err.stage, err.shape, err.dtype) == ("sweep", (2, 256), "float32")
    assert "reference raised RuntimeError: rows wider than 64 are not supported" in str(err)
    assert "stage sweep, shape (2, 256), dtype float32, seed 0x" in str(err)
    assert isinstance(err.__cause__, RuntimeError)


def test_make_inputs_failing_at_one_shape_is_a_problem_error(small: Problem) -> None:
    def make_inputs(shape: Any, dtype: torch.dtype, device: Any, gen: Any) -> tuple[Any, ...]:
        if shape[-1] == 7:
            raise IndexError("no layout for 7 columns")
        return small.make_inputs(shape, dtype, device, gen)

    problem = dataclasses.replace(small, make_inputs=make_inputs)
    with pytest.raises(ProblemError, match=r"make_inputs raised IndexError: no layout for 7 "
                                           r"columns \(stage odd_sizes, shape \(8, 7\)"):
        harness.check(problem, _torch_softmax, stages=["odd_sizes"], dtypes=[torch.float32])


def test_inputs_in_another_float_dtype_than_requested_are_refused(small: Problem) -> None:
    # A make_inputs that ignores the dtype: the "fp16" check would run fp32 inputs.
    def always_fp32(shape: Any, dtype: torch.dtype, device: Any, gen: Any) -> tuple[Any, ...]:
        return (torch.randn(shape, generator=gen, device=device),)

    problem = dataclasses.replace(small, make_inputs=always_fp32)
    with pytest.raises(ProblemError) as info:
        harness.check(problem, _torch_softmax, stages=["odd_sizes"], dtypes=[torch.float16])
    assert "make_inputs returned input 0 as float32 when float16 was asked for" in str(info.value)
    assert info.value.stage == "odd_sizes" and info.value.dtype == "float16"


def test_adversarial_inputs_in_another_float_dtype_are_refused(small: Problem) -> None:
    def adversarial(shape: Any, dtype: torch.dtype, device: Any, gen: Any) -> list[Any]:
        return [("huge", (torch.full(shape, 1e4, dtype=torch.float64, device=device),))]

    problem = dataclasses.replace(small, adversarial=adversarial)
    with pytest.raises(ProblemError, match="adversarial case 'huge' returned input 0 as float64 "
                                           "when bfloat16 was asked for"):
        harness.check(problem, _torch_softmax, stages=["adversarial"], dtypes=[torch.bfloat16])


def test_integer_inputs_keep_their_dtype() -> None:
    # Cross-entropy's class targets are int64 whatever the logits' dtype: exempt from the rule.
    def make_inputs(shape: Any, dtype: torch.dtype, device: Any, gen: Any) -> tuple[Any, ...]:
        logits = torch.randn(shape, generator=gen, device=device).to(dtype)
        target = torch.randint(0, shape[-1], shape[:-1], generator=gen, device=device)
        return (logits, target)

    def pick(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return logits.gather(-1, target[:, None])[:, 0]

    problem = Problem(name="pick", reference=pick, make_inputs=make_inputs, smoke_shape=(4, 16),
                      sweep_shapes=((4, 16),), dtypes=(torch.float16,))
    report = harness.check(problem, lambda x, t, *, out: out.copy_(pick(x.double(), t)),
                           stages=["odd_sizes"])
    assert report.passed, report.summary()


def test_reference_returning_no_tensor_is_a_problem_error(small: Problem) -> None:
    problem = dataclasses.replace(small, reference=lambda x: "softmax")
    with pytest.raises(ProblemError, match="reference must return a tensor.*it returned str"):
        harness.check(problem, _torch_softmax, stages=["odd_sizes"], dtypes=[torch.float32])


def test_progress_names_each_new_trial_and_planned_trials_counts_them(kernels: Any,
                                                                      small: Problem) -> None:
    seen: list[tuple[str, tuple[int, ...], torch.dtype]] = []
    report = harness.check(small, kernels.softmax_good, stages=["smoke", "sweep"],
                           dtypes=[torch.float32, torch.float16],
                           progress=lambda stage, shape, dtype: seen.append((stage, shape, dtype)))
    assert report.passed, report.summary()
    assert seen == [("smoke", (8, 64), torch.float32),
                    ("sweep", (4, 64), torch.float32), ("sweep", (2, 256), torch.float32),
                    ("sweep", (4, 64), torch.float16), ("sweep", (2, 256), torch.float16)]
    two = [torch.float32, torch.float16]
    # smoke: the trial and the stale-output guard's call; sweep: 2 shapes x 2 dtypes
    assert planned_trials(small, True, stages=["smoke", "sweep"], dtypes=two) == 2 + 4
    assert planned_trials(small, True, dtypes=two) == 2 + 4 + 6 * 2 + 3 * 2 + 6


def test_unknown_stage_is_named(small: Problem) -> None:
    with pytest.raises(ValueError, match="warmup"):
        harness.check(small, _torch_softmax, stages=["warmup"])


# -- shapes and adversarial inputs ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "budget"),
    [
        ((4096, 4096), 1 << 14),
        ((1, 8192), 1 << 10),
        ((4097, 1537), 1 << 12),
        ((64, 32, 128), 1 << 12),
    ],
    ids=["square", "one-row", "odd", "rank3"],
)
def test_shrink_keeps_rank_and_power_of_two_ness(shape: tuple[int, ...], budget: int) -> None:
    small_shape = shrink_shape(shape, budget)
    assert len(small_shape) == len(shape)
    assert 0 < torch.Size(small_shape).numel() <= budget
    for before, after in zip(shape, small_shape, strict=True):
        is_pow2 = lambda n: n & (n - 1) == 0  # noqa: E731
        assert after <= before
        if after > 2:
            assert is_pow2(before) == is_pow2(after)


def test_shrink_keep_last_never_touches_the_inner_dim() -> None:
    assert shrink_shape((64, 4097), 1 << 14, keep_last=True) == (2, 4097)
    assert shrink_shape((63, 4097), 1 << 14, keep_last=True) == (
        3,
        4097,
    )  # 63 -> 31 -> 15 -> 7 -> 3
    assert shrink_shape((8, 4097), 1 << 16, keep_last=True) == (8, 4097)


def test_sweep_shapes_shrunk_only_under_the_interpreter() -> None:
    p = softmax_problem()
    assert sweep_shapes(p, interpreted=False) == tuple(p.sweep_shapes)
    assert all(torch.Size(s).numel() <= 1 << 14 for s in sweep_shapes(p, interpreted=True))
    given = dataclasses.replace(p, extra={"interpret_shapes": [(2, 32)]})
    assert sweep_shapes(given, interpreted=True) == ((2, 32),)


def test_odd_shapes_derived_from_smoke() -> None:
    inner = {s[-1] for s in odd_shapes(softmax_problem(), interpreted=False)}
    assert {1023, 1537, 4097, 1, 7} <= inner


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_generic_adversarial_cases(dtype: torch.dtype) -> None:
    p = softmax_problem()
    cases = dict(
        generic_adversarial(
            p, (8, 64), dtype, torch.device("cpu"), torch.Generator().manual_seed(0)
        )
    )
    labels = " ".join(cases)
    for part in (
        "large_identical",
        "all_equal_row",
        "near_zero_variance",
        "dynamic_range",
        "near_smallest_normal",
    ):
        assert part in labels
    assert ("near_dtype_max" in labels) == (dtype == torch.float16)
    for (x,) in cases.values():
        assert x.dtype == dtype and x.shape == (8, 64) and bool(torch.isfinite(x).all())
    large = next(v[0] for k, v in cases.items() if k.startswith("large_identical"))
    assert (
        bool((large == large.flatten()[0]).all()) and float(large.flatten()[0]) > 9e3
    )  # 1e4 rounded to bf16 is 9984
    eq_row = cases["all_equal_row"][0][0]
    assert bool((eq_row == eq_row[0]).all())


@pytest.mark.gpu
def test_good_kernel_passes_on_gpu() -> None:
    k = load_kernels(interpret=False)
    report = harness.check(softmax_problem(), k.softmax_good, device="cuda")
    assert report.passed, report.summary()


def test_outcome_is_recorded_in_the_store(kernels: Any, small: Problem, tmp_path: Any) -> None:
    from harness.store import ResultsStore

    with ResultsStore(tmp_path / "results.sqlite") as store:
        harness.check(small, kernels.softmax_bias, store=store)
        (rec,) = store.history("selftest_softmax")
    assert rec.tier == "interpreted" and not rec.passed and rec.variant == "softmax_bias"
    assert rec.metrics["caught_by"] == "smoke" and "max rel err" in rec.message


def test_ill_conditioned_input_is_held_to_eager_error_not_below_it():
    """A near-zero-variance layer norm in fp32: PyTorch's own fp32 result misses the fp32 policy
    against float64; a candidate as good as eager passes, one 10x worse than eager fails."""
    import torch.nn.functional as F

    from harness import trial
    from harness.problem import Problem

    def ref(x):
        return F.layer_norm(x, (x.shape[-1],), eps=1e-5)

    x = 1000.0 + 1e-3 * torch.randn(4, 257, dtype=torch.float64)
    x32 = x.float()
    exact = ref(x)
    eager = ref(x32)
    problem = Problem(name="ln", reference=ref, make_inputs=lambda *a: (x32,), smoke_shape=(4, 257),
                      sweep_shapes=[(4, 257)])
    ctx = trial.CheckContext(problem=problem, candidate=None, device=torch.device("cpu"),
                         interpreted=False, hw=None, uses_matrix_units=False,
                         ref_dtype_default=torch.float64)
    assert not torch.allclose(eager.double(), exact, atol=1e-5, rtol=1e-5)  # eager misses policy
    trial.compare_outputs(ctx, eager.clone(), exact, 0, "as good as eager", native=eager)
    assert ctx.native_floor_used
    worse = (exact + 10 * (eager.double() - exact)).float()
    with pytest.raises(trial.TrialFailed):
        trial.compare_outputs(ctx, worse, exact, 0, "10x worse than eager", native=eager)


def test_cancelling_sum_is_judged_by_input_sensitivity_not_result_size():
    """A float32 sum whose terms cancel: its relative error is legitimately large. An output that
    is the exact sum of inputs a few ulps away passes; one off by 1% of the terms' size fails."""
    from harness import trial
    from harness.problem import Problem

    def ref(x):
        return x.sum(dim=-1)

    x = torch.tensor([[1e6, 1.0, -1e6, 1e-3] * 4], dtype=torch.float32)
    problem = Problem(name="sum", reference=ref, make_inputs=lambda *a: (x,), smoke_shape=(1, 16),
                      sweep_shapes=[(1, 16)])
    ctx = trial.CheckContext(problem=problem, candidate=None, device=torch.device("cpu"),
                         interpreted=False, hw=None, uses_matrix_units=False,
                         ref_dtype_default=torch.float64)
    exact = ref(x.double())
    sens = trial.Sensitivity(ctx, (x,), torch.float32)
    near = (exact + 0.1).float()  # terms of 1e6 carry an ulp of 0.0625: 0.1 is within reach
    trial.compare_outputs(ctx, near, exact, 0, "near", sensitivity=sens)
    assert ctx.native_floor_used
    with pytest.raises(trial.TrialFailed):
        trial.compare_outputs(ctx, (exact + 1e4).float(), exact, 0, "far", sensitivity=sens)


def test_sensitivity_takes_the_largest_change_over_several_draws(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A linear layer on identical 1e4-valued inputs: one perturbation draw's change of an
    output is a random sum of its 64 terms, near zero at a few outputs by chance (there a
    backward-stable fp32 result failed the check, 1 check in 40); the largest over the draws
    is not, and never below a single draw's."""
    from harness import trial

    gen = torch.Generator().manual_seed(3)
    w = torch.randn(512, 64, generator=gen)
    problem = Problem("linear", lambda x: x @ w.t().to(x.dtype), lambda *a: (), (16, 64),
                      [(16, 64)], dtypes=(torch.float32,))
    ctx = trial.CheckContext(problem, lambda *a, **k: None, torch.device("cpu"), True, None,
                             False, torch.float64)
    x = torch.full((16, 64), 1e4)
    ref = (x.double() @ w.t().double())

    def sensitivity(draws: int) -> torch.Tensor:
        monkeypatch.setattr(trial, "SENSITIVITY_DRAWS", draws)
        out = trial.Sensitivity(ctx, (x,), torch.float32).output(0, ref)
        assert out is not None
        return out

    draws = trial.SENSITIVITY_DRAWS
    one, several = sensitivity(1), sensitivity(draws)
    assert bool((several >= one).all())
    tiny = [int((s < s.median() / 8).sum()) for s in (one, several)]
    assert tiny[0] > 0 and tiny[1] < tiny[0] / 4, tiny


def test_determinism_runs_the_reference_once_for_its_repeated_inputs(small: Problem) -> None:
    """The determinism stage runs the candidate several times on one input: the reference (in
    float64, and in the inputs' dtype for eager's own error) runs once, not once per run (a
    reference of several GB may run on the host)."""
    ref_dtypes: list[torch.dtype] = []

    def reference(x: torch.Tensor) -> torch.Tensor:
        ref_dtypes.append(x.dtype)
        return torch.softmax(x, -1)

    problem = dataclasses.replace(small, reference=reference, dtypes=(torch.float16,))
    report = harness.check(problem, _torch_softmax, stages=["determinism"])
    assert report.passed, report.summary()
    assert report.stages[0].trials == 3
    assert sorted(ref_dtypes, key=str) == [torch.float16, torch.float64]
