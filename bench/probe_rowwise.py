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
  (var1, welford, welford_even and shift, layernorm's one-round variances of items 35-36,
  were retired when the emitter took the shifted form as its VAR1 knob: see git 1a81616; a
  case's config with "VAR1": True runs the emitter's own form)
  ffma   softmax and cross-entropy: exp2(x * log2e - m * log2e), one FFMA, where the emitter
         writes exp2((x - m) * log2e), a subtract and a multiply (the looped kernels' online
         step has the FFMA form since item 39; their part of ffma and lse1 is at git 7ff877c)
  masked the kernels without their EVEN (`| EVEN` dropped): every lane masked as before
         item 37, where full row and column blocks (EVEN) leave constant masks the compiler drops
  tworound the single pass and the persistent kernel of softmax and cross-entropy reduce the
         row's max across the block, then its sum of exp (two rounds), as the emitter did
         before item 47, in place of each thread's (max, sum) pair combined once
  (lse1, the max and the sum of exp(x - max) as one reduction of (max, sum) pairs with an
  exp per element (item 36), and lane1, the same pairs per thread first (item 47, the
  emitter's form since), rewrote the one-block softmax of before item 47: both are at git
  5076ea0)
  nopdl  the fold kernel launched after the main kernel, not early (programmatic dependent
         launch off, as PORTER_PDL=0 does)
  wbloop the persistent kernel's weight and bias loads inside its row loop (item 39)
  piped  the looped kernels' chunk loops as tl.range(..., num_stages) (item 39)
  lhoist the looped kernel's target and gather loads before its loops (item 39)
  l1w    the looped kernels' weight and bias loads evict_last (kept in L1 across rows);
  l1wcg  also the row loads past L1 (.cg) (item 40)
  foldb<N> the fold polls and sums blocks of N rows (256-8192) instead of fold_config's
         (as wide as the rows, up to 8192): a narrower last poll once the grid ends (item 41)
  spinlast the fold first spins on one word, the last row's (usually the last written), one
         scalar load per poll and no block reduction, before it polls whole blocks (item 41)
  gridwait the fold first waits for the main grid to finish (griddepcontrol.wait, as before
         item 41) on every early launch, then finds its words stamped
  pack16 the single pass and the persistent kernel keep each row-wide 16-bit load packed (two
         values to a register), widen it at each use by inline asm the compiler may not hoist,
         and recompute what derives from it (the softmax's exps) instead of holding it in fp32:
         half the registers for the row (item 45; NVIDIA only, the interpreter runs its fp32
         branch alone; its softmax form is for the two-round softmax, at git 5076ea0)
  diag_* diagnostics, wrong by design and timed unchecked: diag_noexp (the softmax exp as
         x - m), diag_nob / diag_now (layernorm without its bias / weight load), diag_nofold
         (no fold kernel)
  (fold2x, ticket, flagfold and diag_nowait, items 38-40, edited the fold as it was before it
  waited on stamped words (item 41): they are at git a08c61f; nozero, the fold without
  clearing its words, is the emitter's since item 41: at git 488d44c)
  (lnvar1c and lnlane, layernorm's looped kernel in two passes, items 39-40: the first lost,
  the second is the emitter's looped VAR1 since; both transforms are at git 34783ba)

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
from bench.sweep import local_gpu  # noqa: E402
from bench.sweep import parse_case  # noqa: E402
from porter.codegen import heuristics  # noqa: E402
from porter.codegen.emit import LOG2E  # noqa: E402
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
    # the H200 run6 pick at the widest rows (results/h200-2026-11-23-run6/), for var1 (retired)
    "layernorm:4096x32768:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768,
                                   "num_warps": w} for w in (16, 32)],
    "layernorm:16384x8192:bf16": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 8192,
                                   "num_warps": w} for w in (4, 8)],
    # the H200 run6 picks at 4096x32768 and a second config each, for lse1 and ffma
    "softmax:4096x32768:bf16@h200": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768,
                                      "num_warps": 32},
                                     {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768,
                                      "num_warps": 32, "num_stages": 3, "PROGRAMS_PER_SM": 1}],
    "cross_entropy:4096x32768:bf16@h200": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": b,
                                            "num_warps": 4, "num_stages": 2}
                                           for b in (8192, 4096)],
    # the H200 run6 picks at full-width rows, for masked (item 37)
    "layernorm:8192x5120:bf16@h200": [{"strategy": "two_block", "ROWS": 1, "BLOCK_N": 4096,
                                       "BLOCK_TAIL": 1024, "num_warps": 4}],
    "rmsnorm:4096x32768:bf16@h200": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768,
                                      "num_warps": 32, "HOIST": True}],
    # (item 38's layernorm cases for a looped kernel with VAR1 ran at git 66cc9f7, the one
    # commit whose looped kernel had it: results/h200-2026-11-24-probes/item38.log, pdl.log)
    "rmsnorm:4096x32768:bf16@looped": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 16384,
                                        "num_warps": 32}],
    # item 38: the last round of rows (4096 = 31.03 x 132 SMs): the same picks at 30 and 32 rows
    # per SM of the H200
    **{f"softmax:{r}x32768:bf16@tail": [{"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768,
                                         "num_warps": 32, "num_stages": 3, "PROGRAMS_PER_SM": 1}]
       for r in (3960, 4224)},
    # item 38: cross-entropy's pick at the same bytes in shorter and longer rows, and at the
    # suite's other large shapes
    **{f"cross_entropy:{s}:bf16@h200": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 8192,
                                         "num_warps": 4, "num_stages": 2}]
       for s in ("8192x16384", "2048x65536", "8192x32000", "4096x128256")},
    # the looped layernorm in two passes (lnvar1c, retired: at git 34783ba) and the persistent
    # one with its weights in
    # the row loop (wbloop), beside the H200's single-pass pick (results/h200-2026-11-24-run8)
    "layernorm:4096x32768:bf16@item39": [
        {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32, "VAR1": True},
        {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32, "num_stages": 2,
         "PROGRAMS_PER_SM": 1, "VAR1": True},
        *({"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": w, **extra}
          for b, w, extra in ((16384, 32, {"maxnreg": 32}), (16384, 32, {}), (8192, 16, {}),
                              (4096, 8, {}), (4096, 16, {"maxnreg": 32}),
                              # with stages, for piped (the chunk loop pipelined)
                              (16384, 32, {"maxnreg": 32, "num_stages": 2}),
                              (8192, 16, {"num_stages": 2}), (4096, 8, {"num_stages": 3})))],
    "rmsnorm:4096x32768:bf16@item39": [
        {"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": w, **extra}
        for b, w, extra in ((16384, 32, {}), (16384, 32, {"maxnreg": 32, "num_stages": 2}),
                            (8192, 16, {"num_stages": 2}), (8192, 32, {"maxnreg": 32, "num_stages": 2}),
                            (4096, 8, {"num_stages": 3}))],
    "cross_entropy:4096x32768:bf16@item39": [
        {"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": w, "num_stages": st}
        for b, w, st in ((8192, 4, 2), (8192, 4, 3), (4096, 4, 3), (8192, 8, 2), (16384, 8, 2))],
    "softmax:4096x32768:bf16@item39": [
        {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32, "num_stages": s,
         "PROGRAMS_PER_SM": 1} for s in (2, 3)]
    + [{"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": w, "num_stages": s, **extra}
       for b, w, s, extra in ((8192, 16, 1, {}), (4096, 8, 2, {}), (8192, 16, 2, {}),
                              (16384, 32, 2, {"maxnreg": 32}), (4096, 8, 3, {}))],
    # item 40: layernorm's looped kernel with its shifted sums kept per thread (lnlane, built
    # into the emitter as the looped VAR1 since; the transform is at git 34783ba), and
    # what the single pass's weight and bias loads cost (diag_now, diag_nob), beside the H200
    # run9 pick; cross-entropy's run9 pick without its fold (diag_nofold)
    "layernorm:4096x32768:bf16@item40": [
        {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32, "VAR1": True}],
    "layernorm:4096x32768:bf16@item40l": [
        *({"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": w, **extra}
          for b, w, extra in ((16384, 32, {}), (16384, 32, {"maxnreg": 32}), (8192, 16, {}),
                              (8192, 32, {}), (16384, 16, {}), (4096, 8, {})))],
    "layernorm:4096x32768:bf16@item40w": [
        {"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": w, **extra}
        for b, w, extra in ((8192, 32, {}), (8192, 32, {"maxnreg": 32}), (16384, 32, {}),
                            (8192, 16, {}), (16384, 16, {}))],
    "rmsnorm:4096x32768:bf16@item40w": [
        {"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": w, **extra}
        for b, w, extra in ((16384, 32, {}), (8192, 32, {}), (8192, 16, {}))],
    # item 40: the emitter's looped VAR1 (lnlane's form), its tiles beside the
    # single pass
    "layernorm:4096x32768:bf16@var1l": [
        {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32, "VAR1": True},
        *({"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": w, "VAR1": True}
          for b, w in ((16384, 32), (8192, 32), (4096, 32), (16384, 16), (8192, 16),
                       (16384, 8)))],
    # item 40, second round: lnlane's best tiles with fewer registers (more programs per SM)
    # and with the chunk loops pipelined (lnlane+piped)
    "layernorm:4096x32768:bf16@item40m": [
        {"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": w, **extra}
        for b, w, extra in ((8192, 32, {}), (8192, 32, {"maxnreg": 32}), (8192, 16, {"maxnreg": 32}),
                            (8192, 16, {"maxnreg": 40}), (4096, 16, {}), (4096, 16, {"maxnreg": 32}),
                            (8192, 32, {"num_stages": 2}), (8192, 16, {"num_stages": 2}),
                            (4096, 16, {"num_stages": 3}))],
    "softmax:4096x32768:bf16@item40": [
        {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32, "num_stages": s,
         "PROGRAMS_PER_SM": 1} for s in (3, 4)],
    **{f"cross_entropy:{s}:bf16@item40": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 16384,
                                           "num_warps": 8, "num_stages": 2}]
       for s in ("8192x32000", "4096x128256")},
    "cross_entropy:4097x1537:bf16@item40": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 1024,
                                             "num_warps": 4, "num_stages": 1}],
    "cross_entropy:4096x32768:bf16@item40": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 16384,
                                              "num_warps": 8, "num_stages": 2}],
    "cross_entropy:4097x1537:bf16": [{"strategy": "looped", "ROWS": 1, "BLOCK_N": 1024,
                                      "num_warps": 4, "num_stages": 1},
                                     {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 2048,
                                      "num_warps": 2}],
    # item 42: the looped kernels with two or four rows per program, so that the output
    # pass's weight (and bias) loads serve ROWS rows, beside the H200 run12 picks
    "layernorm:4096x32768:bf16@rows": [
        {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32, "VAR1": True},
        *({"strategy": "looped", "ROWS": r, "BLOCK_N": b, "num_warps": w, "VAR1": True}
          for r, b, w in ((1, 16384, 32), (1, 8192, 32), (2, 16384, 32), (2, 8192, 32),
                          (2, 4096, 32), (2, 8192, 16), (4, 4096, 32), (4, 8192, 32)))],
    "rmsnorm:4096x32768:bf16@rows": [
        {"strategy": "looped", "ROWS": r, "BLOCK_N": b, "num_warps": w}
        for r, b, w in ((1, 16384, 32), (2, 16384, 32), (2, 8192, 32), (2, 4096, 32),
                        (4, 4096, 32))],
    # item 45: the row kept 16-bit in registers (pack16), so that two one-row programs fit an SM
    # (maxnreg caps where ptxas would take more), beside the H200 run13 picks
    # item 47: each thread's max and sum of exp, then one block-wide pair reduction (the lane1
    # transform at git 5076ea0; the emitter's base form since)
    "softmax:4096x32768:bf16@lane1": [
        *({"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32,
           "num_stages": s, "PROGRAMS_PER_SM": 1} for s in (2, 3, 4)),
        *({"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768, "num_warps": w}
          for w in (16, 32))],
    "softmax:16384x8192:bf16@lane1": [
        {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 8192, "num_warps": 8, "num_stages": 3,
         "PROGRAMS_PER_SM": 1},
        *({"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 8192, "num_warps": w}
          for w in (8, 16))],
    "softmax:4096x4096:bf16@lane1": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 4096,
                                      "num_warps": w} for w in (4, 8)],
    # item 47: the per-thread pairs against the two rounds (tworound) where rows are not
    # 16-byte aligned (one element a thread at a time) and where they are
    "softmax:4097x1537:bf16@pairs": [{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 2048,
                                      "num_warps": w} for w in (2, 4, 8)],
    "cross_entropy:4097x1537:bf16@pairs": [{"strategy": "single_pass", "ROWS": 1,
                                            "BLOCK_N": 2048, "num_warps": w} for w in (2, 4)],
    "softmax:4096x32768:bf16@pairs": [
        {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32,
         "num_stages": 3, "PROGRAMS_PER_SM": 1},
        {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32}],
    "softmax:4096x32768:bf16@pack": [
        {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32, "num_stages": 3,
         "PROGRAMS_PER_SM": 1},
        *({"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768, "num_warps": w, **extra}
          for w, extra in ((8, {"maxnreg": 128}), (16, {"maxnreg": 64}), (32, {"maxnreg": 32}),
                           (16, {}), (32, {})))],
    # item 45, second call: the persistent softmax with two programs per SM, each staging the
    # next row (cp.async) as the pick does
    "softmax:4096x32768:bf16@pack2": [
        {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": 32, "num_stages": 3,
         "PROGRAMS_PER_SM": 1},
        *({"strategy": "persistent", "ROWS": 1, "BLOCK_N": 32768, "num_warps": w, "num_stages": 2,
           "PROGRAMS_PER_SM": 2, "maxnreg": r} for w, r in ((16, 64), (32, 32)))],
    "layernorm:4096x32768:bf16@pack": [
        *({"strategy": "looped", "ROWS": 1, "BLOCK_N": b, "num_warps": 32, "VAR1": True}
          for b in (8192, 16384)),
        *({"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768, "num_warps": w, "VAR1": True,
           **extra}
          for w, extra in ((8, {}), (16, {"maxnreg": 64}), (32, {"maxnreg": 32}), (32, {})))],
    "rmsnorm:4096x32768:bf16@pack": [
        {"strategy": "looped", "ROWS": 1, "BLOCK_N": 16384, "num_warps": 32},
        *({"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 32768, "num_warps": w, **extra}
          for w, extra in ((8, {}), (16, {"maxnreg": 64}), (32, {"maxnreg": 32}), (32, {})))],
}
TRANSFORMS = ("base", "hoist", "i32", "cs", "ef", "all", "tl_exp", "ffma", "masked",
              "nopdl", "wbloop", "diag_noexp",
              "piped", "lhoist", "diag_nob", "diag_now",
              "diag_nofold", "l1w", "l1wcg", "gridwait", "foldb256", "foldb512", "foldb1024",
              "foldb2048", "foldb4096", "foldb8192", "spinlast", "pack16", "tworound")
_EXP2 = re.compile(r"tl\.exp2\(\(([^()]*)\) \* 1\.4426950408889634\)")
def _with_helper(source: str, out: str, helper: str) -> str:
    if out == source:
        return source
    first = out.index("@triton.jit")
    return out[:first] + helper.lstrip("\n") + "\n\n" + out[first:]


_EXP_OF_SUB = re.compile(r"\n(\s+)(v\d+) = \((\w+) - (\w+)\)\n(\s+)(v\d+) = tl\.exp2\(\(\2\) \* "
                         + LOG2E + r"\)\n")


def exp_as_ffma(source: str) -> str:
    """ffma: exp2(x * log2e - m * log2e) (one FFMA) for the emitter's exp2((x - m) * log2e)."""

    def edit(name: str, body: str) -> str:
        return _EXP_OF_SUB.sub(
            lambda m: (f"\n{m.group(1)}{m.group(2)} = ({m.group(3)} - {m.group(4)})\n{m.group(5)}"
                       f"{m.group(6)} = tl.exp2({m.group(3)} * {LOG2E} - {m.group(4)} * "
                       f"{LOG2E})\n"), body)

    return _edit_kernels(source, edit)


# the emitter's per-thread (max, sum) pairs of an online softmax (item 47), up to the row
# values they bind; then, in softmax, the scale and the folded exp / sum (or exp itself)
_PAIRS = re.compile(
    r"\n(\s+)(g\d+) = tl\.reshape\((.+), \[ROWS, BLOCK_N // LANES, LANES // VEC, VEC\]\)\n"
    r"\s+m_t\d+ = tl\.max\(.*\n\s+shift_t\d+ = .*\n\s+(p\d+) = .*\n"
    r"\s+(m_row\d+), (s_row\d+) = tl\.reduce\(.*\n"
    r"\s+(red\d+) = \5\[:, None\]\n\s+(red\d+) = \6\[:, None\]\n"
    r"(?:\s+shift\d+ = .*\n\s+scale\d+ = .*\n)?"
    r"(?:\s+(inv\d+) = (.*)\n\s+(v\d+) = tl\.reshape\(.*\n)?"
    r"(?:\s+(e\d+) = tl\.reshape\(.*\n)?")


def two_round_softmax(source: str) -> str:
    """tworound: the one-block kernels' online softmax as the emitter wrote it before item 47,
    the row's max across the block, then the sum of exp(g - max) across it (two rounds), in
    place of each thread's (max, sum) pair combined once (the emitter's form since). A HOIST
    branch, whose lines are reordered, is left as it is."""

    def edit(name: str, body: str) -> str:
        if not name.endswith(("_single_pass_kernel", "_persistent_kernel")):
            return body

        def old_form(m: re.Match) -> str:
            ind, g, p, red_m, red_s = m.group(1), m.group(3), m.group(4), m.group(7), m.group(8)
            lines = [f"{red_m} = tl.max({g}, axis=1)[:, None]",
                     f"{p} = tl.exp2(({g} - {red_m}) * {LOG2E})",
                     f"{red_s} = tl.sum({p}, axis=1)[:, None]"]
            if m.group(9):  # softmax's exp / sum
                lines += [f"{m.group(9)} = {m.group(10)}", f"{m.group(11)} = ({p} * {m.group(9)})"]
            if m.group(12):
                lines.append(f"{m.group(12)} = {p}")
            return "\n" + "".join(f"{ind}{ln}\n" for ln in lines)

        return _PAIRS.sub(old_form, body)

    return _edit_kernels(source, edit)


_FOLD_CONFIG = "    fold = fold_config(n_rows, beside_grid=pdl and not captured)\n"  # the launcher's
_FOLD_LAUNCH = re.compile(r"\n(" + re.escape(_FOLD_CONFIG) + r"    (\w+)_post_kernel\[\(1,\)\]\("
                          r"(?:\n        .*)*\n    \)\n)")


def looped_l1_weights(source: str, x_bypass: bool) -> str:
    """l1w: the looped kernels' weight and bias loads marked evict_last, so that the SM's L1
    keeps a row's weights for the next row instead of reading them through L2 again; l1wcg
    also loads the rows past L1 (.cg), leaving it to the weights."""

    def edit(name: str, body: str) -> str:
        if not name.endswith("_looped_kernel"):
            return body
        body = re.sub(r"(tl\.load\(in[12]_ptr \+ \(cols \* in[12]_cs0\), mask=mask, other=0\.0)\)",
                      r'\1, eviction_policy="evict_last")', body)
        if x_bypass:
            body = re.sub(r"(tl\.load\(in0_ptr \+ \(rows \* in0_s0\) \+ \(cols \* in0_cs1\), "
                          r"mask=mask, other=0\.0)\)", r'\1, cache_modifier=".cg")', body)
        return body

    return _edit_kernels(source, edit)


_WIDEN = """

@triton.jit
def _probe_widen(x):
    # 16-bit values kept two to a 32-bit register, widened to fp32 at each use by inline asm
    # that the compiler may neither hoist to the load nor merge (is_pure=False): item 45
    if x.dtype == tl.bfloat16:
        return tl.inline_asm_elementwise("shl.b32 $0, $2, 16; and.b32 $1, $2, 0xffff0000;",
                                         "=r,=r,r", [x], dtype=tl.float32, is_pure=False, pack=2)
    elif x.dtype == tl.float16:
        return tl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.f32.f16 $0, lo; cvt.f32.f16 $1, hi; }",
            "=r,=r,r", [x], dtype=tl.float32, is_pure=False, pack=2)
    else:
        return x.to(tl.float32)
"""
_ROW_LOAD = re.compile(r"^(\s+)(x\d+) = (tl\.load\([^\n]*\(cols \*[^\n]*\))\.to\(tl\.float32\)$",
                       re.MULTILINE)


def packed_rows(source: str) -> str:
    """pack16: the one-block kernels (single pass, persistent) keep each row-wide load in its own
    16-bit type, two values to a register, and widen it at each use (`_probe_widen`), where the
    emitter converts it to fp32 at the load: half the registers for the row (item 45)."""

    def edit(name: str, body: str) -> str:
        if not name.endswith(("_single_pass_kernel", "_persistent_kernel")):
            return body
        names = {m.group(2) for m in _ROW_LOAD.finditer(body)}
        body = _ROW_LOAD.sub(lambda m: f"{m.group(1)}{m.group(2)}_h = {m.group(3)}", body)
        for x in names:
            body = re.sub(rf"\b{x}\b(?!_h)", f"_probe_widen({x}_h)", body)
        # what is computed from a widened row is recomputed at each use (inlined), not held in
        # fp32 registers across the reductions (softmax's exps; the norms' centred row)
        remat: dict[str, str] = {}
        lines = []
        for line in body.split("\n"):
            m = re.match(r"^(\s+[\w, ]+ = )(.+)$", line)
            lhs, rhs = (m.group(1), m.group(2)) if m else ("", line)
            for v, expr in remat.items():
                rhs = re.sub(rf"\b{v}\b", lambda _m, e=expr: f"({e})", rhs)
            name = lhs.strip(" =")
            remat.pop(name, None)
            if re.fullmatch(r"v\d+", name) and "_probe_widen(" in rhs:
                remat[name] = rhs
                continue
            lines.append(lhs + rhs)
        return "\n".join(lines)

    return _with_helper(source, _edit_kernels(source, edit), _WIDEN)


def fold_block(source: str, block: int) -> str:
    """foldb<N>: the fold kernel over blocks of `block` rows, with the warps fold_config gives
    a block that wide (4 at least)."""
    warps = heuristics.fold_config(block, beside_grid=False)["num_warps"]
    return source.replace(_FOLD_CONFIG, f'    fold = {{**fold_config(n_rows), "BLOCK": {block}, '
                                        f'"num_warps": {warps}}}\n')


def spin_on_last_word(source: str) -> str:
    """spinlast: before its block loop the fold waits on the last row's last word alone (a
    scalar poll: one load, no block-wide reduction), so that while the grid runs it issues
    little beside the main programs on its SM; the block polls then find the words stamped."""
    at = source.find("_post_kernel(")
    if at < 0:
        return source
    loop = source.index("    for start in range(0, n_rows, BLOCK):\n", at)
    posts = len(re.findall(r"\n        w\d+ = tl\.load", source[loop:source.index("spins = 0", loop)]))
    word = f"words_ptr + {posts - 1} * n_rows + n_rows - 1"
    spin = (f"    last = tl.load({word}, mask=n_rows > 0, other=stamp, volatile=True)\n"
            "    spins = 0\n"
            "    while ((last >> 32) != (stamp >> 32)) & (spins < MAX_SPINS):\n"
            f"        last = tl.load({word}, mask=n_rows > 0, other=stamp, volatile=True)\n"
            "        spins += 1\n")
    return source[:loop] + spin + source[loop:]


def fold_after_grid_wait(source: str) -> str:
    """gridwait: the fold waits for the main grid to complete and flush (griddepcontrol.wait)
    before it polls its words on every early launch, not only under CUDA-graph capture: the
    fold as it was before item 41, so t(gridwait) - t(base) is what polling the words saves."""
    return source.replace("GRID_WAIT=captured and pdl,", "GRID_WAIT=pdl,")


_DIAG_LOADS = {"diag_nob": ("in2_ptr", "0.0"), "diag_now": ("in1_ptr", "1.0")}


def drop_weight_load(source: str, which: str) -> str:
    """diag_nob / diag_now: layernorm's bias (weight) load replaced by 0 (1): a wrong result
    when the bias (weight) is not that, timed unchecked to show what its load costs."""
    ptr, value = _DIAG_LOADS[which]
    return re.sub(rf"tl\.load\({ptr} \+ \(cols \* in\d_cs0\), mask=\w+, other=0\.0\)"
                  r"\.to\(tl\.float32\)", value, source)


_HOISTED_WEIGHT = re.compile(r"\n    (x\d+) = (tl\.load\(in\d_ptr \+ \(cols \* in\d_cs0\), "
                             r"mask=col_mask, other=0\.0\)\.to\(tl\.float32\))(?=\n)")


def weights_in_row_loop(source: str) -> str:
    """wbloop: the persistent kernel loads weights and biases inside its row loop, next to
    their use, as before item 23 (registers for two more rows of fp32 otherwise)."""

    def edit(name: str, body: str) -> str:
        if not name.endswith("_persistent_kernel"):
            return body
        for name_, load in _HOISTED_WEIGHT.findall(body):
            body = body.replace(f"\n    {name_} = {load}\n", "\n", 1)
            use = re.search(rf"\n        (v\d+) = \(.*\b{name_}\b.*\)\n", body)
            body = body[:use.start()] + f"\n        {name_} = {load}" + body[use.start():]
        return body

    return _edit_kernels(source, edit)


def no_exp(source: str) -> str:
    """diag_noexp: the per-element exp(x - m) replaced by x - m, in the looped online softmax
    (the emitter's lane form, item 39) and in the one-block kernels (`tl.exp2((x - m) * log2e)`):
    a wrong result, timed unchecked to show what the exp costs."""
    source = source.replace(f"p = tl.exp2(g * {LOG2E} - m_shift[:, None, :])",
                            "p = g - m_shift[:, None, :]")
    return _EXP2.sub(r"(\1)", source)


def looped_hoist(source: str) -> str:
    """lhoist: the looped kernel's statements after its loops that need no reduction (the
    cross-entropy target and the gathered logit: two dependent loads) moved before the loops,
    so that their latency overlaps the row's stream instead of ending each program."""
    from porter.codegen.rowwise import _assignments
    from porter.codegen.rowwise import split_invariant

    def edit(name: str, body: str) -> str:
        if not name.endswith("_looped_kernel"):
            return body
        lines = body.split("\n")
        prelude = max(i for i, ln in enumerate(lines)
                      if re.match(r"^    (pid|rows|row_mask|r\d+) = ", ln)) + 1
        last_loop = max(i for i, ln in enumerate(lines) if ln.startswith("    for start in"))
        tail = next((i for i in range(last_loop + 1, len(lines))
                     if lines[i].startswith("    ") and not lines[i].startswith("     ")),
                    len(lines))
        middle = lines[prelude:tail]
        movable, rest = split_invariant(lines[tail:], set(_assignments(middle)))
        if not any("tl.load(" in ln for ln in movable):
            return body
        return "\n".join(lines[:prelude] + movable + middle + rest)

    return _edit_kernels(source, edit)


def pipelined_loops(source: str) -> str:
    """piped: the looped kernels' chunk loops as tl.range(..., num_stages=LOOP_STAGES), the
    config's num_stages: Triton 3.6 pipelines loads that feed no dot only in a loop that names
    its stages, so a plain range loop loads each chunk only when it reaches it."""

    def edit(name: str, body: str) -> str:
        if not name.endswith("_looped_kernel"):
            return body
        return re.sub(r"for start in range\((.*), BLOCK_N\):",
                      r"for start in tl.range(\1, BLOCK_N, num_stages=LOOP_STAGES):", body)

    out = _edit_kernels(source, edit)
    if out == source:
        return source
    return _looped_kernel_arg(out, "LOOP_STAGES: tl.constexpr", 'config.get("num_stages", 1)')


def _kernel_arg(source: str, kernel: str, param: str) -> str:
    """The kernel whose name ends in `kernel` (with its "(") with one more parameter (`param`, a
    signature line) last."""
    head = source.index(kernel)
    sig_end = source.index("):\n", head)
    return source[:sig_end] + f"    {param},\n" + source[sig_end:]


def _looped_kernel_arg(source: str, param: str, value: str) -> str:
    """The looped kernel with one more parameter (`param`, a signature line), which the
    launcher passes as `value` (a launcher expression) for the looped strategy."""
    source = _kernel_arg(source, "_looped_kernel(", param)
    name = param.split(":")[0]
    return source.replace(
        "    grid = triton.cdiv(n_rows, rows)\n",
        "    grid = triton.cdiv(n_rows, rows)\n    if strategy == \"looped\":\n"
        f"        extra[\"{name}\"] = {value}\n", 1)


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


# transforms that rewrite the whole module (the others edit each kernel body, below)
_WHOLE_SOURCE: dict[str, Callable[[str], str]] = {
    "tl_exp": lambda src: _EXP2.sub(r"tl.exp(\1)", src),
    "ffma": exp_as_ffma,
    "masked": lambda src: src.replace(" | EVEN", ""),
    "nopdl": lambda src: src.replace("    pdl = _pdl(device)\n", "    pdl = False\n"),
    "diag_nob": lambda src: drop_weight_load(src, "diag_nob"),
    "diag_now": lambda src: drop_weight_load(src, "diag_now"),
    "l1w": lambda src: looped_l1_weights(src, False),
    "l1wcg": lambda src: looped_l1_weights(src, True),
    "diag_nofold": lambda src: _FOLD_LAUNCH.sub("\n", src, count=1),
    "gridwait": fold_after_grid_wait,
    "spinlast": spin_on_last_word,
    **{f"foldb{n}": (lambda src, n=n: fold_block(src, n)) for n in (256, 512, 1024, 2048, 4096, 8192)},
    "wbloop": weights_in_row_loop,
    "diag_noexp": no_exp,
    "piped": pipelined_loops,
    "lhoist": looped_hoist,
    "pack16": packed_rows,
    "tworound": two_round_softmax,
}


def transform(source: str, which: str) -> str:
    if "+" in which:  # several transforms, applied left to right
        for one in which.split("+"):
            source = transform(source, one)
        return source
    if which in _WHOLE_SOURCE:
        return _WHOLE_SOURCE[which](source)
    todo = {"hoist", "i32", "cs", "ef"} if which == "all" else {which} - {"base"}

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


def _same_kernel(src: str, base_src: str, op_name: str, strategy: str) -> bool:
    """Whether `src` runs `strategy` exactly as `base_src` does: its kernel, the fold kernel
    (ops with a scalar output) and the launcher."""

    def kernel(text: str, name: str) -> str:
        at = text.find(f"def _{op_name}_{name}_kernel(")
        return "" if at < 0 else text[at:text.index("\n\n\n", at)]

    def parts(text: str) -> tuple[str, str, str]:  # the strategy's kernel, the fold, the launcher
        return kernel(text, strategy), kernel(text, "post"), text[text.index("\ndef launch("):]

    return parts(src) == parts(base_src)


def check_variant(fn: Callable[..., Any], spec: Any, shape: tuple[int, ...], dname: str,
                  row: dict[str, Any], diagnostic: bool = False) -> bool:
    """Run `fn` once on fresh inputs against the float64 reference and note the outcome in
    `row` (max_rel_err, or error); whether it may be timed. A diagnostic is timed whatever its
    error (marked unchecked)."""
    dev = torch.device("cuda")
    try:
        inputs = spec.make_inputs(shape, DTYPES[dname], dev, torch.Generator(dev).manual_seed(7))
        want = spec.reference(*[x.double() if isinstance(x, torch.Tensor) and
                                x.is_floating_point() else x for x in inputs])
        err = _max_rel_err(fn(*inputs), want)
    except Exception as exc:  # noqa: BLE001 - a variant that fails is a result
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return False
    row["max_rel_err"] = err
    if diagnostic:
        row["unchecked"] = True
    elif err > SWEEP_TOL[dname]:
        row["error"] = f"wrong: max error {err:.2e}"
        return False
    return True


def copy_of_same_bytes(spec: Any, shape: tuple[int, ...], dtype: torch.dtype
                       ) -> Callable[..., Any]:
    """A device copy moving as many bytes as the op must (inputs read once, outputs written
    once): the speed of light at that size, as a provider."""
    meta = spec.make_inputs(shape, dtype, torch.device("meta"), torch.Generator().manual_seed(0))
    outs = spec.reference(*meta)
    outs = outs if isinstance(outs, (tuple, list)) else [outs]
    nbytes = sum(x.numel() * x.element_size() for x in [*meta, *outs] if isinstance(x, torch.Tensor))
    copy_src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device=torch.device("cuda"))
    copy_dst = torch.empty_like(copy_src)
    return lambda *a: copy_dst.copy_(copy_src)


