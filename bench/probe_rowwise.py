"""Probe: which code-shape changes to the generated row-wise kernels pay, measured side by side.

A measuring tool for bench/NOTES.md, not a source of kernels: each variant is the porter's own
generated module with one source transform applied, and only what wins here goes back into the
emitter (porter/codegen/rowwise.py) so that `porter port` produces it itself.

Transforms (applied to the @triton.jit kernels of the generated module):
  hoist  loads that depend only on the row coordinates (weights, biases, targets, the
         cross-entropy gather) moved to the top of the kernel (`hoist_loads` below). Since
         1b9b9ce the porter offers this as the single pass's `HOIST` knob; a kernel that has it
         is left alone here (its body sits under `if HOIST:`): give a case `"HOIST": True`
  i32    32-bit row offsets instead of int64 (valid here: every tensor < 2**31 elements)
  cs     full-row stores with cache_modifier=".cs" (streaming: evict first)
  ef     full-row loads in single-pass kernels with eviction_policy="evict_first"
  all    every transform above (not tl_exp)
  tl_exp exp as tl.exp again, where the emitter writes tl.exp2(x * log2 e) since item 30
         (tl.exp is ex2.approx.f32 on NVIDIA, with a subnormal fix-up per element)
  var1   layernorm's single pass only: the mean and the variance from one block-wide reduction
         of two values (sum x, sum x^2) instead of a second reduction that waits for the mean
         (bench/NOTES.md item 35). It times one reduction round; it is not a kernel to keep:
         E[x^2] - E[x]^2 loses precision when the mean is large against the spread.
  welford       layernorm's single pass: the mean and the variance from one block-wide
         reduction of (count, mean, M2) triples (Chan's pairwise combine: stable); masked
         lanes count 0, so every in-thread combine divides by a count known only at run time
  welford_even  the same with every count 1 (right only where n_cols == BLOCK_N and no row is
         masked: the correctness check rejects it elsewhere), so that the in-thread counts
         are constants and LLVM folds their divisions
  (var1, welford, welford_even and shift edit the two-round layernorm, the emitter's default;
  --one-round-variance generates the emitter's own shifted form, rowwise.ONE_ROUND_VARIANCE)
  shift  layernorm's single pass: the mean and the variance from one reduction of the sums of
         d = x - k and d^2, k the row's first element (shifted data: the cancellation that
         var1 suffers scales with (mean - k)^2 / variance, about 1 for a k drawn from the row)
  ffma   softmax and cross-entropy: exp2(x * log2e - m * log2e), one FFMA, where the emitter
         writes exp2((x - m) * log2e), a subtract and a multiply; in the looped kernels the
         select of masked lanes per element also moves to one select per row and chunk
  lse1   softmax and cross-entropy: the max and the sum of exp(x - max) from one reduction of
         (max, sum) pairs (one exp per combine) instead of a sum that waits for the max; in the
         single pass and the persistent kernel per row, in the looped kernels per chunk

    python bench/probe_rowwise.py --out /tmp/probe [--reps 30] [--cases softmax:4097x1537:bf16]
        [--transforms base,tl_exp]

Per case every variant (x two num_warps) is checked once against the float64 reference, then
all right variants, eager PyTorch, Liger-Kernel (when installed) and a copy of the same bytes
are timed interleaved (`harness.timing.compare`: events with a device-side head start, LLC
flushed every repetition, median of --reps). One JSON line per variant goes to
<out>/probe.jsonl as each case finishes; a table per case is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench.sweep import DTYPES  # noqa: E402
from bench.sweep import SWEEP_TOL  # noqa: E402
from bench.sweep import _max_rel_err  # noqa: E402
from bench.sweep import generated  # noqa: E402
from bench.sweep import parse_case  # noqa: E402
from porter.codegen.rowwise import hoist_reduction_free  # noqa: E402

# The suite's chosen config per case (results/h100-2026-11-22-run2) and one other num_warps.
CASES: dict[str, list[dict[str, Any]]] = {
    "softmax:4097x1537:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 2048, "num_warps": w}
                               for w in (4, 8)],
    "rmsnorm:4097x1537:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 2048, "num_warps": w}
                               for w in (4, 8)],
    "layernorm:4097x1537:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 2048,
                                  "num_warps": w} for w in (4, 8)],
    "layernorm:8192x5120:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 8192,
                                  "num_warps": w} for w in (8, 16)],
    "layernorm:16384x5120:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 8192,
                                   "num_warps": w} for w in (8, 16)],
    "layernorm:4096x4096:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 4096,
                                  "num_warps": w} for w in (4, 8)],
    "rmsnorm:4096x4096:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 4096,
                                "num_warps": w} for w in (4, 8)],
    "cross_entropy:4096x32768:bf16": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 8192,
                                       "num_warps": 8, "num_stages": 2},
                                      {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768,
                                       "num_warps": 32}],
    # the H100 run8 picks (results/h100-2026-11-23-run8/full-suite/), for item 30's exp2
    "cross_entropy:4096x32768:bf16@run8": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": b,
                                            "num_warps": 8, "num_stages": 2}
                                           for b in (16384, 8192)],
    "softmax:4096x4096:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 4096,
                                "num_warps": 8}],
    "softmax:8192x5120:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 8192,
                                "num_warps": 8}],
    "softmax:4096x32768:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768,
                                 "num_warps": 32}],
    # the H200 run6 pick at the widest rows (results/h200-2026-11-23-run6/), for var1
    "layernorm:4096x32768:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768,
                                   "num_warps": w} for w in (16, 32)],
    "layernorm:16384x8192:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 8192,
                                   "num_warps": w} for w in (4, 8)],
    # the H200 run6 picks at 4096x32768 and a second config each, for welford and lse1
    "softmax:4096x32768:bf16@h200": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768,
                                      "num_warps": 32},
                                     {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768,
                                      "num_warps": 32, "num_stages": 3, "PROGRAMS_PER_SM": 1}],
    "cross_entropy:4096x32768:bf16@h200": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": b,
                                            "num_warps": 4, "num_stages": 2}
                                           for b in (8192, 4096)],
    "cross_entropy:4097x1537:bf16": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 1024,
                                      "num_warps": 4, "num_stages": 1},
                                     {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 2048,
                                      "num_warps": 2}],
}
TRANSFORMS = ("base", "hoist", "i32", "cs", "ef", "all", "tl_exp", "var1", "welford",
              "welford_even", "shift", "ffma", "lse1")
_EXP2 = re.compile(r"tl\.exp2\(\(([^()]*)\) \* 1\.4426950408889634\)")
# layernorm's single pass as the emitter writes it: the mean's reduction and the mean, then
# the variance's reduction
_MEAN = re.compile(r"\n(\s+)(red\d+) = tl\.sum\(\((x\d+)\)\.to\(tl\.float32\), axis=1\)"
                   r"\[:, None\]\n(\s+(v\d+) = tl\.math\.div_rn\(tl\.cast\(\2, .*\n)")
_VAR = re.compile(r"\n(\s+)(red\d+) = tl\.sum\(\(tl\.where\(mask, v\d+, 0\.0\)\)"
                  r"\.to\(tl\.float32\), axis=1\)\[:, None\]\n")
_ADD2 = """

