"""Probe: do 16-byte-aligned load windows pay for rows whose starts are misaligned?

Rows of 1537 bf16 values start at 2-byte alignment (3074-byte stride), so Triton loads them
with 2-byte loads. The window form loads each row from its start rounded down to 16 bytes,
with a mask that is constant over every 8-lane group (so the loads stay 16 bytes wide), and
drops the lead-in and tail lanes with `where` before reducing; stores stay exact-masked.
Hand-written kernels (softmax, rmsnorm) in both forms are timed beside Liger-Kernel: a
measuring tool for bench/NOTES.md, deciding whether the emitter should learn the window form.

    python bench/probe_window.py --out /tmp/window [--shape 4097x1537] [--reps 50]

The window form reads up to 15 elements past the tensor's last element (inside its final
32-byte sector); a production form would peel the last row.
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
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _row_window(x_ptr, start, n_cols, limit, BLOCK: tl.constexpr, ALIGN: tl.constexpr,
                WINDOW: tl.constexpr):
    """(x as fp32, cols, in_row) for the row starting at element `start`."""
    if WINDOW:
        base = tl.multiple_of(start - start % ALIGN, ALIGN)
        offs = base + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < limit, other=0.0)
        cols = tl.arange(0, BLOCK) - (start - base)
    else:
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + start + cols, mask=cols < n_cols, other=0.0)
    in_row = (cols >= 0) & (cols < n_cols)
    return x.to(tl.float32), cols, in_row


@triton.jit
def _softmax(x_ptr, y_ptr, stride, n_cols, limit, BLOCK: tl.constexpr, ALIGN: tl.constexpr,
             WINDOW: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * stride
    x, cols, in_row = _row_window(x_ptr, start, n_cols, limit, BLOCK, ALIGN, WINDOW)
    x = tl.where(in_row, x, float("-inf"))
    e = tl.where(in_row, tl.exp(x - tl.max(x, axis=0)), 0.0)
    y = e * tl.math.div_rn(1.0, tl.sum(e, axis=0))
    tl.store(y_ptr + start + cols, y.to(y_ptr.dtype.element_ty), mask=in_row)


@triton.jit
def _rmsnorm(x_ptr, w_ptr, y_ptr, stride, n_cols, limit, BLOCK: tl.constexpr,
             ALIGN: tl.constexpr, WINDOW: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * stride
    x, cols, in_row = _row_window(x_ptr, start, n_cols, limit, BLOCK, ALIGN, WINDOW)
    x = tl.where(in_row, x, 0.0)
    rstd = tl.rsqrt(tl.math.div_rn(tl.sum(x * x, axis=0), n_cols.to(tl.float32)) + 1e-6)
    w = tl.load(w_ptr + cols, mask=in_row, other=0.0).to(tl.float32)
    tl.store(y_ptr + start + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=in_row)


def launcher(op: str, window: bool, warps: int) -> Any:
    def run(*inputs: torch.Tensor) -> torch.Tensor:
        x = inputs[0]
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        align = 16 // x.element_size()
        limit = -(-x.numel() // 16) * 16  # a multiple of 16 elements (window reads stay in-sector)
        block = triton.next_power_of_2(n_cols + (align - 1 if window else 0))
        if op == "softmax":
            _softmax[(n_rows,)](x, y, x.stride(0), n_cols, limit, BLOCK=block, ALIGN=align,
                                WINDOW=window, num_warps=warps)
        else:
            _rmsnorm[(n_rows,)](x, inputs[1], y, x.stride(0), n_cols, limit, BLOCK=block,
                                ALIGN=align, WINDOW=window, num_warps=warps)
        return y
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4097x1537")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import hwmodels
    from bench.sweep import generated
    from bench.suite import liger_provider
    from harness.timing import compare

    hw = hwmodels.detect().model
    shape = tuple(int(s) for s in args.shape.split("x"))
    dev = torch.device("cuda")
    args.out.mkdir(parents=True, exist_ok=True)
    for op in ("softmax", "rmsnorm"):
        spec, _ = generated(op)
        providers: dict[str, Any] = {}
        for window in (False, True):
            for warps in (4, 8):
                fn = launcher(op, window, warps)
                inputs = spec.make_inputs(shape, torch.bfloat16, dev, torch.Generator(dev).manual_seed(5))
                want = spec.reference(*[t.double() for t in inputs])
                err = float((fn(*inputs).double() - want).abs().max())
                name = f"{'window' if window else 'plain'} w{warps}"
                print(f"{op} {name}: max abs error {err:.2e}", flush=True)
                if err < 2e-2:
                    providers[name] = fn
        lig = liger_provider(op)
        if lig is not None:
            providers["liger"] = lig

        def make_args(spec: Any = spec) -> tuple[Any, ...]:
            return tuple(spec.make_inputs(shape, torch.bfloat16, dev, torch.Generator(dev)))

        cmp = compare(providers, make_args, hw=hw, reps=args.reps, warmup=5, graph=False)
        base = "plain w4"
        rows = []
        for name, t in sorted(cmp.timings.items(), key=lambda kv: kv[1].median_ms):
            r = cmp.ratio(name, base).median if base in cmp.timings else None
            rows.append({"op": op, "shape": list(shape), "variant": name,
                         "median_us": t.median_ms * 1e3, "p20_us": t.p20_ms * 1e3,
                         "p80_us": t.p80_ms * 1e3, "t_over_plain_w4": r})
            print(f"{op:8s} {name:10s} {t.median_ms * 1e3:7.2f} us  "
                  f"[{t.p20_ms * 1e3:.2f}, {t.p80_ms * 1e3:.2f}]  t/plain-w4 {r:.3f}", flush=True)
        with (args.out / "window.jsonl").open("a") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