def run_meta(det: Any, reps: int) -> dict[str, Any]:
    """The first line of a probe's JSONL: device, versions, repetitions, code revision."""
    from harness import env_info

    return {"meta": True, "device": det.device_name, "hw_model": det.model.name,
            "versions": env_info.versions(), "reps": reps,
            "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(REPO)}


def probe_beside_picks(text: str, hw: Any, reps: int, picks: list[dict[str, Any]],
                       hand: list[tuple[str, dict[str, Any], Callable[..., Any]]]
                       ) -> list[dict[str, Any]]:
    """One case of a probe of hand-written kernels: the porter's own kernels for it (its
    generated module at each of `picks`) and the hand-written (key, config, launcher) variants,
    each checked against float64, then every right one timed interleaved with eager PyTorch and
    a copy of the same bytes. One row per variant."""
    from porter.codegen import load_generated_module

    op_name, shape, dname = parse_case(text)
    dtype = DTYPES[dname]
    spec, gen_op = generated(op_name)
    module = load_generated_module(gen_op.triton_module_source(), f"probe_{op_name}",
                                   interpret=False)
    todo = []
    for pick in picks:
        cfg = {"num_stages": 1, "dtype": dname, **pick}
        key = (f"pick {cfg['strategy'][:6]} w{cfg['num_warps']} b{cfg['BLOCK_N']}"
               f" st{cfg['num_stages']}")
        todo.append((key, cfg, lambda *a, _c=cfg: module.launch(*a, config=_c)))
    providers: dict[str, Callable[..., Any]] = {}
    rows: list[dict[str, Any]] = []
    for key, cfg, fn in todo + hand:
        row = {"case": text, "key": key, "config": cfg}
        rows.append(row)
        if check_variant(fn, spec, shape, dname, row):
            providers[key] = fn
    providers["eager"] = spec.reference
    providers["copy"] = copy_of_same_bytes(spec, shape, dtype)
    time_into_rows(providers, rows, text, spec, shape, dtype, hw, reps)
    return rows


def probe_cases(script: str, cases: list[str], reps: int, out: Path,
                probe: Callable[[str, Any, int], list[dict[str, Any]]]) -> None:
    """Run `probe(case, hw_model, reps)` for each case on the local GPU: the meta line, then each
    case's rows, go to <out>/probe.jsonl as the case finishes; a table per case is printed."""
    _, det = local_gpu(script)
    out.mkdir(parents=True, exist_ok=True)
    meta = run_meta(det, reps)
    print(json.dumps(meta), flush=True)
    with open(out / "probe.jsonl", "a") as f:
        f.write(json.dumps(meta) + "\n")
        for case in cases:
            t0 = time.time()
            rows = probe(case, det.model, reps)
            f.writelines(json.dumps(r, default=str) + "\n" for r in rows)
            f.flush()
            print(f"== {case} ({time.time() - t0:.0f} s)")
            print_table(rows)


def time_into_rows(providers: dict[str, Callable[..., Any]], rows: list[dict[str, Any]],
                   text: str, spec: Any, shape: tuple[int, ...], dtype: torch.dtype, hw: Any,
                   reps: int) -> Any:
    """Time the providers interleaved on fresh inputs (`harness.timing.compare`, LLC flushed
    every repetition) and write each one's median, p20 and p80 into its row of `rows` (keyed
    by name; a row is added for a provider without one). Returns the comparison."""
    from harness.timing import compare

    dev = torch.device("cuda")

    def make_args() -> tuple[Any, ...]:
        return tuple(spec.make_inputs(shape, dtype, dev, torch.Generator(dev)))

    cmp = compare(providers, make_args, hw=hw, reps=reps, warmup=3, graph=False)
    for name, t in cmp.timings.items():
        row = next((r for r in rows if r["key"] == name), None)
        if row is None:
            row = {"case": text, "variant": name, "key": name}
            rows.append(row)
        row.update(median_us=t.median_ms * 1e3, p20_us=t.p20_ms * 1e3, p80_us=t.p80_ms * 1e3)
    return cmp


def probe_case(text: str, configs: list[dict[str, Any]], hw: Any, reps: int,
               transforms: tuple[str, ...] = TRANSFORMS) -> list[dict[str, Any]]:
    from bench.suite import liger_provider
    from porter.codegen import load_generated_module

    op_name, shape, dname = parse_case(text.split("@")[0])
    dtype = DTYPES[dname]
    spec, gen_op = generated(op_name)
    base_src = gen_op.triton_module_source()
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
            if which != "base" and _same_kernel(src, base_src, op_name, cfg["strategy"]):
                continue  # the transform changes another strategy's kernel, not this one's
            key = (f"{which} w{cfg['num_warps']} {cfg['strategy'][:6]} b{cfg['BLOCK_N']}"
                   + (f" rows{cfg['ROWS']}" if cfg.get("ROWS", 1) > 1 else "")
                   + (" var1" if cfg.get("VAR1") else "")
                   + (f" st{cfg['num_stages']}" if cfg["num_stages"] > 1 else "")
                   + (f" r{cfg['maxnreg']}" if cfg.get("maxnreg") else ""))
            row = {"case": text, "variant": which, "config": cfg, "key": key}
            rows.append(row)
            fn = (lambda *a, _m=module, _c=cfg: _m.launch(*a, config=_c))
            # a diagnostic: wrong by design, timed to see what it drops
            if check_variant(fn, spec, shape, dname, row, diagnostic="diag_" in which):
                providers[key] = fn
    print(f"[{text}] {len(providers)} variants compiled and checked in {time.time() - t0:.0f} s",
          flush=True)
    providers["eager"] = spec.reference
    lig = liger_provider(op_name)
    if lig is not None:
        providers["liger"] = lig
    providers["copy"] = copy_of_same_bytes(spec, shape, dtype)
    # What reading the first input alone takes (no writes): the ceiling of an op whose output
    # is tiny (cross-entropy's loss), which a copy's mixed reads and writes may understate.
    providers["read"] = lambda *a: torch.sum(a[0], dtype=torch.float32)

    cmp = time_into_rows(providers, rows, text, spec, shape, dtype, hw, reps)
    base_keys = [r["key"] for r in rows if r["variant"] == "base" and "median_us" in r]
    for r in (r for r in rows if "median_us" in r):
        r["vs_base"] = None
        if base_keys:
            same_cfg = [k for k in base_keys if k.split(" ", 1)[1] == r["key"].split(" ", 1)[-1]]
            ref = same_cfg[0] if same_cfg else base_keys[0]
            r["vs_base"] = cmp.ratio(r["key"], ref).median
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    """The timed rows, fastest first (with their time over the base variant's where a row has
    one), then the rows that failed."""
    from tabulate import tabulate

    timed = sorted((r for r in rows if "median_us" in r), key=lambda r: r["median_us"])
    with_base = any("vs_base" in r for r in timed)
    print(tabulate([[f"{r['median_us']:.1f}", f"{r['p20_us']:.1f}-{r['p80_us']:.1f}",
                     *(["-" if r.get("vs_base") is None else f"{r['vs_base']:.3f}"]
                       if with_base else []), r["key"]] for r in timed],
                   headers=["us", "p20-p80", *(["t/base"] if with_base else []), "variant"]))
    for r in rows:
        if r.get("error"):
            print(f"  {r['key']}: {r['error']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES), help="OP:SHAPE:DTYPE,... (from CASES)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--transforms", default=",".join(TRANSFORMS), help="of " + ",".join(TRANSFORMS))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cases = args.cases.split(",")
    for text in cases:
        if text not in CASES:
            raise SystemExit(f"probe: unknown case {text!r}; known: {', '.join(CASES)}")
    transforms = tuple(t for t in args.transforms.split(",") if t)
    probe_cases("probe_rowwise", cases, args.reps, args.out,
                lambda text, hw, reps: probe_case(text, CASES[text], hw, reps, transforms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
