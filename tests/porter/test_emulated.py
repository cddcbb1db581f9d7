"""The port's emulated-tier check (porter.emulated): generated Metal judged on the CPU executor
in a child process, as the port loop runs it for cpu_check "emulator"."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from porter.codegen import generate
from porter.emulated import emulated_check
from porter.specs import load_spec
from targets.metal_exec import available

pytestmark = pytest.mark.skipif(not available()[0], reason=available()[1])
SPEC = Path(__file__).resolve().parents[2] / "examples" / "softmax" / "spec.py"


def _source(config: dict) -> str:
    spec = load_spec(SPEC)
    x = spec.make_inputs(spec.interpret_shapes[0], torch.float32, torch.device("cpu"),
                         torch.Generator().manual_seed(0))
    return generate(spec.reference, x, name=spec.name).metal_source(config)


def test_a_generated_kernel_passes_in_the_child() -> None:
    res = emulated_check(SPEC, _source({"threads": 128, "vec": 4, "dtype": "fp16"}), "m4", "fp16")
    assert res["passed"], res["message"]
    assert "odd_sizes" in res["message"] and "CPU Metal executor" in res["message"]
    assert "fp16" in res["tolerances"]


def test_a_source_that_does_not_build_is_a_verdict() -> None:
    src = _source({"threads": 128, "dtype": "fp32"}).replace("simd_sum", "simd_summ")
    res = emulated_check(SPEC, src, "m4", "fp32")
    assert not res["passed"] and "did not build for the executor" in res["message"]


def test_porter_check_target_m4_runs_the_emulated_tier() -> None:
    from click.testing import CliRunner

    from porter.commands.check import check_cmd

    res = CliRunner().invoke(check_cmd, [str(SPEC), "--target", "m4", "--dtype", "fp32"])
    assert res.exit_code == 0, res.output
    assert "CPU Metal executor" in res.output and "result    PASS (emulated tier)" in res.output


def test_one_worker_serves_the_checks_and_a_crash_restarts_it() -> None:
    from porter import emulated

    good = _source({"threads": 64, "dtype": "fp32"})
    assert emulated_check(SPEC, good, "m4", "fp32")["passed"]
    pid = emulated._WORKER.proc.pid
    assert emulated_check(SPEC, good, "m4", "fp32")["passed"]
    assert emulated._WORKER.proc.pid == pid  # the same worker: torch imported once
    overflow = good.replace("    threadgroup float part[THREADS / 32];\n",
                            "    threadgroup float part[THREADS / 32];\n"
                            "    volatile float big[65536];\n"
                            "    for (int i = 0; i < 65536; ++i) big[i] = i;\n", 1)
    res = emulated_check(SPEC, overflow, "m4", "fp32")
    assert not res["passed"] and "crashed" in res["message"]
    assert "overflowed its 128 KiB stack" in res["message"]
    assert emulated_check(SPEC, good, "m4", "fp32")["passed"]  # a fresh worker
    assert emulated._WORKER.proc.pid != pid


def test_emulated_checks_have_their_own_budget(monkeypatch) -> None:
    """The interpreter's CPU budget (6) would leave most M4 buckets unchecked: emulated checks
    are capped on their own, only where the port is budgeted, and the variable overrides."""
    from types import SimpleNamespace

    import pytest

    from porter.emulated import EMULATED_MAX_CHECKS
    from porter.emulated import EMULATED_MAX_CHECKS_ENV
    from porter.emulated import emulated_budget
    from porter.errors import PorterError

    monkeypatch.delenv(EMULATED_MAX_CHECKS_ENV, raising=False)
    assert emulated_budget(SimpleNamespace(max_checks=None)) is None
    assert emulated_budget(SimpleNamespace(max_checks=2)) == EMULATED_MAX_CHECKS > 2
    monkeypatch.setenv(EMULATED_MAX_CHECKS_ENV, "3")
    assert emulated_budget(SimpleNamespace(max_checks=2)) == 3
    monkeypatch.setenv(EMULATED_MAX_CHECKS_ENV, "many")
    with pytest.raises(PorterError, match=EMULATED_MAX_CHECKS_ENV):
        emulated_budget(SimpleNamespace(max_checks=2))
