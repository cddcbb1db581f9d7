"""Probe: wide rows held in shared memory by Gluon kernels (explicit buffers, TMA, mbarriers).

A measuring tool for bench/NOTES.md item 44, not a source of kernels: item 43's counters found
the H200's wide-row picks latency-bound with half of each SM idle, because a 32768-wide row held
in registers leaves room for one program per SM. Here each row goes into a shared-memory buffer
by TMA (x viewed as [n_rows * S, W], S = n_cols / W), and the kernel reads it from there in
[CH, W] chunks, so its registers hold a chunk, not a row:
  STAGES   row buffers per program; the copy of the program's row i + STAGES is issued as soon
           as row i's buffer is read for the last time (STAGES * 64 KB at 32768 bf16)
  per_sm   programs per SM (persistent grid of per_sm * SMs); STAGES 1 x per_sm 3 lets the
           hardware overlap three programs' copies and computations instead
  CH       rows of the [S, W] row per chunk: CH * W / (32 * num_warps) values per thread
  ONE_BOX  the row as one [S, W] TMA box (S <= 256), else one [CH, W] box per chunk
  UNROLL_OUT  the norms' output pass unrolled, so that all its weight loads are in flight at
           once (the other passes stay rolled: unrolled, the compiler merges the passes' loads
           of a chunk and holds the row in registers again)
Layernorm's variance is exact (two rounds over the buffer: mean, then the sum of (x - mean)^2);
the softmax's exps are written back over the row as fp16 (`E_SMEM`, one exp per element, e in
(0, 1] loses < 2^-11) or computed twice (two MUFU operations per element). Weights and biases
are per-thread loads from global memory (L2) in the output pass.

The `ws` family (item 46) is a softmax that keeps the row in registers instead: a loader warp
(`gl.warp_specialize`, its own warpgroup) brings each of a persistent program's rows by TMA into
one of STAGES buffers, and the default partition's warps load it into registers, free the
buffer once the max is taken, and compute the exps once.

Each variant is checked against the float64 reference first, then timed interleaved with the
porter's own picks for the case, eager PyTorch and a copy of the same bytes
(`harness.timing.compare`: LLC flushed every repetition, median of --reps). Needs an NVIDIA GPU
of compute capability 9.0 or newer (TMA); `compile_variant` cross-compiles on a CPU.

    python bench/probe_gluon_rows.py --out /tmp/probe [--reps 50] [--cases softmax:4096x32768:bf16]
        [--families smem,ws]
    python bench/probe_gluon_rows.py --report [--cases ...] [--limit N]   # any machine: what
        each variant compiles to for sm_90 (registers, spills, shared memory, TMA copies)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import mbarrier  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import tma  # noqa: E402

# Triton 3.6 names these thread_barrier and async_copy_global_to_shared; 3.9, barrier and
# async_load (the GPU machines have 3.6, the CPU machines 3.9).
_cta_barrier = gl.thread_barrier if hasattr(gl, "thread_barrier") else gl.barrier
_tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared
LOG2E = gl.constexpr(1.4426950408889634)


if hasattr(gl.shared_memory_descriptor, "reinterpret"):  # 3.9; 3.6 calls it _reinterpret
    @gluon.jit
    def _view(bufs, dtype: gl.constexpr, D0: gl.constexpr, D1: gl.constexpr, D2: gl.constexpr):
        return bufs.reinterpret(dtype, [D0, D1, D2], bufs.layout)
else:
    @gluon.jit
    def _view(bufs, dtype: gl.constexpr, D0: gl.constexpr, D1: gl.constexpr, D2: gl.constexpr):
        return bufs._reinterpret(dtype, [D0, D1, D2], bufs.layout)


@gluon.jit
def _issue_row(x_desc, bufs, bars, row, n_rows, stage, S: gl.constexpr, CH: gl.constexpr,
               NBYTES: gl.constexpr, ONE_BOX: gl.constexpr):
    # the row as one [S, W] box, or one [CH, W] box per chunk (Triton 3.6 puts a CTA barrier
    # before each copy), all counted by the stage's barrier
    if row < n_rows:
        mbarrier.expect(bars.index(stage), NBYTES)
        if ONE_BOX:
            rows = _view(bufs, bufs.dtype, bufs.shape[0] // (S // CH), S, bufs.shape[2])
            _tma_load(x_desc, [row * S, 0], bars.index(stage), rows.index(stage))
        else:
            for c in gl.static_range(S // CH):
                _tma_load(x_desc, [row * S + c * CH, 0], bars.index(stage),
                          bufs.index(stage * (S // CH) + c))


@gluon.jit
def _norm_out(src, w_ptr, b_ptr, out, tile, mean, rstd, chunk: gl.constexpr,
              BIAS: gl.constexpr):
    y = (src.load(chunk).to(gl.float32) - mean) * rstd * gl.load(w_ptr + tile).to(gl.float32)
    if BIAS:
        y = y + gl.load(b_ptr + tile).to(gl.float32)
    gl.store(out + tile, y.to(out.dtype.element_ty))


@gluon.jit
def _rows_smem(x_desc, y_ptr, w_ptr, b_ptr, n_rows, eps,
               OP: gl.constexpr, S: gl.constexpr, W: gl.constexpr, CH: gl.constexpr,
               STAGES: gl.constexpr, E_SMEM: gl.constexpr, ONE_BOX: gl.constexpr,
               UNROLL_OUT: gl.constexpr):
    # OP: 0 softmax, 1 rmsnorm, 2 layernorm. A row is S // CH chunks of [CH, W] in a stage.
    chunk: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
    NCH: gl.constexpr = S // CH
    NBYTES: gl.constexpr = S * W * 2
    bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES * NCH, CH, W], x_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    pid = gl.program_id(0)
    grid = gl.num_programs(0)
    for s in gl.static_range(STAGES):
        _issue_row(x_desc, bufs, bars, pid + s * grid, n_rows, s, S, CH, NBYTES, ONE_BOX)
    tile = (gl.arange(0, CH, layout=gl.SliceLayout(1, chunk))[:, None] * W
            + gl.arange(0, W, layout=gl.SliceLayout(0, chunk))[None, :])
    n = S * W
    i = 0
    for row in range(pid, n_rows, grid):
        stage = i % STAGES
        mbarrier.wait(bars.index(stage), (i // STAGES) & 1)
        first = stage * NCH
        out = y_ptr + row.to(gl.int64) * n
        # dynamic chunk loops: unrolled, the compiler merges the passes' loads of the same
        # chunk and holds the row in registers again
        if OP == 0:
            mx = gl.full([CH, W], float("-inf"), gl.float32, chunk)
            for c in range(NCH):
                mx = gl.maximum(mx, bufs.index(first + c).load(chunk).to(gl.float32))
            m = gl.max(gl.max(mx, axis=1), axis=0) * LOG2E
            acc = gl.zeros([CH, W], gl.float32, chunk)
            if E_SMEM:
                ebufs = _view(bufs, gl.float16, bufs.shape[0], CH, W)
                for c in range(NCH):
                    e = gl.exp2(bufs.index(first + c).load(chunk).to(gl.float32) * LOG2E - m)
                    acc += e
                    ebufs.index(first + c).store(e.to(gl.float16))
                inv = 1.0 / gl.sum(gl.sum(acc, axis=1), axis=0)
                for c in range(NCH):
                    y = ebufs.index(first + c).load(chunk).to(gl.float32) * inv
                    gl.store(out + c * CH * W + tile, y.to(y_ptr.dtype.element_ty))
            else:
                for c in range(NCH):
                    acc += gl.exp2(bufs.index(first + c).load(chunk).to(gl.float32) * LOG2E - m)
                inv = 1.0 / gl.sum(gl.sum(acc, axis=1), axis=0)
                for c in range(NCH):
                    e = gl.exp2(bufs.index(first + c).load(chunk).to(gl.float32) * LOG2E - m)
                    gl.store(out + c * CH * W + tile, (e * inv).to(y_ptr.dtype.element_ty))
        else:
            mean = 0.0
            if OP == 2:
                acc = gl.zeros([CH, W], gl.float32, chunk)
                for c in range(NCH):
                    acc += bufs.index(first + c).load(chunk).to(gl.float32)
                mean = gl.sum(gl.sum(acc, axis=1), axis=0) / n
            acc2 = gl.zeros([CH, W], gl.float32, chunk)
            for c in range(NCH):
                d = bufs.index(first + c).load(chunk).to(gl.float32) - mean
                acc2 += d * d
            rstd = gl.rsqrt(gl.sum(gl.sum(acc2, axis=1), axis=0) / n + eps)
            if UNROLL_OUT:
                # unrolled, so that every chunk's weight loads are in flight at once
                for c in gl.static_range(NCH):
                    _norm_out(bufs.index(first + c), w_ptr + c * CH * W, b_ptr + c * CH * W,
                              out + c * CH * W, tile, mean, rstd, chunk, OP == 2)
            else:
                for c in range(NCH):
                    _norm_out(bufs.index(first + c), w_ptr + c * CH * W, b_ptr + c * CH * W,
                              out + c * CH * W, tile, mean, rstd, chunk, OP == 2)
        # every warp is done with this stage before the next copy lands in it
        _cta_barrier()
        if OP == 0 and E_SMEM:
            fence_async_shared()  # the stage was written through the generic proxy
        _issue_row(x_desc, bufs, bars, row + STAGES * grid, n_rows, stage, S, CH, NBYTES,
                   ONE_BOX)
        i += 1  # noqa: SIM113 (no enumerate in a kernel)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(s))


@gluon.jit
def _ws_loader(x_desc, bufs, ready, empty, n_rows, S: gl.constexpr, STAGES: gl.constexpr):
    # the worker warp: a TMA copy of each of the program's rows into the next free stage
    NBYTES: gl.constexpr = bufs.shape[1] * bufs.shape[2] * 2
    pid = gl.program_id(0)
    grid = gl.num_programs(0)
    i = 0
    for row in range(pid, n_rows, grid):
        stage = i % STAGES
        # a fresh barrier passes a wait for parity 1: the first round finds every stage free
        mbarrier.wait(empty.index(stage), ((i // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(stage), NBYTES)
        _tma_load(x_desc, [row * S, 0], ready.index(stage), bufs.index(stage))
        i += 1  # noqa: SIM113 (no enumerate in a kernel)


@gluon.jit
def _ws_softmax_rows(y_ptr, bufs, ready, empty, n_rows, S: gl.constexpr, W: gl.constexpr,
                     STAGES: gl.constexpr):
    # the default partition: each row from its stage into registers (the row's values stay
    # there, as in the porter's picks), the stage freed once the max has been taken (every
    # warp has read it by then), the exps computed once
    tile_layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
    pid = gl.program_id(0)
    grid = gl.num_programs(0)
    tile = (gl.arange(0, S, layout=gl.SliceLayout(1, tile_layout))[:, None] * W
            + gl.arange(0, W, layout=gl.SliceLayout(0, tile_layout))[None, :])
    i = 0
    for row in range(pid, n_rows, grid):
        stage = i % STAGES
        mbarrier.wait(ready.index(stage), (i // STAGES) & 1)
        x = bufs.index(stage).load(tile_layout).to(gl.float32) * LOG2E
        m = gl.max(gl.max(x, axis=1), axis=0)
        mbarrier.arrive(empty.index(stage))
        e = gl.exp2(x - m)
        inv = 1.0 / gl.sum(gl.sum(e, axis=1), axis=0)
        gl.store(y_ptr + row.to(gl.int64) * (S * W) + tile, (e * inv).to(y_ptr.dtype.element_ty))
        i += 1  # noqa: SIM113 (no enumerate in a kernel)


@gluon.jit
def _softmax_ws(x_desc, y_ptr, w_ptr, b_ptr, n_rows, eps, S: gl.constexpr, W: gl.constexpr,
                STAGES: gl.constexpr, LOADER_REGS: gl.constexpr):
    # Warp-specialized softmax (item 46): one loader warp keeps STAGES rows arriving by TMA
    # while the default partition's warps hold a row in registers. w_ptr, b_ptr and eps are
    # unused: the arguments of _rows_smem, so that one launcher serves both.
    bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES, S, W], x_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([(_ws_softmax_rows, (y_ptr, bufs, ready, empty, n_rows, S, W, STAGES)),
                        (_ws_loader, (x_desc, bufs, ready, empty, n_rows, S, STAGES))],
                       [1], [LOADER_REGS])


OPS = {"softmax": 0, "rmsnorm": 1, "layernorm": 2}


def _descriptor(x: torch.Tensor, w_tile: int, ch: int, one_box: bool) -> Any:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    n_rows, n_cols = x.shape
    s = n_cols // w_tile
    # no swizzle: the chunk layout reads 16 contiguous bytes per thread, conflict-free
    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
    box = [s if one_box else ch, w_tile]
    return TensorDescriptor.from_tensor(x.view(n_rows * s, w_tile), box, layout)


def _kernel_args(op: str, inputs: tuple[Any, ...], cfg: dict[str, Any]
                 ) -> tuple[tuple[Any, ...], dict[str, Any], torch.Tensor]:
    x = inputs[0]
    n_rows, n_cols = x.shape
    w_tile = cfg["W"]
    ch = n_cols // w_tile if cfg.get("WS") else cfg["CH"]  # the ws kernel reads whole rows
    if (n_cols % (w_tile * ch) or not x.is_contiguous() or x.element_size() != 2
            or (cfg.get("ONE_BOX") and n_cols // w_tile > 256)):  # a TMA box side <= 256
        raise ValueError(f"{op}: a row of {n_cols} {x.dtype} is not whole [{ch}, "
                         f"{w_tile}] 16-bit chunks of a contiguous tensor")
    y = torch.empty_like(x)
    weight = inputs[1] if op != "softmax" else x
    bias = inputs[2] if op == "layernorm" else weight
    eps = 1e-5 if op == "layernorm" else 1e-6
    x_desc = _descriptor(x, w_tile, ch, cfg.get("ONE_BOX", False))
    args = (x_desc, y, weight, bias, n_rows, eps)
    if cfg.get("WS"):
        if op != "softmax" or not cfg.get("ONE_BOX"):
            raise ValueError("the warp-specialized kernel is a softmax of one TMA box per row")
        consts = {"S": n_cols // w_tile, "W": w_tile, "STAGES": cfg["STAGES"],
                  "LOADER_REGS": cfg["LOADER_REGS"], "num_warps": cfg["num_warps"]}
        return args, consts, y
    consts = {"OP": OPS[op], "S": n_cols // w_tile, "W": w_tile, "CH": cfg["CH"],
              "STAGES": cfg["STAGES"], "E_SMEM": cfg.get("E_SMEM", False),
              "ONE_BOX": cfg.get("ONE_BOX", False), "UNROLL_OUT": cfg.get("UNROLL_OUT", False),
              "num_warps": cfg["num_warps"]}
    return args, consts, y


def _kernel(cfg: dict[str, Any]) -> Any:
    return _softmax_ws if cfg.get("WS") else _rows_smem


def launch(op: str, inputs: tuple[Any, ...], cfg: dict[str, Any]) -> torch.Tensor:
    args, consts, y = _kernel_args(op, inputs, cfg)
    sms = torch.cuda.get_device_properties(y.device).multi_processor_count
    grid = (min(args[4], sms * cfg["per_sm"]),)
    _kernel(cfg)[grid](*args, **consts)
    return y


def compile_variant(op: str, shape: tuple[int, int], cfg: dict[str, Any],
                    arch: int = 90) -> Any:
    """Cross-compile one variant for sm_<arch> on any machine (no GPU needed)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    x = torch.empty(shape, dtype=torch.bfloat16)
    inputs = (x, torch.empty(shape[1], dtype=torch.bfloat16),
              torch.empty(shape[1], dtype=torch.bfloat16))
    args, consts, _ = _kernel_args(op, inputs, cfg)
    kernel = _kernel(cfg)
    names = list(kernel.arg_names)
    signature = {name: mangle_type(a) for name, a in zip(names, args, strict=False)}
    signature.update({name: "constexpr" for name in consts if name != "num_warps"})
    constexprs = {(names.index(k),): v for k, v in consts.items() if k != "num_warps"}
    # the 16-byte alignment the launcher's specialization sees on the device
    attrs = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(args)
             if isinstance(a, torch.Tensor)}
    src = GluonASTSource(kernel, signature, constexprs, attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options={"num_warps": cfg["num_warps"]})