@triton.jit
def _probe_add2(a0, a1, b0, b1):
    return a0 + b0, a1 + b1
"""


_WELFORD = """

@triton.jit
def _probe_welford(n_a, mean_a, m2_a, n_b, mean_b, m2_b):
    n = n_a + n_b
    w_b = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
    delta = mean_b - mean_a
    return n, mean_a + delta * w_b, m2_a + m2_b + delta * delta * n_a * w_b
"""
_LSE = """

@triton.jit
def _probe_lse(m_a, s_a, m_b, s_b):
    # (max, sum of exp(x - max)) pairs, one exp per combine; equal maxes (-inf too) scale by 1
    d = tl.where(m_a == m_b, 0.0, tl.abs(m_a - m_b))
    e = tl.exp2(-d * 1.4426950408889634)
    return tl.maximum(m_a, m_b), tl.where(m_a >= m_b, s_a + s_b * e, s_a * e + s_b)
"""
# the softmax max, then (after the exp lines) the sum of exp that waits for it
_SM_MAX = re.compile(r"\n(\s+)(red\d+) = tl\.max\((x\d+), axis=1\)\[:, None\]\n")
_SM_SUM = re.compile(r"\n(\s+)(red\d+) = tl\.sum\(\((v\d+)\)\.to\(tl\.float32\), axis=1\)"
                     r"\[:, None\]\n")
# the looped kernels' online chunk step (porter/codegen/rowwise.py, the `pairs` branch)
_ONLINE = re.compile(r"\n(\s+)m_new = tl\.maximum\(m_row, tl\.max\(g, axis=1\)\[:, None\]\)\n"
                     r"(?:.*\n){3}\s+m_row = m_new\n")


def _with_helper(source: str, out: str, helper: str) -> str:
    if out == source:
        return source
    first = out.index("@triton.jit")
    return out[:first] + helper.lstrip("\n") + "\n\n" + out[first:]


def one_round_variance(source: str, form: str = "var1") -> str:
    """var1: the single pass's sum and sum of squares in one two-value reduction; welford,
    welford_even: (count, mean, M2) triples in one reduction."""

    def edit(name: str, body: str) -> str:
        if not name.endswith("_single_pass_kernel"):
            return body
        for _ in range(body.count("tl.math.div_rn")):  # each branch of HOIST
            m, v = _MEAN.search(body), _VAR.search(body)
            if m is None or v is None or v.start() < m.start():
                break
            ind, red, x, mean_line, mean = m.groups()
            if form == "shift":
                # k: the row's first element (the x load's address at column 0)
                addr = re.search(rf"{x} = tl\.load\((\w+) \+ \(rows \* (\w+)\)", body)
                both = (f"\n{ind}k = tl.load({addr.group(1)} + rows * {addr.group(2)}, "
                        f"mask=row_mask, other=0.0).to(tl.float32)\n"
                        f"{ind}d = tl.where(mask, {x} - k, 0.0)\n"
                        f"{ind}s1, s2 = tl.reduce((d, d * d), 1, _probe_add2)\n"
                        f"{ind}{red} = (s1[:, None] + k * sz0)\n"
                        f"{ind}{mean} = k + s1[:, None] / sz0\n")
                # sum((x - mean)^2) = sum(d^2) - sum(d)^2 / n
                var = (f"\n{v.group(1)}{v.group(2)} = "
                       f"tl.maximum(s2[:, None] - s1[:, None] * s1[:, None] / sz0, 0.0)\n")
            elif form == "var1":
                both = (f"\n{ind}s1, s2 = tl.reduce(({x}, {x} * {x}), 1, _probe_add2)\n"
                        f"{ind}{red} = s1[:, None]\n{mean_line}")
                # sum((x - mean)^2) = sum(x^2) - sum(x) * mean
                var = (f"\n{v.group(1)}{v.group(2)} = "
                       f"tl.maximum(s2[:, None] - {red} * {mean}, 0.0)\n")
            else:
                count = (f"tl.full({x}.shape, 1.0, tl.float32)" if form == "welford_even"
                         else "tl.where(mask, 1.0, 0.0)")
                both = (f"\n{ind}wn, wmean, wm2 = tl.reduce(({count}, {x}, tl.zeros_like({x})), "
                        f"1, _probe_welford)\n{ind}{red} = (wmean * wn)[:, None]\n"
                        f"{ind}{mean} = wmean[:, None]\n")
                var = f"\n{v.group(1)}{v.group(2)} = wm2[:, None]\n"
            body = body[:m.start()] + both + body[m.end():v.start()] + var + body[v.end():]
        return body

    return _with_helper(source, _edit_kernels(source, edit),
                        _WELFORD if form.startswith("welford") else _ADD2)


_LOG2E = "1.4426950408889634"
_EXP_OF_SUB = re.compile(r"\n(\s+)(v\d+) = \((\w+) - (\w+)\)\n(\s+)(v\d+) = tl\.exp2\(\(\2\) \* "
                         + _LOG2E + r"\)\n")


def exp_as_ffma(source: str) -> str:
    """ffma: exp2(x * log2e - m * log2e) (one FFMA) for the emitter's exp2((x - m) * log2e)."""

    def edit(name: str, body: str) -> str:
        body = _EXP_OF_SUB.sub(
            lambda m: (f"\n{m.group(1)}{m.group(2)} = ({m.group(3)} - {m.group(4)})\n{m.group(5)}"
                       f"{m.group(6)} = tl.exp2({m.group(3)} * {_LOG2E} - {m.group(4)} * "
                       f"{_LOG2E})\n"), body)
        # the looped online step: no per-element select; a row with nothing but -inf so far
        # sums NaN, and the row's select zeroes it
        body = body.replace(
            f"p = tl.where(mask & safe, tl.exp2((g - m_new) * {_LOG2E}), 0.0)",
            f"p = tl.exp2(g * {_LOG2E} - m_new * {_LOG2E})")
        return body.replace(
            f"s_row = tl.where(safe, s_row * tl.exp2((m_row - m_new) * {_LOG2E}), 0.0) "
            "+ tl.sum(p, axis=1)[:, None]",
            f"s_row = tl.where(safe, s_row * tl.exp2((m_row - m_new) * {_LOG2E}) "
            "+ tl.sum(p, axis=1)[:, None], 0.0)")

    return _edit_kernels(source, edit)


