"""Device-dependent fit, config pruning before compiling, registry and loading errors, Metal."""

from __future__ import annotations

import os

import pytest

import hwmodels
import targets
from targets import CompileError
from targets import KernelRef
from targets import LaunchConfig
from targets.metal import NO_COMPILER_NOTE
from targets.metal import threadgroup_arrays

from .conftest import RMSNORM
from .conftest import SMEM_STRESS


@pytest.fixture(scope="module")
def smem_heavy_ref():
    fn = targets.load_kernel(SMEM_STRESS, "_matmul_fwd_kernel")
    return targets.kernel_ref_for(
        fn, dtype="bf16", constexprs={"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64},
        divisible_by_16={"M", "N", "K", "stride_am", "stride_bk", "stride_cm"},
    )


def test_smem_heavy_config_fits_h100_not_mi300x(smem_heavy_ref):
    config = LaunchConfig(num_warps=4, num_stages=4)
    h100, mi300x = hwmodels.get("h100"), hwmodels.get("mi300x")
    on_h100 = targets.for_device(h100).compile(smem_heavy_ref, config, h100)
    on_mi = targets.for_device(mi300x).compile(smem_heavy_ref, config, mi300x)

    lds = on_mi.resources.shared_memory_bytes
    assert 65536 < on_h100.resources.shared_memory_bytes <= 232448
    assert on_h100.fits, on_h100.reasons
    assert not on_mi.fits
    assert on_mi.reasons == (
        f"LDS {lds} B per workgroup > 65536 B LDS per CU on mi300x (by {lds - 65536} B)",
    )
    assert on_mi.occupancy.blocks_per_unit == 0


def test_validate_config_prunes_before_compiling():
    h100, mi300x = hwmodels.get("h100"), hwmodels.get("mi300x")
    cuda, hip = targets.get_backend("triton-cuda"), targets.get_backend("triton-hip")
    assert cuda.validate_config(LaunchConfig(num_warps=8), h100) == []
    assert hip.validate_config(LaunchConfig(num_warps=32), mi300x) == [
        "32 wavefronts x 64 lanes = 2048 threads > 1024 per workgroup on mi300x"
    ]
    assert cuda.validate_config(LaunchConfig(extra={"waves_per_eu": 2}), h100) == [
        "unknown knob 'waves_per_eu' for triton-cuda (known: maxnreg, num_ctas)"
    ]
    assert hip.validate_config(LaunchConfig(extra={"waves_per_eu": 2}), mi300x) == []
    assert cuda.validate_config(LaunchConfig(num_warps=6), h100) == [
        "num_warps=6 must be a positive power of two"
    ]
    assert cuda.validate_config(LaunchConfig(), mi300x) == [
        "triton-cuda does not build for mi300x (it uses triton-hip)"
    ]


def test_compile_rejects_unknown_knob_and_wrong_device(rmsnorm_ref):
    h100 = hwmodels.get("h100")
    cuda = targets.get_backend("triton-cuda")
    with pytest.raises(CompileError, match="unknown knob 'waves_per_eu' for triton-cuda"):
        cuda.compile(rmsnorm_ref, LaunchConfig(extra={"waves_per_eu": 2}), h100)
    with pytest.raises(CompileError, match="does not build for mi300x"):
        cuda.compile(rmsnorm_ref, LaunchConfig(), hwmodels.get("mi300x"))


def test_compile_error_names_kernel_and_target(rmsnorm_fn):
    # A constexpr that is not a power of two makes tl.arange fail inside Triton.
    ref = targets.kernel_ref_for(rmsnorm_fn, constexprs={"BLOCK_N": 1000})
    h100 = hwmodels.get("h100")
    with pytest.raises(CompileError, match=r"_rmsnorm_fwd_kernel for h100 \(triton-cuda 90\)"):
        targets.for_device(h100).compile(ref, LaunchConfig(), h100)


def test_untyped_argument_is_named(rmsnorm_fn):
    ref = KernelRef(
        name="k", fn=rmsnorm_fn, signature={"x_ptr": "*fp32"}, constexprs={"BLOCK_N": 64}
    )
    h100 = hwmodels.get("h100")
    with pytest.raises(CompileError, match="w_ptr, y_ptr, stride_xm"):
        targets.for_device(h100).compile(ref, LaunchConfig(), h100)


def test_registry():
    assert targets.available() == ["metal", "triton-cuda", "triton-hip"]
    assert targets.for_device(hwmodels.get("b200")).name == "triton-cuda"
    assert targets.for_device(hwmodels.get("mi355x")).name == "triton-hip"
    assert targets.for_device(hwmodels.get("m4")).name == "metal"
    with pytest.raises(targets.UnknownTargetError,
                       match="available: metal, triton-cuda, triton-hip"):
        targets.get_backend("cuda-c")
    assert targets.occupancy.compute is not None  # importable as targets.occupancy


def test_load_kernel_restores_env_and_is_compilable(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    fn = targets.load_kernel(RMSNORM, "_rmsnorm_fwd_kernel")
    import triton

    assert isinstance(fn, triton.runtime.JITFunction)
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_load_kernel_errors_name_the_file(tmp_path):
    with pytest.raises(targets.KernelLoadError, match="no kernel 'nope'.*_rmsnorm_fwd_kernel"):
        targets.load_kernel(RMSNORM, "nope")
    with pytest.raises(targets.KernelLoadError,
                       match="'rmsnorm_forward' is a function, not a @triton.jit"):
        targets.load_kernel(RMSNORM, "rmsnorm_forward")
    with pytest.raises(targets.KernelLoadError, match="missing.py: no such file"):
        targets.load_kernel(tmp_path / "missing.py", "k")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(targets.KernelLoadError,
                       match="broken.py: import failed: RuntimeError: boom"):
        targets.load_kernel(broken, "k")


def test_signature_from_parameter_names(rmsnorm_fn):
    ref = targets.kernel_ref_for(rmsnorm_fn, dtype="bf16", constexprs={"BLOCK_N": 1024},
                                 divisible_by_16={"stride_xm"})
    assert ref.signature == {
        "x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "stride_xm": "i32:16",
        "stride_ym": "i32", "n_cols": "i32", "eps": "fp32",
    }
    with pytest.raises(targets.KernelLoadError, match="constexpr BLOCK_N not set"):
        targets.kernel_ref_for(rmsnorm_fn)
    with pytest.raises(targets.KernelLoadError, match="no constexpr BLOCK_Q"):
        targets.kernel_ref_for(rmsnorm_fn, constexprs={"BLOCK_N": 64, "BLOCK_Q": 1})
    with pytest.raises(targets.KernelLoadError, match="unknown --dtype 'fp13'"):
        targets.kernel_ref_for(rmsnorm_fn, dtype="fp13", constexprs={"BLOCK_N": 64})


MSL = """
#include <metal_stdlib>
using namespace metal;
constant int TILE = 1024;
kernel void row_sum(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                    uint tid [[thread_index_in_threadgroup]])
    [[max_total_threads_per_threadgroup(256)]]
{
    threadgroup float partial[TILE];
    threadgroup half4 staging[ROWS][64];
    partial[tid] = x[tid];
}
"""


def test_metal_emitted_tier_and_static_checks():
    m4 = hwmodels.get("m4")
    metal = targets.get_backend("metal")
    ref = KernelRef(name="row_sum", source=MSL, constexprs={"ROWS": 2})
    report = metal.compile(ref, LaunchConfig(num_warps=8), m4)
    # partial: 1024 * 4 B; staging: 2 * 64 * 8 B.
    assert report.tier == "emitted" and report.fits, report.reasons
    assert report.resources.shared_memory_bytes == 4096 + 1024
    assert report.resources.registers_per_thread is None
    assert NO_COMPILER_NOTE in report.notes and "nothing was compiled" in NO_COMPILER_NOTE

    over = metal.compile(KernelRef(name="row_sum", source=MSL, constexprs={"ROWS": 64}),
                         LaunchConfig(num_warps=16), m4)
    assert not over.fits
    assert over.reasons[0].startswith("threadgroup memory 36864 B per threadgroup > 32768 B")
    assert "threads 512 per threadgroup > 256 declared" in over.reasons[1]


def test_metal_errors():
    m4 = hwmodels.get("m4")
    metal = targets.get_backend("metal")
    with pytest.raises(CompileError, match="metal builds Metal Shading Language source"):
        metal.compile(KernelRef(name="k", fn=object()), LaunchConfig(), m4)
    total, problems = threadgroup_arrays(MSL)
    assert total == 4096 and "size 'ROWS' is not a known constant" in problems[0]
