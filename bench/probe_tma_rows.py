"""Probe: wide rows moved by TMA (bulk tensor copies) instead of per-thread loads and stores.

A measuring tool for bench/NOTES.md item 42, not a source of kernels: hand-written persistent
row kernels for softmax, rmsnorm and layernorm at rows whose width is a multiple of W, each row
viewed as an [S, W] tile of a 2-D tensor descriptor (x as [n_rows * S, W], S = n_cols / W: a
TMA box is at most 256 elements per side, so a 32768-wide row is [128, 256]). Triton's
pipeliner stages the descriptor loads of a `tl.range(..., num_stages)` loop through shared
memory with TMA and mbarriers instead of cp.async; the store is a TMA store from shared memory
(`TMA_STORE`) or the per-thread stores of the generated kernels. Layernorm's variance is the
emitter's VAR1 form (shifted sums, one reduction) without its guard round (the probe's inputs
are standard normal); weight and bias are per-thread loads inside the row loop.

Each variant is checked against the float64 reference first, then timed interleaved with the
porter's own pick for the case (the generated module's persistent or looped kernel), eager
PyTorch and a copy of the same bytes (`harness.timing.compare`: LLC flushed every repetition,
median of --reps).

    python bench/probe_tma_rows.py --out /tmp/probe [--reps 50] [--cases softmax:4096x32768:bf16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from bench.probe_rowwise import probe_beside_picks  # noqa: E402
from bench.probe_rowwise import probe_cases  # noqa: E402


@triton.jit
def _softmax_tma(x_desc, y_desc, y_ptr, n_rows, S: tl.constexpr, W: tl.constexpr,
                 STAGES: tl.constexpr, TMA_STORE: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        x = x_desc.load([row * S, 0]).to(tl.float32)
        m = tl.max(tl.max(x, axis=1), axis=0)
        e = tl.exp2(x * 1.4426950408889634 - m * 1.4426950408889634)
        y = e * (1.0 / tl.sum(tl.sum(e, axis=1), axis=0))
        if TMA_STORE:
            y_desc.store([row * S, 0], y.to(y_desc.dtype))
        else:
            offs = (row * S + tl.arange(0, S)[:, None]).to(tl.int64) * W + tl.arange(0, W)[None, :]
            tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty))


@triton.jit
def _norm_tma(x_desc, y_desc, y_ptr, w_ptr, b_ptr, n_rows, eps, S: tl.constexpr,
              W: tl.constexpr, STAGES: tl.constexpr, TMA_STORE: tl.constexpr,
              LAYERNORM: tl.constexpr):
    tile = tl.arange(0, S)[:, None] * W + tl.arange(0, W)[None, :]
    n = S * W
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        x = x_desc.load([row * S, 0]).to(tl.float32)
        if LAYERNORM:
            # VAR1's shifted sums (k = the row's first element), one two-value reduction
            k = tl.sum(tl.sum(tl.where(tile == 0, x, 0.0), axis=1), axis=0)
            d = x - k
            s1 = tl.sum(tl.sum(d, axis=1), axis=0)
            s2 = tl.sum(tl.sum(d * d, axis=1), axis=0)
            mean = k + s1 / n
            var = tl.maximum(s2 - s1 * s1 / n, 0.0) / n
            y = (x - mean) * tl.rsqrt(var + eps)
            y = y * tl.load(w_ptr + tile).to(tl.float32) + tl.load(b_ptr + tile).to(tl.float32)
        else:
            y = x * tl.rsqrt(tl.sum(tl.sum(x * x, axis=1), axis=0) / n + eps)
            y = y * tl.load(w_ptr + tile).to(tl.float32)
        if TMA_STORE:
            y_desc.store([row * S, 0], y.to(y_desc.dtype))
        else:
            offs = (row * S + tl.arange(0, S)[:, None]).to(tl.int64) * W + tl.arange(0, W)[None, :]
            tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty))


def launch(op: str, inputs: tuple[Any, ...], cfg: dict[str, Any]) -> torch.Tensor:
    from triton.tools.tensor_descriptor import TensorDescriptor

    x = inputs[0]
    n_rows, n_cols = x.shape
    w_tile = cfg["W"]
    s = n_cols // w_tile
    if n_cols % w_tile or not x.is_contiguous():
        raise ValueError(f"{op}: rows of {n_cols} are not whole [S, {w_tile}] tiles")
    y = torch.empty_like(x)
    x_desc = TensorDescriptor.from_tensor(x.view(n_rows * s, w_tile), [s, w_tile])
    y_desc = TensorDescriptor.from_tensor(y.view(n_rows * s, w_tile), [s, w_tile])
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    grid = (min(n_rows, sms * cfg.get("per_sm", 1)),)
    common = {"S": s, "W": w_tile, "STAGES": cfg["num_stages"], "TMA_STORE": cfg["tma_store"],
              "num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    if op == "softmax":
        _softmax_tma[grid](x_desc, y_desc, y, n_rows, **common)
    else:
        bias = inputs[2] if op == "layernorm" else inputs[1]
        eps = 1e-5 if op == "layernorm" else 1e-6
        _norm_tma[grid](x_desc, y_desc, y, inputs[1], bias, n_rows, eps,
                        LAYERNORM=op == "layernorm", **common)
    return y


# Per case: the porter's picks on the H200 (run12 and item 42's probe) and the TMA variants.
PICKS: dict[str, list[dict[str, Any]]] = {
    "softmax": [{"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32,
                 "num_stages": s, "PROGRAMS_PER_SM": 1} for s in (3, 4)],
    "rmsnorm": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 16384, "num_warps": 32}],
    "layernorm": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": 32, "VAR1": True}
                  for b in (8192, 16384)],
}
TMA = [{"W": w, "num_warps": nw, "num_stages": st, "tma_store": ts}
       for w, nw, st, ts in ((256, 32, 2, True), (256, 32, 3, True), (128, 32, 3, True),
                             (256, 16, 3, True), (256, 32, 3, False), (256, 32, 2, False))]
CASES = ("softmax:4096x32768:bf16", "layernorm:4096x32768:bf16", "rmsnorm:4096x32768:bf16")


def probe_case(text: str, hw: Any, reps: int) -> list[dict[str, Any]]:
    op = text.split(":")[0]
    hand = []
    for cfg in TMA:
        key = (f"tma w{cfg['num_warps']} W{cfg['W']} st{cfg['num_stages']}"
               + (" tma-store" if cfg["tma_store"] else " st.global"))
        hand.append((key, cfg, lambda *a, _c=cfg: launch(op, a, _c)))
    return probe_beside_picks(text, hw, reps, PICKS[op], hand)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="OP:SHAPE:DTYPE,...")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    probe_cases("probe_tma_rows", args.cases.split(","), args.reps, args.out, probe_case)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