def one_round_lse(source: str) -> str:
    """lse1: softmax's max and sum of exp as one reduction of (max, sum) pairs."""

    def edit(name: str, body: str) -> str:
        if name.endswith(("_single_pass_kernel", "_persistent_kernel")):
            m = _SM_MAX.search(body)
            s = _SM_SUM.search(body, m.end()) if m else None
            if m is None or s is None:
                return body
            ind, red, x = m.groups()
            pair = (f"\n{ind}lm, ls = tl.reduce(({x}, tl.where({x} > float('-inf'), 1.0, 0.0)), "
                    f"1, _probe_lse)\n{ind}{red} = lm[:, None]\n")
            return (body[:m.start()] + pair + body[m.end():s.start()]
                    + f"\n{s.group(1)}{s.group(2)} = ls[:, None]\n" + body[s.end():])
        if name.endswith("_looped_kernel"):
            o = _ONLINE.search(body)
            if o is None:
                return body
            ind = o.group(1)
            step = (f"\n{ind}cm, cs = tl.reduce((g, tl.where(g > float('-inf'), 1.0, 0.0)), 1, "
                    f"_probe_lse)\n{ind}m_row, s_row = _probe_lse(m_row, s_row, cm[:, None], "
                    f"cs[:, None])\n")
            return body[:o.start()] + step + body[o.end():]
        return body

    return _with_helper(source, _edit_kernels(source, edit), _LSE)


