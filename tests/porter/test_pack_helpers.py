"""Hand-made packs for the pack and loader tests (no codegen, no port run needed)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from porter.packs.writer import write_pack
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


def _targets(h100_tier: str, cpu_ok: bool) -> dict[str, TargetResult]:
    other = "interpreted" if cpu_ok else "compiled"
    return {
        "h100": TargetResult("h100", "nvidia", "triton-cuda", "90", "ab" * 32, "fp32: atol=1e-05", (
            _choice("4096x4096", "fp32", h100_tier, 8, 0.02),
            _choice("64x256", "fp32", h100_tier, 4, 0.004),
            _choice("4096x4096", "bf16", h100_tier, 16, 0.011),
        )),
        "mi300x": TargetResult("mi300x", "amd", "triton-hip", "gfx942", "cd" * 32,
                               "fp32: atol=1e-05", (
            _choice("4096x4096", "fp32", other, 4, 0.018),
        )),
        "m4": TargetResult("m4", "apple", "metal", "apple-m4", "ef" * 32, "", (
            _choice("4096x4096", "fp32", "emitted", 4, 0.3, metal=True),
        ), notes=("Metal: source emitted only",)),
    }


def port_result(tmp: Path, targets: tuple[str, ...] = ("h100", "mi300x", "m4"), *,
                h100_tier: str = "interpreted", cpu_ok: bool = True,
                no_kernel: tuple[str, ...] = (), reference: str = REFERENCE,
                signature: tuple[str, ...] = ("tensor", "tensor"),
                run: str = "run") -> PortResult:
    """A PortResult as `port()` would return it, without a port: the named targets' entries
    (h100: fp32/bf16 buckets; mi300x; m4), those in `no_kernel` with no passing bucket."""
    spec = tmp / "spec.py"
    spec.write_text(reference)
    made = _targets(h100_tier, cpu_ok)
    chosen = tuple(replace(made[t], choices=()) if t in no_kernel else made[t] for t in targets)
    return PortResult(op="rmsnorm_t", spec_path=spec, run_dir=tmp / run, targets=chosen,
                      versions={"torch": "x", "triton": "y"},
                      fusion={"text": "pow+mean+rsqrt+mul+mul fused", "bytes_saved": 1024},
                      signature=signature, reference_function="reference")


def make_pack(tmp: Path, *, h100_tier: str = "interpreted", cpu_ok: bool = True) -> Path:
    """A pack with h100 (fp32/bf16 buckets), mi300x and m4 entries; returns the pack folder."""
    return write_pack(port_result(tmp, h100_tier=h100_tier, cpu_ok=cpu_ok), tmp / "packs").path


EVIL = MODULE + """
# Runs when imported: proof that a file outside the pack was executed.
import pathlib
pathlib.Path({marker!r}).write_text("ran")
"""


def point_outside(pack: Path, how: str, field: str = "bucket") -> Path:
    """Make the pack's manifest name a file outside the pack, listed with its true sha256 (what
    an attacker who can edit the manifest does); returns the marker file the outside module
    writes if it is ever imported.

    how: "dotdot" (a ../ path), "absolute", or "symlink" (a path inside the pack that is a
    symlink to the outside file). field: "bucket" (the first h100 bucket's file) or "reference".
    """
    outside = pack.parent.parent / "outside"
    outside.mkdir(exist_ok=True)
    marker = outside / "marker.txt"
    evil = outside / "evil.py"
    body = EVIL.format(config={"num_warps": 4}, marker=str(marker))
    if field == "reference":
        body += "\ndef reference(x, w):\n    return x\n"
    evil.write_text(body)
    if how == "dotdot":
        rel = "nvidia/h100/../../../../outside/evil.py"  # from packs/<op>/ to outside/
    elif how == "absolute":
        rel = str(evil)
    else:
        rel = "nvidia/h100/evil_link.py"
        (pack / rel).symlink_to(evil)
    manifest = yaml.safe_load((pack / "manifest.yaml").read_text())
    manifest["files"][rel] = hashlib.sha256(evil.read_bytes()).hexdigest()
    if field == "reference":
        manifest["reference"]["file"] = rel
    else:
        h100 = next(e for e in manifest["entries"] if e["target"] == "h100")
        for b in h100["buckets"]:
            b["file"] = rel
    (pack / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    return marker


@contextlib.contextmanager
def launches(op: Any) -> Iterator[list[str]]:
    """The pack files whose launcher ran while the block runs: proof that a kernel ran, where
    the reference's result would be just as correct (issue 48: a loader changed to return the
    reference's result passed all but 2 of 93 tests). CPU calls only (a GPU call's bound launch
    skips the launcher by design)."""
    ran: list[str] = []
    original = op._module

    def counted(rel: str, interpret: bool) -> Any:
        module = original(rel, interpret)
        if not getattr(module, "_porter_counted", False):
            launch = module.launch

            def counting(*a: Any, _rel: str = rel, **k: Any) -> Any:
                ran.append(_rel)
                return launch(*a, **k)

            module.launch = counting
            module._porter_counted = True
        return module

    op._module = counted
    try:
        yield ran
    finally:
        op._module = original