# The porter's H200 picks at 4096x32768 (run13) and the shared-memory variants.
PICKS: dict[str, list[dict[str, Any]]] = {
    "softmax": [{"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32,
                 "num_stages": 3, "PROGRAMS_PER_SM": 1}],
    "rmsnorm": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 16384, "num_warps": 32}],
    "layernorm": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": 32, "VAR1": True}
                  for b in (8192, 16384)],
}
# (num_warps, CH, STAGES, per_sm); item 44's first round had each chunk its own box and the
# output pass rolled
SHAPES = ((16, 16, 1, 2), (8, 16, 1, 3), (8, 8, 1, 3), (16, 16, 2, 1), (32, 32, 2, 1),
          (16, 16, 3, 1), (32, 32, 3, 1))
SMEM = ([{"W": 256, "num_warps": nw, "CH": ch, "STAGES": st, "per_sm": ps, "ONE_BOX": True,
          "UNROLL_OUT": u} for nw, ch, st, ps in SHAPES for u in (True, False)]
        + [{"W": 256, "num_warps": 16, "CH": 16, "STAGES": 1, "per_sm": 2}])
CASES = ("layernorm:4096x32768:bf16", "softmax:4096x32768:bf16", "rmsnorm:4096x32768:bf16")


# item 46: the warp-specialized softmax (num_warps of the default partition, STAGES); one
# loader warp
WS = [{"W": 256, "num_warps": nw, "STAGES": st, "per_sm": 1, "ONE_BOX": True,
       "WS": True, "LOADER_REGS": 24} for nw, st in ((16, 2), (16, 3), (8, 3))]
