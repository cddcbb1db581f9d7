"""Hand-made packs for the pack and loader tests (no codegen, no port run needed)."""

from __future__ import annotations

from pathlib import Path

from porter.pack import write_pack
from porter.port import BucketChoice
from porter.port import PortResult
from porter.port import TargetResult

REFERENCE = '''
import torch

def reference(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
'''

# A generated-module stand-in: one Triton kernel and launch(*inputs, out=None, config=None).
MODULE = '''
import torch
import triton
import triton.language as tl

CONFIG = {config!r}


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, stride_x, stride_y, n_cols, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def launch(x, w, out=None, config=None):
    config = config or CONFIG
    n = x.shape[-1]
    x2 = x.reshape(-1, n).contiguous()
    y = out if out is not None else torch.empty_like(x)
    y2 = y.view(-1, n)
    _rmsnorm_kernel[(x2.shape[0],)](x2, w, y2, x2.stride(0), y2.stride(0), n, 1e-6,
                                    BLOCK_N=triton.next_power_of_2(n),
                                    num_warps=config["num_warps"])
    return y
'''

METAL = "kernel void rmsnorm(device float* x [[buffer(0)]]) {}\n"


def _choice(bucket: str, dtype: str, tier: str, warps: int, t: float, label: str = "projected",
            metal: bool = False) -> BucketChoice:
    cfg = {"num_warps": warps}
    return BucketChoice(bucket=bucket, dtype=dtype, shape=(4096, 4096), config=cfg,
                        source=METAL if metal else MODULE.format(config=cfg), tier=tier,
                        numbers={"time_ms": t, "p20_ms": t * 0.98, "p80_ms": t * 1.03,
                                 "label": label, "pct_of_peak": 71.0})


def make_pack(tmp: Path, *, h100_tier: str = "interpreted", cpu_ok: bool = True) -> Path:
    """A pack with h100 (fp32/bf16 buckets), mi300x and m4 entries; returns the pack folder."""
    spec = tmp / "spec.py"
    spec.write_text(REFERENCE)
    other = "interpreted" if cpu_ok else "compiled"
    targets = (
        TargetResult("h100", "nvidia", "triton-cuda", "90", "ab" * 32, "fp32: atol=1e-05", (
            _choice("4096x4096", "fp32", h100_tier, 8, 0.02),
            _choice("64x256", "fp32", h100_tier, 4, 0.004),
            _choice("4096x4096", "bf16", h100_tier, 16, 0.011),
        )),
        TargetResult("mi300x", "amd", "triton-hip", "gfx942", "cd" * 32, "fp32: atol=1e-05", (
            _choice("4096x4096", "fp32", other, 4, 0.018),
        )),
        TargetResult("m4", "apple", "metal", "apple-m4", "ef" * 32, "", (
            _choice("4096x4096", "fp32", "emitted", 4, 0.3, metal=True),
        ), notes=("Metal: source emitted only",)),
    )
    result = PortResult(op="rmsnorm_t", spec_path=spec, run_dir=tmp / "run", targets=targets,
                        versions={"torch": "x", "triton": "y"},
                        fusion={"text": "pow+mean+rsqrt+mul+mul fused", "bytes_saved": 1024},
                        signature=("tensor", "tensor"), reference_function="reference")
    return write_pack(result, tmp / "packs")
