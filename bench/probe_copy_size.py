"""Probe: how close a plain copy gets to the measured copy bandwidth at each size.

Issue 5 asks every memory-bound row of at least 64 MB for 90% of the device's measured copy
bandwidth (`hwmodels/devices/<model>.yaml`, measured with 0.25-4 GiB copies). On the H200 a copy
of 64-80 MB itself times at 74-89% of it in the suite (`results/h200-2026-11-23-run6/`). This
probe asks whether that is the copy's kernel or the size: it times `Tensor.copy_` and Triton copy
kernels (grid of one block per BLOCK elements; and a persistent grid-stride loop) at sizes from
16 MB to 1 GiB moved (read plus write), interleaved per size (`harness.timing.compare`: CUDA
events with a device-side head start, LLC flushed every repetition, median of --reps), and fits
time = fixed + bytes / bandwidth by least squares over the sizes of at least 64 MB per provider.
A fixed cost of f us caps a transfer of b bytes at b / (b / BW + f): the % of the ceiling that no
kernel with that fixed cost can pass at that size.

    python bench/probe_copy_size.py --out /tmp/copy [--reps 50] [--sizes-mb 16,32,64,128,...]
        [--read]

--read adds kernels that only read as many bytes (one float written per program; torch.sum, a
flat Triton read, and cross-entropy's row loop without its exp), for ops whose output is tiny.

Writes <out>/copy_size.jsonl (one line per provider and size, then one per fit) and prints a
table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

SIZES_MB = (16, 32, 48, 64, 80, 96, 128, 192, 256, 512, 1024)
MB = 1 << 20


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


@triton.jit
def _copy_persistent_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


@triton.jit
def _read_kernel(src_ptr, part_ptr, n, BLOCK: tl.constexpr):
    # one partial sum per program: a read stream that writes almost nothing
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(part_ptr + tl.program_id(0), tl.sum(x, axis=0))


@triton.jit
def _read_rows_kernel(src_ptr, part_ptr, n_cols, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    # cross-entropy's loop without its exp: one row per program, read in BLOCK chunks
    row = src_ptr + tl.program_id(0).to(tl.int64) * n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n_cols, BLOCK, num_stages=STAGES):
        acc += tl.load(row + start + tl.arange(0, BLOCK)).to(tl.float32)
    tl.store(part_ptr + tl.program_id(0), tl.sum(acc, axis=0))


def read_providers(n_bytes: int, device: torch.device) -> dict[str, Any]:
    """name -> callable reading n_bytes (and writing one float per program): the ceiling of an
    op whose output is tiny, such as cross-entropy's loss."""
    n = n_bytes // 2  # bf16 elements
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    parts = torch.empty(triton.cdiv(n, 1024), device=device, dtype=torch.float32)
    out: dict[str, Any] = {"read torch.sum": lambda: torch.sum(src, dtype=torch.float32)}
    for block, warps in ((4096, 4), (8192, 8), (16384, 16)):
        out[f"read b{block} w{warps}"] = (
            lambda b=block, w=warps: _read_kernel[(triton.cdiv(n, b),)](src, parts, n, BLOCK=b,
                                                                         num_warps=w))
    cols = 32768
    if n % cols == 0:
        for block, warps, stages in ((8192, 4, 2), (8192, 8, 2), (4096, 4, 3)):
            out[f"read rows b{block} w{warps} st{stages}"] = (
                lambda b=block, w=warps, st=stages: _read_rows_kernel[(n // cols,)](
                    src, parts, cols, BLOCK=b, STAGES=st, num_warps=w))
    return out


def providers(n_bytes: int, device: torch.device) -> dict[str, Any]:
    """name -> callable copying n_bytes / 2 bytes (so n_bytes move: read plus write)."""
    n = n_bytes // 2 // 2  # bf16 elements
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    out: dict[str, Any] = {"copy_": lambda: dst.copy_(src)}
    for block, warps in ((2048, 4), (8192, 8)):
        out[f"triton b{block} w{warps}"] = (
            lambda b=block, w=warps: _copy_kernel[(triton.cdiv(n, b),)](src, dst, n, BLOCK=b,
                                                                         num_warps=w))
    for per_sm in (4, 8):
        out[f"persistent {per_sm}/SM b2048 w4"] = (
            lambda p=per_sm: _copy_persistent_kernel[(min(sms * p, triton.cdiv(n, 2048)),)](
                src, dst, n, BLOCK=2048, num_warps=4))
    return out


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares time_us = fixed_us + bytes / (GB/s * 1e3): (fixed_us, GB/s)."""
    xs = [b for b, _ in points]
    ys = [t for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, 1e-3 / slope


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--sizes-mb", default=",".join(map(str, SIZES_MB)),
                    help="bytes moved per call (read plus write), in MiB")
    ap.add_argument("--read", action="store_true",
                    help="also time kernels that only read the same number of bytes")
    args = ap.parse_args(argv)

    from bench.sweep import local_gpu
    from harness import env_info
    from harness.timing import compare

    dev, det = local_gpu("probe_copy_size")
    ceiling = det.model.measured_value("copy_bandwidth_gbps")
    if not ceiling:
        raise SystemExit(f"probe: {det.model.name} has no measured copy bandwidth to compare with")
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"meta": True, "device": det.device_name, "hw_model": det.model.name,
            "versions": env_info.versions(), "reps": args.reps, "ceiling_gbps": ceiling,
            "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(REPO)}
    print(json.dumps(meta), flush=True)
    times: dict[str, list[tuple[float, float]]] = {}
    with (args.out / "copy_size.jsonl").open("a") as sink:
        sink.write(json.dumps(meta) + "\n")
        print(f"{'MiB':>6}  {'provider':<28}{'us':>8}{'% ceil':>8}")
        for size_mb in (int(s) for s in args.sizes_mb.split(",")):
            n_bytes = size_mb * MB
            provs = providers(n_bytes, dev)
            if args.read:
                provs |= read_providers(n_bytes, dev)
            cmp = compare(provs, lambda: (), hw=det.model, reps=args.reps, warmup=3, graph=False)
            for name, t in cmp.timings.items():
                us = t.median_ms * 1e3
                pct = 100 * n_bytes / (us * 1e3) / ceiling
                times.setdefault(name, []).append((n_bytes, us))
                sink.write(json.dumps({"provider": name, "mib": size_mb, "median_us": us,
                                       "p20_us": t.p20_ms * 1e3, "p80_us": t.p80_ms * 1e3,
                                       "pct_ceiling": pct}) + "\n")
                print(f"{size_mb:>6}  {name:<28}{us:>8.1f}{pct:>8.1f}", flush=True)
            sink.flush()
            del provs
            torch.cuda.empty_cache()
        print(f"\nfit over sizes >= 64 MiB: time = fixed + bytes / bandwidth ({ceiling} GB/s "
              "measured ceiling)")
        for name, pts in times.items():
            big = [(b, t) for b, t in pts if b >= 64 * MB]
            if len(big) < 2:
                continue
            fixed, gbps = fit(big)
            cap64 = 100 * 64 * MB / (64 * MB / (gbps * 1e3) + fixed) / 1e3 / ceiling
            sink.write(json.dumps({"fit": name, "fixed_us": fixed, "gbps": gbps,
                                   "pct_ceiling_at_64mib": cap64}) + "\n")
            print(f"  {name:<28} fixed {fixed:5.2f} us, {gbps:6.0f} GB/s "
                  f"({100 * gbps / ceiling:.1f}% of the ceiling); at 64 MiB: {cap64:.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
