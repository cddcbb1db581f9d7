"""The CPU executor of Metal kernels: MSL semantics and the rules it enforces.

One Metal source holds every small kernel, so the module compiles once (the library is cached by
the hash of its C++ text, under $PORTER_METAL_CACHE or a per-user temp folder).
"""

from __future__ import annotations

import pytest
import torch

from targets.metal_exec import MetalExecError
from targets.metal_exec import MetalProgram
from targets.metal_exec import TranslateError
from targets.metal_exec import available
from targets.metal_exec import translate

pytestmark = pytest.mark.skipif(not available()[0], reason=available()[1])

SOURCE = r"""
#include <metal_stdlib>
using namespace metal;

// one threadgroup per row: SIMD-group reductions, threadgroup memory across SIMD-groups only
kernel void row_sum(
    device const float* x [[buffer(0)]],
    device float* out [[buffer(1)]],
    constant uint& n [[buffer(2)]],
    uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_position_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]],
    uint tpt [[threads_per_threadgroup]])
{
    threadgroup float part[32];
    float acc = 0.0f;
    for (uint c = tid; c < n; c += tpt) acc += x[row * n + c];
    acc = simd_sum(acc);
    if (lane == 0) part[sg] = acc;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint nsg = (tpt + 31) / 32;
    float total = lane < nsg ? float(part[lane]) : 0.0f;
    total = simd_sum(total);
    if (tid == 0) out[row] = total;
}

kernel void row_sum_shuffle(
    device const float* x [[buffer(0)]],
    device float* out [[buffer(1)]],
    uint row [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]])
{
    // a shuffle tree that assumes 32 active lanes
    float v = x[row * 32 + lane];
    for (ushort d = 16; d > 0; d >>= 1) v += simd_shuffle_down(v, d);
    if (lane == 0) out[row] = v;
}

kernel void missing_barrier(
    device float* out [[buffer(0)]],
    uint tid [[thread_position_in_threadgroup]])
{
    threadgroup float s[64];
    s[tid] = float(tid);
    out[tid] = s[(tid + 1) % 64];
}

kernel void read_lower(
    device float* out [[buffer(0)]],
    uint tid [[thread_position_in_threadgroup]])
{
    threadgroup float s[64];
    s[tid] = float(tid);
    out[tid] = s[tid > 0 ? tid - 1 : 0];
}

kernel void uninitialized(
    device float* out [[buffer(0)]],
    uint tid [[thread_position_in_threadgroup]])
{
    threadgroup float s[64];
    s[tid] = float(tid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = s[tid + 32];
}

kernel void tg_overflow(
    device float* out [[buffer(0)]],
    uint tid [[thread_position_in_threadgroup]])
{
    threadgroup float s[32];
    s[tid] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = s[0];
}

kernel void divergent_barrier(
    device float* out [[buffer(0)]],
    uint tid [[thread_position_in_threadgroup]])
{
    if (tid >= 16) return;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = 1.0f;
}

kernel void deadlock(
    device float* out [[buffer(0)]],
    uint tid [[thread_position_in_threadgroup]])
{
    if (tid < 16) {
        out[tid] = simd_sum(1.0f);
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
}

kernel void oob_device(
    device const float* x [[buffer(0)]],
    device float* out [[buffer(1)]],
    uint gid [[thread_position_in_grid]])
{
    out[gid] = x[gid + 1];
}

kernel void vec4_copy(
    device const half* x [[buffer(0)]],
    device half* out [[buffer(1)]],
    constant long& offset [[buffer(2)]],
    uint gid [[thread_position_in_grid]])
{
    half4 v = ((device const half4*)(x + offset))[gid];
    ((device half4*)(out + offset))[gid] = v * half(2.0f);
}

kernel void bf16_scale(
    device const bfloat* x [[buffer(0)]],
    device bfloat* out [[buffer(1)]],
    constant float& scale [[buffer(2)]],
    uint3 gid [[thread_position_in_grid]],
    uint3 grid [[threads_per_grid]])
{
    uint i = gid.y * grid.x + gid.x;
    out[i] = bfloat(float(x[i]) * scale);
}
"""


@pytest.fixture(scope="module")
def prog() -> MetalProgram:
    return MetalProgram(SOURCE)


def test_translation_reads_the_signature() -> None:
    tr = translate(SOURCE)
    sig = next(k for k in tr.kernels if k.name == "row_sum")
    assert [(p.name, p.index) for p in sig.buffers()] == [("x", 0), ("out", 1), ("n", 2)]
    assert [p.attr for p in sig.params if p.kind == "attr"] == [
        "threadgroup_position_in_grid", "thread_position_in_threadgroup",
        "thread_index_in_simdgroup", "simdgroup_index_in_threadgroup", "threads_per_threadgroup"]
    assert "porter_rt::dev_ptr<const float>" in tr.cpp and "PORTER_TG(float, part, (32)" in tr.cpp


@pytest.mark.parametrize("threads,n", [(32, 32), (96, 1000), (1024, 4097), (7, 7), (40, 3)],
                         ids=["one-simdgroup", "partial-last-pass", "max-threads", "partial-simd",
                              "idle-threads"])
