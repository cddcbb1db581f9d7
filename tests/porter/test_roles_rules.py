"""The offline Debugger and Profiler on their own: rules in, diagnoses and profiles out."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import hwmodels
import targets
from porter.roles import artifacts as a
from porter.roles.base import DebugRequest
from porter.roles.base import ProfileRequest
from porter.roles.debugger import RuleDebugger
from porter.roles.debugger import classify_compile_error
from porter.roles.debugger import resource_fix
from porter.roles.profiler import StaticProfiler


def _ctx(name: str = "h100") -> SimpleNamespace:
    hw = hwmodels.get(name)
    backend = targets.for_device(hw)
    return SimpleNamespace(hw=hw, backend=backend, target=hw.name, plan=None,
                           capabilities=backend.capabilities)


def _diagnose(reason: str, config: dict, name: str = "h100") -> a.Diagnosis:
    row = a.BenchRow(target=name, bucket="4096x32768", dtype="fp32",
                     config=json.dumps(config, sort_keys=True, separators=(",", ":")),
                     source_hash="ab" * 8, tier="emitted", verdict="rejected", reason=reason)
    kernel = a.KernelSource(target=name, language="triton", source="", config=config)
    return RuleDebugger().diagnose(_ctx(name), DebugRequest(target=name, shape=(4096, 32768),
                                                            row=row, kernel=kernel))


PERSISTENT = {"BLOCK_N": 32768, "ROWS": 1, "dtype": "fp32", "num_stages": 3, "num_warps": 32,
              "strategy": "persistent"}
SMEM = ("_rmsnorm_persistent_kernel does not fit: shared memory 263296 B per block > 232448 B "
        "shared memory max per block on h100 (by 30848 B)")


def test_a_shared_memory_overflow_gets_one_stage_fewer() -> None:
    d = _diagnose(SMEM, PERSISTENT)
    assert d.kind == "misfit (shared memory)" and d.classification == "shared memory"
    assert d.fix_config == {**PERSISTENT, "num_stages": 2}
    assert d.fix_change == "num_stages 3 -> 2" and not d.fixed  # the loop verifies it


@pytest.mark.parametrize("config, what, fix", [
    # one stage left: the largest tile halves
    ({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 1}, "shared memory",
     "BLOCK_N 256 -> 128"),
    # a row that must fit one block: more warps spread it, BLOCK_N stays
    ({"strategy": "single_pass", "BLOCK_N": 65536, "num_warps": 8}, "registers",
     "num_warps 8 -> 16"),
    ({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4}, "spills",
     "BLOCK_K 128 -> 64"),
    ({"num_warps": 64}, "threads", "num_warps 64 -> 32"),
], ids=["smem-tile", "regs-whole-row", "spills-tile", "threads"])
def test_resource_fixes(config: dict, what: str, fix: str) -> None:
    fixed = resource_fix(config, what, max_warps=32)
    assert fixed is not None and fixed[1] == fix


def test_no_fix_where_no_rule_knows_one() -> None:
    assert resource_fix({"strategy": "single_pass", "BLOCK_N": 4096, "num_warps": 32},
                        "registers", max_warps=32) is None
    # the spec's own kernel: its launcher picks its sizes, so no config fix is proposed
    assert _diagnose(SMEM, {"origin": "existing", "num_stages": 3}).fix_config is None


def test_a_fix_the_backend_refuses_is_not_proposed() -> None:
    # 32 warps of 64 lanes on MI300X: doubling warps past the workgroup limit is refused
    d = _diagnose("k does not fit: registers 600 per thread > 512", {
        "strategy": "single_pass", "BLOCK_N": 65536, "num_warps": 16}, name="mi300x")
    assert d.kind == "misfit (registers)" and d.fix_config is None


def test_a_failure_at_odd_sizes_names_the_failing_input() -> None:
    reason = ("odd_sizes: output 0: 3 of 9 elements out of tolerance; max abs err 2.0e-01 "
              "(input 'random', shape (3, 1023), dtype bf16, seed 0x2)")
    d = _diagnose(reason, {"num_warps": 4})
    assert d.kind == "failed odd_sizes at bf16" and "partial block" in d.classification
    assert d.smallest_failing == a.FailingInput((3, 1023), "bf16", "odd_sizes")
    assert d.fix_config is None


@pytest.mark.parametrize("text, cls", [
    ("compile error: triton.compiler.errors.CompilationError: at 3:4: NameError('x')",
     "undefined name"),
    ("compile error: out of resource: shared memory, Required: 300000", "resources"),
    ("compile error: PassManager::run failed", "backend"),
    ("compile error: something else entirely", "other"),
])
def test_compile_errors_are_classified(text: str, cls: str) -> None:
    assert classify_compile_error(text) == cls
    assert _diagnose(text, {"num_stages": 2}).kind == "compile error"


def test_crashes_name_the_signal_and_unknown_failures_do_not_raise() -> None:
    d = _diagnose("interpreted check crashed (exit -11): a | b | Segmentation fault", {})
    assert d.kind == "crashed" and d.classification == "crash (SIGSEGV)"
    assert _diagnose("something nobody has seen", {}).kind == "unknown"


def test_profile_reads_resources_limits_and_roofline() -> None:
    details = {"kernels": [{"kernel": "k", "registers": 40, "smem_bytes": 0, "spill_bytes": 0,
                            "occupancy": 0.125, "blocks_per_unit": 2,
                            "limited_by": "registers"}]}
    numbers = {"time_ms": 0.05, "label": "projected", "bound": "memory", "pct_of_peak": 55.0,
               "floor_ms": 0.0275, "bytes_moved": 1 << 24, "flops": 0}
    prof = StaticProfiler().profile(_ctx(), ProfileRequest(
        target="h100", bucket="4096x4096", dtype="bf16", shape=(4096, 4096),
        config={"num_warps": 4}, tier="interpreted", numbers=numbers, details=details))
    assert prof.kernels[0].registers == 40 and prof.kernels[0].limited_by == "registers"
    assert prof.limits["shared_memory_per_block_bytes"] == 232448
    assert prof.roofline["pct_of_peak"] == 55.0 and prof.roofline["bound"] == "memory"
    assert "55% of the roofline (projected)" in prof.bottleneck
    assert "occupancy 12%, limited by registers" in prof.bottleneck
    assert prof.counters is None and "projected" in prof.counters_note
