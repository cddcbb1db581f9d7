"""harness.screen: the chunked first pass of the comparison (bounded memory for outputs of
several GB), and the reference's fallback to the host when it runs out of device memory."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import harness
import harness.trial as trial
from harness.screen import screen
from harness.selftest.problem import softmax_problem
from harness.tolerance import Tolerance

TOL = Tolerance(1e-5, 1e-5, "test")


def test_screen_is_clean_within_tolerance_across_chunks() -> None:
    ref = torch.rand(1000, dtype=torch.float64) + 0.5
    out = (ref * (1 + 1e-7)).float()
    s = screen(out, ref, TOL, chunk=64)  # 16 chunks, the last one short
    assert s.clean
    assert 0 < s.max_abs < 1e-6 and 0 < s.max_rel < 1e-6


@pytest.mark.parametrize("bad", [1.0, math.nan, math.inf])
def test_screen_finds_one_bad_element_in_any_chunk(bad: float) -> None:
    ref = torch.rand(1000, dtype=torch.float64) + 0.5
    out = ref.float().clone()
    out[999] = ref[999] + bad  # in the last, short chunk
    assert not screen(out, ref, TOL, chunk=64).clean


def test_screen_accepts_matching_non_finite_reference_values() -> None:
    ref = torch.tensor([1.0, math.inf, -math.inf, math.nan], dtype=torch.float64)
    assert screen(ref.float(), ref, TOL, chunk=2).clean
    assert not screen(torch.tensor([1.0, math.inf, 0.0, math.nan]), ref, TOL, chunk=2).clean


def _softmax(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(torch.softmax(x.double(), -1))


def _off_by_one_element(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    out.copy_(torch.softmax(x.double(), -1))
    out.view(-1)[-1] += 0.5
    return out


def test_large_outputs_are_screened_and_failures_still_explained(monkeypatch) -> None:
    # A chunk of 64 elements makes every output of the check "large": the screen decides the
    # passes, and the whole-tensor comparison still writes the failure's message.
    monkeypatch.setattr(trial, "CHUNK_ELEMENTS", 64)
    # (odd_sizes: a stage without the torch-compute guard, so a torch-written candidate runs)
    problem = dataclasses.replace(softmax_problem(), odd_shapes=((4, 64), (3, 257)))
    good = harness.check(problem, _softmax, stages=["odd_sizes"], dtypes=[torch.float32])
    assert good.passed, good.summary()
    bad = harness.check(problem, _off_by_one_element, stages=["odd_sizes"], dtypes=[torch.float32])
    assert not bad.passed
    assert "1 of 256 elements out of tolerance" in bad.failed.message


def test_reference_out_of_device_memory_runs_on_the_host(monkeypatch) -> None:
    base = softmax_problem()
    calls: list[str] = []

    def reference(x: torch.Tensor) -> torch.Tensor:
        calls.append(str(x.device))
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")
        return base.reference(x)

    problem = dataclasses.replace(base, reference=reference)
    report = harness.check(problem, _softmax, stages=["odd_sizes"], dtypes=[torch.float32])
    assert report.passed, report.summary()
    assert len(calls) >= 2  # the retry ran (on the host) after the failed first call


def test_other_reference_failures_are_still_the_problem() -> None:
    def reference(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("shape mismatch in the spec")

    problem = dataclasses.replace(softmax_problem(), reference=reference)
    with pytest.raises(harness.problem.ProblemError, match="shape mismatch in the spec"):
        harness.check(problem, _softmax, stages=["odd_sizes"], dtypes=[torch.float32])