def test_simd_reduction_matches_torch(prog: MetalProgram, threads: int, n: int) -> None:
    x = torch.randn(5, n)
    out = torch.full((5,), float("nan"))
    prog.launch("row_sum", [x, out, n], threadgroups=(5,), threads=(threads,))
    torch.testing.assert_close(out, x.double().sum(1).float(), rtol=1e-5, atol=1e-5)


def test_launch_counter_proves_it_ran(prog: MetalProgram) -> None:
    before = prog.launches
    prog.launch("row_sum", [torch.ones(1, 8), torch.zeros(1), 8], threadgroups=(1,), threads=(32,))
    assert prog.launches == before + 1


def test_shuffle_reads_inactive_lane_as_poison(prog: MetalProgram) -> None:
    x = torch.randn(2, 32)
    out = torch.zeros(2)
    prog.launch("row_sum_shuffle", [x, out], threadgroups=(2,), threads=(32,))
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)
    # 20 lanes: the tree reads lanes 20..31, which do not exist -> poison (NaN), not a value
    prog.launch("row_sum_shuffle", [x, out], threadgroups=(2,), threads=(20,))
    assert torch.isnan(out).all()


def test_missing_barrier_is_a_race(prog: MetalProgram) -> None:
    # threads run highest index first: thread 62 reads s[63] that thread 63 wrote in the same
    # barrier interval
    with pytest.raises(MetalExecError, match=r"data race on threadgroup memory s\[63\]: written "
                                             r"by thread 63 and read by thread 62"):
        prog.launch("missing_barrier", [torch.zeros(64)], threadgroups=(1,), threads=(64,))


def test_read_before_another_threads_write_is_a_race(prog: MetalProgram) -> None:
    # thread 63 reads s[62] (not written yet), then thread 62 writes it
    with pytest.raises(MetalExecError, match=r"s\[62\]: read by thread 63 before thread 62 wrote"):
        prog.launch("read_lower", [torch.zeros(64)], threadgroups=(1,), threads=(64,))


def test_uninitialized_threadgroup_read(prog: MetalProgram) -> None:
    with pytest.raises(MetalExecError, match=r"thread 31 read threadgroup memory s\[63\] but no "
                                             r"thread wrote it"):
        prog.launch("uninitialized", [torch.zeros(64)], threadgroups=(1,), threads=(32,))


def test_threadgroup_array_overflow(prog: MetalProgram) -> None:
    prog.launch("tg_overflow", [torch.zeros(32)], threadgroups=(1,), threads=(32,))
    with pytest.raises(MetalExecError, match=r"s\[32\] indexed at 63: out of bounds"):
        prog.launch("tg_overflow", [torch.zeros(64)], threadgroups=(1,), threads=(64,))


def test_divergent_barrier(prog: MetalProgram) -> None:
    with pytest.raises(MetalExecError, match="reached by 16 of 64 threads"):
        prog.launch("divergent_barrier", [torch.zeros(64)], threadgroups=(1,), threads=(64,))


def test_deadlock_is_reported_not_hung(prog: MetalProgram) -> None:
    with pytest.raises(MetalExecError, match="deadlock"):
        prog.launch("deadlock", [torch.zeros(64)], threadgroups=(1,), threads=(32,))


def test_device_out_of_bounds(prog: MetalProgram) -> None:
    x, out = torch.randn(64), torch.zeros(64)
    with pytest.raises(MetalExecError, match="device buffer x .* element 64: out of bounds"):
        prog.launch("oob_device", [x, out], threadgroups=(2,), threads=(32,))


def test_vector_loads_and_alignment(prog: MetalProgram) -> None:
    x = torch.randn(64).half()
    out = torch.zeros(64).half()
    prog.launch("vec4_copy", [x, out, 0], threadgroups=(1,), threads=(16,))
    torch.testing.assert_close(out, x * 2)
    with pytest.raises(MetalExecError, match="misaligned"):
        prog.launch("vec4_copy", [x, out, 1], threadgroups=(1,), threads=(8,))


def test_bfloat_and_3d_positions(prog: MetalProgram) -> None:
    x = torch.randn(4, 32).bfloat16()
    out = torch.zeros(4, 32).bfloat16()
    prog.launch("bf16_scale", [x, out, 0.5], threadgroups=(2, 4), threads=(16, 1))
    assert torch.equal(out, (x.float() * 0.5).bfloat16())


def test_argument_checks(prog: MetalProgram) -> None:
    with pytest.raises(MetalExecError, match="bfloat\\* but the tensor is torch.float32"):
        prog.launch("bf16_scale", [torch.zeros(4), torch.zeros(4), 1.0], threadgroups=(1,),
                    threads=(4,))
    with pytest.raises(MetalExecError, match="takes 3 buffers"):
        prog.launch("row_sum", [torch.zeros(4)], threadgroups=(1,), threads=(4,))
    with pytest.raises(MetalExecError, match="2048 threads per threadgroup > 1024"):
        prog.launch("row_sum", [torch.zeros(4), torch.zeros(1), 4], threadgroups=(1,),
                    threads=(2048,))


def test_unsupported_construct_is_named() -> None:
    with pytest.raises(TranslateError, match="texture"):
        translate("kernel void k(texture2d<float> t [[texture(0)]]) {}")