FAMILIES = ("smem", "ws")


def variants(op: str, families: tuple[str, ...] = FAMILIES) -> list[dict[str, Any]]:
    smem = [] if "smem" not in families else SMEM if op != "softmax" else [
        {**c, "E_SMEM": e} for c in SMEM if not c.get("UNROLL_OUT") for e in (True, False)]
    return smem + (WS if op == "softmax" and "ws" in families else [])


def probe_case(text: str, hw: Any, reps: int,
               families: tuple[str, ...] = FAMILIES) -> list[dict[str, Any]]:
    from bench.probe_rowwise import probe_beside_picks

    op = text.split(":")[0]
    hand = []
    for cfg in variants(op, families):
        if cfg.get("WS"):
            key = f"ws w{cfg['num_warps']}+1 st{cfg['STAGES']}"
            hand.append((key, cfg, lambda *a, _c=cfg: launch(op, a, _c)))
            continue
        key = (f"smem w{cfg['num_warps']} ch{cfg['CH']} st{cfg['STAGES']} x{cfg['per_sm']}"
               + (" box" if cfg.get("ONE_BOX") else "")
               + (" unroll" if cfg.get("UNROLL_OUT") else "")
               + (" e-smem" if cfg.get("E_SMEM") else ""))
        hand.append((key, cfg, lambda *a, _c=cfg: launch(op, a, _c)))
    return probe_beside_picks(text, hw, reps, PICKS[op], hand)