def hoist_loads(lines: list[str]) -> list[str]:
    """The porter's HOIST form (porter/codegen/rowwise.py), applied here to every kernel."""
    return hoist_reduction_free(lines)


def _kernel_spans(source: str) -> list[tuple[int, int]]:
    """(start, end) character spans of each @triton.jit function's body."""
    spans = []
    for m in re.finditer(r"@triton\.jit\ndef \w+\((?:.|\n)*?\):\n", source):
        end = source.find("\n\n\n", m.end())
        spans.append((m.end(), end if end >= 0 else len(source)))
    return spans


def _edit_kernels(source: str, edit: Callable[[str, str], str]) -> str:
    """Apply edit(kernel_name, body) to each kernel body."""
    out, last = [], 0
    for start, end in _kernel_spans(source):
        name = re.findall(r"def (\w+)\(", source[:start])[-1]
        out += [source[last:start], edit(name, source[start:end])]
        last = end
    out.append(source[last:])
    return "".join(out)


def transform(source: str, which: str) -> str:
    todo = {"hoist", "i32", "cs", "ef"} if which == "all" else {which} - {"base"}
    if "tl_exp" in todo:
        return _EXP2.sub(r"tl.exp(\1)", source)
    if "ffma" in todo:
        return exp_as_ffma(source)
    for form in ("var1", "welford", "welford_even", "shift"):
        if form in todo:
            return one_round_variance(source, form)
    if "lse1" in todo:
        return one_round_lse(source)

    def edit(name: str, body: str) -> str:
        if name.endswith("_post_kernel"):
            return body
        if "hoist" in todo:
            lines = body.split("\n")
            # keep the prelude (pid, rows, row_mask, cols, mask, row coordinates) first
            cut = max(i for i, ln in enumerate(lines) if re.match(
                r"^    (pid|rows|row_mask|cols|mask|r\d+) = ", ln)) + 1
            body = "\n".join(lines[:cut] + hoist_loads(lines[cut:]))
        if "i32" in todo:
            body = body.replace("tl.arange(0, ROWS)[:, None]).to(tl.int64)",
                                "tl.arange(0, ROWS)[:, None])")
        if "cs" in todo:
            body = re.sub(r"(tl\.store\(.*mask=mask)\)", r'\1, cache_modifier=".cs")', body)
        if "ef" in todo and name.endswith("_single_pass_kernel"):
            fill = r"other=(?:0\.0|float\('-?inf'\))"  # the emitter's masked-lane fills
            body = re.sub(r"(tl\.load\([^\n]*cols[^\n]*mask=mask, " + fill + r")\)",
                          r'\1, eviction_policy="evict_first")', body)
        return body

    return _edit_kernels(source, edit)


