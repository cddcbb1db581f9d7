"""The CPU executor of Metal kernels: MSL semantics and the rules it enforces.

One Metal source holds every small kernel, so the module compiles once (the library is cached by
the hash of its C++ text, under $PORTER_METAL_CACHE or a per-user temp folder).
"""

from __future__ import annotations

import os
from pathlib import Path

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

kernel void tile_overlap(
    device float* out [[buffer(0)]],
    uint tg [[threadgroup_position_in_grid]],
    uint tid [[thread_position_in_threadgroup]])
{
    out[tg * 32 + tid] = float(tid);
    if (tid == 0) out[tg * 32 + 32] = 0.0f;  // one past its own tile: the next tile's first
}

kernel void same_element(
    device float* out [[buffer(0)]],
    constant long& with_barrier [[buffer(1)]],
    uint tid [[thread_position_in_threadgroup]])
{
    if (tid == 5) out[0] = 5.0f;
    if (with_barrier) threadgroup_barrier(mem_flags::mem_device);
    if (tid == 0) out[0] = out[0] + 1.0f;
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
    assert "porter_rt::dev_ptr<const float>" in tr.cpp
    assert "PORTER_TG(float, part, 1, (32))" in tr.cpp
    # the signature is one C++ line, padded with its line breaks: later lines keep their numbers
    barrier = "    threadgroup_barrier(mem_flags::mem_threadgroup);"
    assert tr.cpp.splitlines().index(barrier) == SOURCE.splitlines().index(barrier)


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


def test_two_threadgroups_writing_one_element_is_a_race(prog: MetalProgram) -> None:
    out = torch.zeros(96)
    with pytest.raises(MetalExecError, match=r"device buffer out byte 128: written by threadgroup "
                                             r"1 after threadgroup 0 wrote it"):
        prog.launch("tile_overlap", [out], threadgroups=(2,), threads=(32,))


def test_device_writes_within_a_threadgroup_need_a_barrier(prog: MetalProgram) -> None:
    out = torch.zeros(4)
    with pytest.raises(MetalExecError, match="read by thread 0 after thread 5 wrote it with no "
                                             "threadgroup_barrier"):
        prog.launch("same_element", [out, 0], threadgroups=(1,), threads=(32,))
    prog.launch("same_element", [out, 1], threadgroups=(1,), threads=(32,))
    assert out[0] == 6.0


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


# -- generated kernels, judged on the executor (the emulated tier) ----------------------------

def _gen(name: str, config: dict) -> tuple[object, str]:
    from porter.codegen import generate
    from porter.specs import load_spec

    spec = load_spec(f"examples/{name}/spec.py")
    x = spec.make_inputs(spec.interpret_shapes[0], torch.float32, torch.device("cpu"),
                         torch.Generator().manual_seed(0))
    return spec, generate(spec.reference, x, name=spec.name).metal_source(config)


def test_generated_rowwise_reaches_emulated() -> None:
    from harness.emulated import check_source

    spec, src = _gen("rmsnorm", {"threads": 64, "vec": 4, "index": "i32", "dtype": "fp32"})
    assert "typedef int idx_t;" in src and "simd_sum" in src and "bfloat" not in src
    report = check_source(spec.problem(interpret=True, dtypes=[torch.float32]), src)
    assert report.passed, report.summary()
    assert [s.name for s in report.stages] == ["smoke", "sweep", "adversarial", "determinism",
                                              "odd_sizes"]


def test_one_simdgroup_per_row_needs_no_threadgroup_memory() -> None:
    from harness.emulated import check_source

    spec, src = _gen("softmax", {"threads": 128, "rows": 4, "vec": 2, "dtype": "bf16"})
    main = src.split("kernel void")[1]
    assert "threadgroup float" not in main and "porter_simd_reduce<1>" in main
    report = check_source(spec.problem(interpret=True, dtypes=[torch.bfloat16]), src,
                          stages=["smoke", "odd_sizes"])
    assert report.passed, report.summary()


def test_the_vector_path_runs_and_is_judged() -> None:
    # Two lanes of the vector store swapped: only the aligned (vector) path is wrong, and the
    # judge must see it, so the vector path really runs at the judge's shapes.
    from harness.emulated import check_source

    spec, src = _gen("rmsnorm", {"threads": 64, "vec": 4, "dtype": "fp32"})
    assert "ov0_0.y = " in src and "ov0_0.z = " in src
    bad = src.replace("ov0_0.y = ", "ov0_0.TMP = ").replace("ov0_0.z = ", "ov0_0.y = ")
    bad = bad.replace("ov0_0.TMP = ", "ov0_0.z = ")
    report = check_source(spec.problem(interpret=True, dtypes=[torch.float32]), bad,
                          stages=["smoke", "sweep"])
    assert not report.passed and report.failed.reason == "mismatch"


def test_backend_capability_and_candidate() -> None:
    import hwmodels
    from targets.metal import MetalBackend
    from targets.metal_exec.candidate import MetalCandidate

    backend = MetalBackend()
    caps = backend.capabilities()
    assert caps.cpu_check == "emulator" and caps.tier_here == "emulated"
    _, src = _gen("gelu", {"threads": 128, "vec": 4, "dtype": "fp32"})
    cand = backend.candidate(src, hwmodels.get("m4"))
    assert isinstance(cand, MetalCandidate)
    x = torch.randn(3, 37)
    out = torch.full_like(x, float("nan"))
    assert cand(x, out=out) is out and cand.launches == 1
    torch.testing.assert_close(out, torch.nn.functional.gelu(x), rtol=1e-5, atol=1e-6)


def test_variant_space_is_pruned_by_the_device_model() -> None:
    from dataclasses import replace

    import hwmodels
    from porter.codegen import generate
    from porter.codegen.metal import variant_space
    from porter.specs import load_spec

    m4 = hwmodels.get("m4")
    spec = load_spec("examples/softmax/spec.py")
    x = spec.make_inputs((4, 64), torch.float32, torch.device("cpu"), torch.Generator())
    op = generate(spec.reference, x, name="softmax")
    space = variant_space(op, m4, {"n_rows": 4096, "n_cols": 4096}, 2 ** 24)
    assert space[0] == {"strategy": "metal", "threads": 256, "rows": 1, "vec": 4, "index": "i32"}
    assert all(c["threads"] % 32 == 0 and c["threads"] <= 1024 for c in space)
    assert {c["vec"] for c in space} == {1, 2, 4}
    small = replace(m4, limits=replace(m4.limits, max_threads_per_block=replace(
        m4.limits.max_threads_per_block, value=256)))
    assert max(c["threads"] for c in variant_space(op, small, {"n_rows": 4096,
                                                               "n_cols": 4096}, 2 ** 24)) == 256
    assert {c["index"] for c in variant_space(op, m4, {"n_rows": 4, "n_cols": 4}, 2 ** 32)} == {
        "i64"}
    narrow = variant_space(op, m4, {"n_rows": 4096, "n_cols": 100}, 2 ** 20)
    assert narrow[0]["rows"] == 8 and any(c["rows"] > 1 for c in narrow)


def test_matmul_epilogue_through_simdgroup_matrices() -> None:
    from harness.emulated import check_source

    spec, src = _gen("matmul_bias_gelu", {"tile": 32, "bk": 16, "index": "i32", "dtype": "fp32"})
    assert "simdgroup_multiply_accumulate" in src and "simdgroup_float8x8" in src
    problem = spec.problem(interpret=True, dtypes=[torch.float32])
    report = check_source(problem, src, stages=["smoke", "odd_sizes"])
    assert report.passed, report.summary()
    # the barrier between storing the accumulators and the epilogue's reads, removed
    store = "simdgroup_store(acc[i][j], Cs, TILE, ulong2(sn + 8 * j, sm + 8 * i));\n"
    tail = src.split(store, 1)[1]
    bad = src.replace(store + tail, store + tail.replace(
        "threadgroup_barrier(mem_flags::mem_threadgroup);", "", 1))
    report = check_source(problem, bad, stages=["smoke"])
    assert not report.passed and "data race on threadgroup memory Cs" in report.failed.message


@pytest.mark.parametrize("name,config,smem,threads", [
    ("matmul_bias_gelu", {"tile": 64, "bk": 16, "dtype": "fp32"}, 4 * (2 * 64 * 16 + 64 * 64), 128),
    ("softmax", {"threads": 512, "dtype": "fp32"}, 4 * 512 // 32, 512),
    ("softmax", {"threads": 256, "rows": 8, "dtype": "fp32"}, 0, 256),
], ids=["matmul-64x16", "rowwise-threadgroup", "rowwise-simd-rows"])
def test_static_check_reads_generated_sizes(name: str, config: dict, smem: int,
                                            threads: int) -> None:
    import hwmodels
    from targets.base import KernelRef
    from targets.base import LaunchConfig
    from targets.metal import MetalBackend

    _, src = _gen(name, config)
    kname = metal_kernel_name(src)
    rep = MetalBackend().compile(KernelRef(name=kname, source=src), LaunchConfig(),
                                 hwmodels.get("m4"))
    assert rep.fits, rep.reasons
    assert rep.resources.shared_memory_bytes == smem
    assert rep.resources.threads_per_block == threads
    assert not [n for n in rep.notes if n.startswith("unsized")]


def metal_kernel_name(src: str) -> str:
    import re

    return re.search(r"kernel void (\w+)\(", src).group(1)


def test_stack_overflow_is_named_not_silent(tmp_path) -> None:
    # Each fiber's stack has a guard page: overflowing it ends the process with SIGSEGV and a
    # message, never by overwriting the neighbouring thread's stack. In a child process.
    import signal
    import subprocess
    import sys

    script = tmp_path / "overflow.py"
    script.write_text(
        "import torch\n"
        "from targets.metal_exec import MetalProgram\n"
        "src = '''#include <metal_stdlib>\n"
        "using namespace metal;\n"
        "kernel void k(device float* out [[buffer(0)]], "
        "uint tid [[thread_position_in_threadgroup]]) {\n"
        "    volatile float big[65536];\n"
        "    for (int i = 0; i < 65536; ++i) big[i] = i;\n"
        "    out[tid] = big[tid * 7];\n"
        "}'''\n"
        "MetalProgram(src).launch('k', [torch.zeros(64)], threadgroups=(1,), threads=(64,))\n")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=root, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.returncode == -signal.SIGSEGV, proc.stderr[-2000:]
    assert "overflowed its 128 KiB stack" in proc.stderr


_OK_BODY = ("kernel void k(device float* y [[buffer(0)]], "
            "uint i [[thread_position_in_grid]]) {{ {} }}")


@pytest.mark.parametrize(("code", "named"), [
    ("double d = 1.0; y[i] = d;", "double"),
    ("float* p = new float[4]; y[i] = p[0]; delete[] p;", "new/delete"),
    ("y[i] = std::exp(1.0f);", "std::"),
    ("printf(\"%d\", i);", "C library"),
    ("try { y[i] = 1; } catch (...) {}", "exceptions"),
    ("goto done; done: y[i] = 1;", "goto"),
])
def test_what_metal_refuses_is_refused_naming_it(code: str, named: str) -> None:
    """The executor compiles C++, which takes all of these; Apple's compiler does not (issue
    48): each is refused before translation, with its line."""
    with pytest.raises(TranslateError, match=f"Metal does not accept line 1: .*{named}"):
        translate(_OK_BODY.format(code))


def test_recursion_is_refused_and_comments_do_not_count() -> None:
    src = ("float f(float x) { return x < 1.0f ? x : f(x / 2.0f); }\n"
           + _OK_BODY.format("y[i] = f(y[i]);"))
    with pytest.raises(TranslateError, match="line 1: f calls itself"):
        translate(src)
    fine = "// double, new, std::exp in a comment\n" + _OK_BODY.format("y[i] = 2.0f * y[i];")
    assert translate(fine).kernels[0].name == "k"



def test_a_build_error_names_the_metal_line() -> None:
    src = ("#include <metal_stdlib>\nusing namespace metal;\n"
           "kernel void k(device float* y [[buffer(0)]],\n"
           "              uint i [[thread_position_in_grid]])\n"
           "{\n"
           "    y[i] = undeclared_name;\n"
           "}\n")
    with pytest.raises(MetalExecError, match=r"kernel\.cpp:6:.*undeclared_name"):
        MetalProgram(src)


# -- atomics, multi-dimensional threadgroup arrays, fast:: math (issue 48) --------------------

SOURCE_48 = r"""
#include <metal_stdlib>
using namespace metal;

constant uint TILE = 8;

// every thread adds into one float and one int counter, from several threadgroups
kernel void atomic_sum(
    device const float* x [[buffer(0)]],
    device atomic_float* total [[buffer(1)]],
    device atomic_int* count [[buffer(2)]],
    device atomic_int* lo [[buffer(3)]],
    device atomic_uint* hi [[buffer(4)]],
    constant uint& n [[buffer(5)]],
    uint gid [[thread_position_in_grid]])
{
    if (gid >= n) return;
    atomic_fetch_add_explicit(total, x[gid], memory_order_relaxed);
    atomic_fetch_add_explicit(&count[0], 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(count + 1, 2, memory_order_relaxed);
    atomic_fetch_min_explicit(&lo[0], int(x[gid]), memory_order_relaxed);
    atomic_fetch_max_explicit(&hi[0], uint(gid), memory_order_relaxed);
}

// a compare-exchange loop, and an exchange chain: each thread takes the previous holder's id
kernel void atomic_cas(
    device atomic_uint* counter [[buffer(0)]],
    device atomic_int* slot [[buffer(1)]],
    device int* prev [[buffer(2)]],
    uint gid [[thread_position_in_grid]])
{
    uint old = atomic_load_explicit(counter, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(counter, &old, old + 3u, memory_order_relaxed,
                                                  memory_order_relaxed)) {}
    prev[gid] = atomic_exchange_explicit(&slot[0], int(gid), memory_order_relaxed);
}

// a histogram per threadgroup in threadgroup atomics (an array and a scalar)
kernel void histogram(
    device const uint* x [[buffer(0)]],
    device uint* out [[buffer(1)]],
    constant long& with_barrier [[buffer(2)]],
    uint tg [[threadgroup_position_in_grid]],
    uint tid [[thread_position_in_threadgroup]],
    uint gid [[thread_position_in_grid]])
{
    threadgroup atomic_uint bins[8];
    threadgroup atomic_int seen;
    if (tid < 8) atomic_store_explicit(&bins[tid], 0u, memory_order_relaxed);
    if (tid == 0) atomic_store_explicit(&seen, 0, memory_order_relaxed);
    if (with_barrier) threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&bins[x[gid] % 8], 1u, memory_order_relaxed);
    atomic_fetch_add_explicit(&seen, 1, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid < 8) out[tg * 9 + tid] = atomic_load_explicit(&bins[tid], memory_order_relaxed);
    if (tid == 0) out[tg * 9 + 8] = uint(atomic_load_explicit(&seen, memory_order_relaxed));
}

// thread 0 sets a flag the others wait for: threads run highest index first, so they spin
kernel void spin_wait(
    device atomic_int* flag [[buffer(0)]],
    device int* out [[buffer(1)]],
    uint tid [[thread_position_in_threadgroup]])
{
    if (tid == 0) atomic_store_explicit(flag, 1, memory_order_relaxed);
    else while (atomic_load_explicit(flag, memory_order_relaxed) == 0) {}
    out[tid] = 1;
}

// a tiled transpose through a 2-D threadgroup tile (the extra column: the usual bank pad)
kernel void transpose(
    device const float* x [[buffer(0)]],
    device float* y [[buffer(1)]],
    constant uint& rows [[buffer(2)]],
    constant uint& cols [[buffer(3)]],
    constant long& with_barrier [[buffer(4)]],
    uint2 tg [[threadgroup_position_in_grid]],
    uint2 t [[thread_position_in_threadgroup]])
{
    threadgroup float tile[TILE][TILE + 1];
    uint r = tg.y * TILE + t.y, c = tg.x * TILE + t.x;
    if (r < rows && c < cols) tile[t.y][t.x] = x[r * cols + c];
    if (with_barrier) threadgroup_barrier(mem_flags::mem_threadgroup);
    uint orow = tg.x * TILE + t.y, ocol = tg.y * TILE + t.x;
    if (orow < cols && ocol < rows) y[orow * rows + ocol] = tile[t.x][t.y];
}

kernel void tile_oob(
    device float* out [[buffer(0)]],
    uint2 t [[thread_position_in_threadgroup]])
{
    threadgroup float tile[4][8];
    tile[t.y][t.x + 1] = 1.0f;  // one past its row for t.x == 7: tile[t.y + 1][0] on the GPU
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[t.y * 8 + t.x] = tile[t.y][t.x];
}

kernel void cube(
    device float* out [[buffer(0)]],
    uint3 t [[thread_position_in_threadgroup]])
{
    threadgroup float c[2][3][4];
    c[t.z][t.y][t.x] = float(100 * t.z + 10 * t.y + t.x);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[(t.z * 3 + t.y) * 4 + t.x] = c[1 - t.z][2 - t.y][3 - t.x];
}

kernel void math_fns(
    device const float* x [[buffer(0)]],
    device float* out [[buffer(1)]],
    constant uint& n [[buffer(2)]],
    uint i [[thread_position_in_grid]])
{
    if (i >= n) return;
    float v = x[i];
    out[0 * n + i] = fast::exp(v);
    out[1 * n + i] = fast::exp2(v);
    out[2 * n + i] = fast::log(v);
    out[3 * n + i] = fast::log2(v);
    out[4 * n + i] = fast::rsqrt(v);
    out[5 * n + i] = fast::sqrt(v);
    out[6 * n + i] = fast::sin(v);
    out[7 * n + i] = fast::cos(v);
    out[8 * n + i] = fast::tanh(v);
    out[9 * n + i] = fast::pow(v, 1.5f);
    out[10 * n + i] = precise::exp(v);
    out[11 * n + i] = exp(v);
}
"""


@pytest.fixture(scope="module")
def prog48() -> MetalProgram:
    return MetalProgram(SOURCE_48)


def test_atomic_adds_from_every_thread_give_the_exact_sum(prog48: MetalProgram) -> None:
    n = 1000  # 8 threadgroups of 128, the last one partial: atomics across threadgroups too
    x = torch.randint(-50, 50, (n,)).float()  # integers: the float sum is exact in any order
    total, count = torch.zeros(1), torch.tensor([0, 5], dtype=torch.int32)
    lo, hi = torch.tensor([1000], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    prog48.launch("atomic_sum", [x, total, count, lo, hi, n], threadgroups=(8,), threads=(128,))
    assert total.item() == x.sum().item()
    assert count.tolist() == [n, 5 - 2 * n]
    assert lo.item() == int(x.min()) and hi.item() == n - 1


def test_compare_exchange_and_exchange(prog48: MetalProgram) -> None:
    counter, slot = torch.zeros(1, dtype=torch.int32), torch.tensor([-1], dtype=torch.int32)
    prev = torch.full((256,), -7, dtype=torch.int32)
    prog48.launch("atomic_cas", [counter, slot, prev], threadgroups=(4,), threads=(64,))
    assert counter.item() == 3 * 256
    # every exchange returned the id before it: the ids form one chain from -1 to the last
    assert sorted(prev.tolist() + [slot.item()]) == list(range(-1, 256))


def test_threadgroup_atomics_need_an_initializing_store_and_a_barrier(prog48) -> None:
    x = torch.randint(0, 1000, (4 * 64,), dtype=torch.int32)
    out = torch.zeros(4 * 9, dtype=torch.int32)
    prog48.launch("histogram", [x, out, 1], threadgroups=(4,), threads=(64,))
    want = torch.stack([torch.bincount(g % 8, minlength=8) for g in x.view(4, 64)])
    assert torch.equal(out.view(4, 9)[:, :8], want.int()) and (out.view(4, 9)[:, 8] == 64).all()
    # without the barrier, thread 63 (first to run) updates a bin thread 0 has not stored yet
    with pytest.raises(MetalExecError, match=r"atomic_fetch_add_explicit on threadgroup memory "
                                             r"bins\[\d\], which no thread stored to first"):
        prog48.launch("histogram", [x, out, 0], threadgroups=(4,), threads=(64,))


def test_a_spin_wait_on_another_thread_fails_instead_of_hanging(prog48) -> None:
    flag, out = torch.zeros(1, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
    prog48.launch("spin_wait", [flag, out], threadgroups=(1,), threads=(1,))
    flag.zero_()
    with pytest.raises(MetalExecError, match=r"atomic_load_explicit of flag\[0\] returned the "
                                             r"same value \d+ times in a row: a spin-wait"):
        prog48.launch("spin_wait", [flag, out], threadgroups=(1,), threads=(2,))


_ATOMIC_BODY = ("kernel void k(device atomic_int* counter [[buffer(0)]], "
                "device atomic_float* total [[buffer(1)]], device float* y [[buffer(2)]], "
                "uint i [[thread_position_in_grid]]) {{ {} }}")


@pytest.mark.parametrize(("code", "named"), [
    ("counter[0] += 1;", r"line 1: counter\[0\] used as a plain value \(counter is an "
                         r"atomic_int: an atomic is reached only through the atomic_\*_explicit"),
    ("y[i] = float(counter[i]);", r"line 1: counter\[i\] used as a plain value"),
    ("*counter = 0;", r"line 1: \*counter used as a plain value"),
    ("threadgroup atomic_int n; y[i] = float(n == 0);",
     r"line 1: n used as a plain value \(n is an atomic_int"),
    ("atomic_fetch_add_explicit(total, 1.0f, memory_order_seq_cst);",
     r"line 1: memory_order_seq_cst \(Metal's atomic functions take only memory_order_relaxed\)"),
    ("atomic_store_explicit(&counter[i], 1, memory_order_release);",
     "line 1: memory_order_release"),
])
def test_misused_atomics_are_refused_naming_them(code: str, named: str) -> None:
    with pytest.raises(TranslateError, match=f"Metal does not accept {named}"):
        translate(_ATOMIC_BODY.format(code))


def test_atomic_use_through_the_functions_is_accepted() -> None:
    ok = ("threadgroup atomic_int n; threadgroup atomic_uint h[4][4]; "
          "atomic_store_explicit(&n, 0, memory_order_relaxed); "
          "atomic_fetch_add_explicit(counter + i, 1, memory_order_relaxed); "
          "atomic_fetch_or_explicit(&h[i % 4][0], 1u, memory_order_relaxed); "
          "y[i] = atomic_load_explicit(total, memory_order_relaxed);")
    assert translate(_ATOMIC_BODY.format(ok)).kernels[0].name == "k"


def test_float_atomic_min_does_not_build() -> None:
    # Metal has atomic_fetch_min/max (and the bitwise ones) for atomic_int and atomic_uint only
    src = "#include <metal_stdlib>\nusing namespace metal;\n" + _ATOMIC_BODY.format(
        "atomic_fetch_min_explicit(total, y[i], memory_order_relaxed);")
    with pytest.raises(MetalExecError, match="atomic_fetch_min_explicit: Metal has it for "
                                             "atomic_int and atomic_uint, not atomic_float"):
        MetalProgram(src)


@pytest.mark.parametrize("rows,cols", [(8, 8), (37, 50), (5, 70)])
def test_tiled_transpose_through_a_2d_threadgroup_tile(prog48, rows: int, cols: int) -> None:
    x = torch.randn(rows, cols)
    y = torch.full((cols, rows), float("nan"))
    grid = ((cols + 7) // 8, (rows + 7) // 8)
    prog48.launch("transpose", [x, y, rows, cols, 1], threadgroups=grid, threads=(8, 8))
    assert torch.equal(y, x.T.contiguous())


def test_2d_tile_races_are_named_by_row_and_column(prog48: MetalProgram) -> None:
    x, y = torch.randn(8, 8), torch.zeros(8, 8)
    # thread 62 (x 6, y 7) reads tile[6][7] before thread 55 (x 7, y 6) writes it
    with pytest.raises(MetalExecError, match=r"threadgroup memory tile\[6\]\[7\]: read by thread "
                                             r"62 before thread 55 wrote it"):
        prog48.launch("transpose", [x, y, 8, 8, 0], threadgroups=(1, 1), threads=(8, 8))


def test_2d_index_past_its_row_is_out_of_bounds(prog48: MetalProgram) -> None:
    # tile[1][8] of a float tile[4][8] is element 16 of 32, but not in row 1
    with pytest.raises(MetalExecError, match=r"threadgroup array tile\[4\]\[8\] indexed at 8 in "
                                             r"dimension 2: out of bounds"):
        prog48.launch("tile_oob", [torch.zeros(32)], threadgroups=(1,), threads=(8, 2))


def test_3d_threadgroup_array(prog48: MetalProgram) -> None:
    out = torch.zeros(24)
    prog48.launch("cube", [out], threadgroups=(1,), threads=(4, 3, 2))
    z, y, x = torch.meshgrid(torch.arange(2), torch.arange(3), torch.arange(4), indexing="ij")
    assert torch.equal(out, (100 * (1 - z) + 10 * (2 - y) + (3 - x)).flatten().float())


def test_more_than_three_threadgroup_dims_are_refused() -> None:
    with pytest.raises(TranslateError, match="one to three dimensions"):
        translate(_OK_BODY.format("threadgroup float t[2][2][2][2]; y[i] = 0;"))


# fast:: math: Metal Shading Language Specification 4, section 8.4, Table 8.2

def _ulp(ref: torch.Tensor) -> torch.Tensor:
    """One float ulp in the binade of each (float64) reference value."""
    e = torch.floor(torch.log2(ref.abs().clamp_min(2.0 ** -126)))
    return torch.exp2(e.clamp_min(-126) - 23)


@pytest.fixture(scope="module")
def fast_math(prog48: MetalProgram) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.cat([torch.linspace(-10, 10, 2001), torch.logspace(-3, 1.5, 1000), torch.tensor(
        [0.5, 2.0, 3.1415925, -3.1415925])])
    n = x.numel()
    out = torch.full((12, n), float("nan"))
    prog48.launch("math_fns", [x, out, n], threadgroups=((n + 255) // 256,), threads=(256,))
    return x, out


def test_fast_exp_keeps_within_apples_bound_and_is_not_libm(fast_math) -> None:
    x, out = fast_math
    ref = torch.exp(x.double())
    bound = 3 + torch.floor(torch.abs(2 * x.double()))  # Table 8.2: <= 3 + floor(fabs(2x)) ulp
    for fn, exact in ((0, ref), (1, torch.exp2(x.double()))):
        err = (out[fn].double() - exact).abs() / _ulp(exact)
        assert (err <= bound).all() and err.max() > 3, (fn, err.max())
    # precise:: and unqualified exp stay libm's (within an ulp)
    for row in (10, 11):
        assert ((out[row].double() - ref).abs() / _ulp(ref)).max() <= 1


def test_a_kernel_that_needs_libm_precision_fails_with_fast_exp(fast_math) -> None:
    x, out = fast_math
    torch.testing.assert_close(out[10], torch.exp(x))  # precise::exp passes float32 tolerances
    with pytest.raises(AssertionError):
        torch.testing.assert_close(out[0], torch.exp(x))  # fast::exp does not, as on a Mac


def test_fast_log_rsqrt_sqrt_sin_cos_bounds(fast_math) -> None:
    x, out = fast_math
    xd = x.double()
    pos, near1 = x > 0, (x >= 0.5) & (x <= 2)
    for row, exact, absolute, ulps in ((2, torch.log(xd), 2.0 ** -21, 3),
                                       (3, torch.log2(xd), 2.0 ** -22, 2)):
        err = (out[row].double() - exact).abs()
        assert (err[near1] <= absolute).all() and err[near1].max() > absolute / 8
        far = pos & ~near1
        assert ((err / _ulp(exact))[far] <= ulps).all()
        assert torch.isnan(out[row][~pos]).all()  # x <= 0: undefined, poison here
    rsq = 1 / torch.sqrt(xd)
    err = (out[4].double() - rsq).abs() / _ulp(rsq)
    assert (err[pos] <= 2).all() and err[pos].max() > 1
    # sqrt is "implemented as x * rsqrt(x)": exactly the float product of the two
    assert torch.equal(out[5][pos], x[pos] * out[4][pos])
    in_range = x.abs() <= 3.1415927
    for row, exact in ((6, torch.sin(xd)), (7, torch.cos(xd))):
        err = (out[row].double() - exact).abs()[in_range]
        assert (err <= 2.0 ** -13).all() and err.max() > 2.0 ** -16


def test_fast_tanh_and_pow_are_their_documented_formulas(prog48: MetalProgram) -> None:
    x = torch.tensor([50.0, -50.0, 0.0, 0.5, -2.0, 4.0, float("inf")])
    out = torch.zeros(12, 7)
    prog48.launch("math_fns", [x, out, 7], threadgroups=(1,), threads=(32,))
    tanh, pow_ = out[8], out[9]
    # (t - 1) / (t + 1) with t = exp(2x): inf / inf once exp(100) overflows float; elsewhere
    # the fast exp's and the fast division's errors (exp(0) may be 1 +- 3 ulp, so tanh(0) != 0)
    assert torch.isnan(tanh[0]) and abs(tanh[1] + 1) <= 2.5 * 2 ** -23 and abs(tanh[2]) < 1e-6
    torch.testing.assert_close(tanh[3:6], torch.tanh(x[3:6]), rtol=1e-5, atol=1e-6)
    # exp2(y * log2(x)): a negative base has no log2
    assert torch.isnan(pow_[4]) and pow_[2] == 0
    torch.testing.assert_close(pow_[[3, 5]], x[[3, 5]] ** 1.5, rtol=1e-5, atol=0)
    # sqrt's special cases "handled correctly": 0, a negative number, inf
    assert out[5][2] == 0 and torch.isnan(out[5][4]) and out[5][6] == float("inf")


def test_fast_math_is_reproducible(prog48: MetalProgram, fast_math) -> None:
    x, out = fast_math
    again = torch.full_like(out, float("nan"))
    prog48.launch("math_fns", [x, again, x.numel()], threadgroups=((x.numel() + 255) // 256,),
                  threads=(256,))
    assert torch.equal(out.view(torch.int32), again.view(torch.int32))