def compile_report(case: str, arch: int = 90, limit: int | None = None,
                   families: tuple[str, ...] = FAMILIES) -> list[dict[str, Any]]:
    """What each variant of `case` (the first `limit`) compiles to for sm_<arch>."""
    from bench.sweep import parse_case
    from targets.triton_cuda import dump_resource_usage

    op, shape, _ = parse_case(case)
    rows = []
    for cfg in variants(op, families)[:limit]:
        kernel = compile_variant(op, shape, cfg, arch)
        fields, note = dump_resource_usage(kernel.asm["cubin"], kernel.name)
        rows.append({"case": case, "config": cfg, **fields, "note": note,
                     "shared_bytes": kernel.metadata.shared,
                     # every warp of a program, a warp-specialized kernel's workers included
                     "warps": kernel.metadata.num_warps,
                     "setmaxnreg": kernel.asm["ptx"].count("setmaxnreg"),
                     "tma_copies": kernel.asm["ptx"].count("cp.async.bulk.tensor")})
    return rows


def main(argv: list[str] | None = None) -> int:
    from bench.probe_rowwise import probe_cases

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="OP:SHAPE:DTYPE,...")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--report", action="store_true",
                    help="cross-compile every variant for sm_90 and print what it uses; no GPU")
    ap.add_argument("--limit", type=int, help="--report: the first LIMIT variants of each case")
    ap.add_argument("--families", default=",".join(FAMILIES),
                    help="kernels to probe: smem (rows held in shared memory, item 44), ws "
                         "(the warp-specialized softmax, item 46)")
    args = ap.parse_args(argv)
    families = tuple(f for f in args.families.split(",") if f)
    if unknown := set(families) - set(FAMILIES):
        ap.error(f"unknown families {sorted(unknown)}; known: {', '.join(FAMILIES)}")
    if args.report:
        for case in args.cases.split(","):
            for row in compile_report(case, limit=args.limit, families=families):
                print(json.dumps(row), flush=True)
        return 0
    if args.out is None:
        ap.error("--out is required to run on the GPU")
    probe_cases("probe_gluon_rows", args.cases.split(","), args.reps, args.out,
                lambda text, hw, reps: probe_case(text, hw, reps, families))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