def probe_case(text: str, configs: list[dict[str, Any]], hw: Any, reps: int,
               transforms: tuple[str, ...] = TRANSFORMS) -> list[dict[str, Any]]:
    from bench.suite import liger_provider
    from harness.timing import compare
    from porter.codegen import load_generated_module

    op_name, shape, dname = parse_case(text.split("@")[0])
    dtype = DTYPES[dname]
    spec, gen_op = generated(op_name)
    base_src = gen_op.triton_module_source()
    dev = torch.device("cuda")
    rows: list[dict[str, Any]] = []
    providers: dict[str, Callable[..., Any]] = {}
    t0 = time.time()
    for which in transforms:
        src = transform(base_src, which)
        if which != "base" and src == base_src:
            continue  # the transform changes nothing in this op
        module = load_generated_module(src, f"probe_{op_name}_{which}", interpret=False)
        for cfg in configs:
            cfg = {"num_stages": 1, "dtype": dname, **cfg}
            key = f"{which} w{cfg['num_warps']} {cfg['strategy'][:6]} b{cfg['BLOCK_N']}"
            row = {"case": text, "variant": which, "config": cfg, "key": key}
            rows.append(row)
            try:
                inputs = spec.make_inputs(shape, dtype, dev, torch.Generator(dev).manual_seed(7))
                want = spec.reference(*[x.double() if isinstance(x, torch.Tensor) and
                                        x.is_floating_point() else x for x in inputs])
                err = _max_rel_err(module.launch(*inputs, config=cfg), want)
            except Exception as exc:  # noqa: BLE001 - a variant that fails is a result
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                continue
            row["max_rel_err"] = err
            if err > SWEEP_TOL[dname]:
                row["error"] = f"wrong: max error {err:.2e}"
                continue
            providers[key] = (lambda *a, _m=module, _c=cfg: _m.launch(*a, config=_c))
    print(f"[{text}] {len(providers)} variants compiled and checked in {time.time() - t0:.0f} s",
          flush=True)
    providers["eager"] = spec.reference
    lig = liger_provider(op_name)
    if lig is not None:
        providers["liger"] = lig
    # A copy moving as many bytes as the op must (inputs read once, outputs written once).
    meta = spec.make_inputs(shape, dtype, torch.device("meta"), torch.Generator().manual_seed(0))
    outs = spec.reference(*meta)
    outs = outs if isinstance(outs, (tuple, list)) else [outs]
    nbytes = sum(x.numel() * x.element_size() for x in [*meta, *outs] if isinstance(x, torch.Tensor))
    copy_src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device=dev)
    copy_dst = torch.empty_like(copy_src)
    providers["copy"] = lambda *a: copy_dst.copy_(copy_src)

    def make_args() -> tuple[Any, ...]:
        return tuple(spec.make_inputs(shape, dtype, dev, torch.Generator(dev)))

    cmp = compare(providers, make_args, hw=hw, reps=reps, warmup=3, graph=False)
    for name, t in cmp.timings.items():
        row = next((r for r in rows if r["key"] == name), None)
        if row is None:
            row = {"case": text, "variant": name, "key": name}
            rows.append(row)
        row.update(median_us=t.median_ms * 1e3, p20_us=t.p20_ms * 1e3, p80_us=t.p80_ms * 1e3,
                   vs_base=None)
    base_keys = [r["key"] for r in rows if r["variant"] == "base" and "median_us" in r]
    for r in rows:
        if "median_us" in r and base_keys:
            same_cfg = [k for k in base_keys if k.split(" ", 1)[1] == r["key"].split(" ", 1)[-1]]
            ref = same_cfg[0] if same_cfg else base_keys[0]
            r["vs_base"] = cmp.ratio(r["key"], ref).median
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    from tabulate import tabulate

    timed = sorted((r for r in rows if "median_us" in r), key=lambda r: r["median_us"])
    print(tabulate([[f"{r['median_us']:.1f}", f"{r['p20_us']:.1f}-{r['p80_us']:.1f}",
                     "-" if r.get("vs_base") is None else f"{r['vs_base']:.3f}", r["key"]]
                    for r in timed], headers=["us", "p20-p80", "t/base", "variant"]))
    for r in rows:
        if r.get("error"):
            print(f"  {r['key']}: {r['error']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="OP:SHAPE:DTYPE,... (from CASES)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--transforms", default=",".join(TRANSFORMS), help="of " + ",".join(TRANSFORMS))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--one-round-variance", action="store_true",
                    help="generate layernorm's mean and variance from one reduction (shifted)")
    args = ap.parse_args(argv)
    if args.one_round_variance:
        from porter.codegen import rowwise

        rowwise.ONE_ROUND_VARIANCE = True

    import hwmodels
    from harness import env_info
    from harness.timing import require_gpu

    require_gpu()
    det = hwmodels.detect()
    if det.model is None:
        raise SystemExit("probe: the local GPU matches no hardware model in hwmodels/devices/")
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"meta": True, "device": det.device_name, "hw_model": det.model.name,
            "versions": env_info.versions(), "reps": args.reps,
            "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(REPO)}
    print(json.dumps(meta), flush=True)
    with (args.out / "probe.jsonl").open("a") as sink:
        sink.write(json.dumps(meta) + "\n")
        for text in args.cases.split(","):
            if text not in CASES:
                raise SystemExit(f"probe: unknown case {text!r}; known: {', '.join(CASES)}")
            rows = probe_case(text, CASES[text], det.model, args.reps,
                              tuple(t for t in args.transforms.split(",") if t))
            for r in rows:
                sink.write(json.dumps(r, default=str) + "\n")
            sink.flush()
            print(f"== {text}")
            print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
