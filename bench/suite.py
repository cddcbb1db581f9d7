"""Speed-of-light suite: the porter's kernels beside eager, torch.compile and Liger-Kernel.

On the GPU it runs on, for every example op:
  1. `porter.port.port(spec, [this device])` searches the porter's own variant space on the
     device (measured tier) and writes a pack — no hand-picked configs;
  2. `porter.load_pack` loads that pack, and the loaded op is timed beside the best eager
     PyTorch op (the spec's reference), `torch.compile(reference)` in its default mode, and
     Liger-Kernel where it has the op, all interleaved in one process (`harness.bench_op`:
     CUDA events, L2 flushed with a buffer of 2x the device's last-level cache, median of many
     repetitions, fresh random inputs);
  3. every row goes to `<out>/rows.jsonl` as soon as it is measured (an interrupted run keeps
     what it measured), and at the end `<out>/results.json`, `<out>/results.csv` and
     `<out>/SUMMARY.md` (device, versions, date, the table, geometric means).

    python -m bench.suite --out results/<device>-<date> [--ops rmsnorm,softmax] [--reps 50]
    porter bench --suite results/<device>-<date>     # the same, from a checkout

With --unseen (issue 31), each op's pack, ported only at the spec's shapes as above, is also
timed at shapes no spec lists (UNSEEN: other row widths, row counts and vocabulary widths),
beside eager, torch.compile and a same-size copy; those rows are marked `unseen`, and SUMMARY.md
gives them a table of their own with what the pack ran there (the config derived for the shape,
a same-width bucket's, or the reference op where the pack estimated eager faster; see
docs/PACKS.md). --unseen-only times only those rows (the port still runs at the spec's shapes,
or the pack an earlier run left in <out>/packs/<op> is reused).

Percentages are of the device's measured copy bandwidth (memory-bound ops) or measured bf16
matmul rate (matmul), from hwmodels/devices/<device>.yaml; datasheet percentages beside them.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import importlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Ops and shapes of the suite (issue 5). bf16 everywhere; fp32 and fp16 on a subset.
WIDE = [(4096, 4096), (16384, 8192), (32768, 4096), (8192, 5120), (4097, 1537), (4096, 32768)]
LLAMA = [(8192, 4096), (8192, 8192), (16384, 5120)]  # batch*seq rows x Llama hidden sizes
SUBSET = [(16384, 8192), (8192, 5120)]
OPS: dict[str, dict[str, Any]] = {
    "rmsnorm": {"shapes": WIDE + LLAMA, "extra_dtypes": SUBSET},
    "layernorm": {"shapes": WIDE + LLAMA, "extra_dtypes": SUBSET},
    # and a vocabulary-width row (Llama-3's), issue 31
    "softmax": {"shapes": WIDE + [(4096, 128256)], "extra_dtypes": SUBSET},
    "add_rmsnorm": {"shapes": WIDE + LLAMA, "extra_dtypes": []},
    "cross_entropy": {"shapes": [(4096, 32768), (8192, 32000), (4096, 128256), (4097, 1537)],
                      "extra_dtypes": []},
    "gelu": {"shapes": WIDE, "extra_dtypes": []},
    "swiglu": {"shapes": [(8192, 14336), (16384, 11008), (4097, 1537)], "extra_dtypes": []},
    "rotary": {"shapes": [(16384, 32, 128), (8192, 64, 128), (4097, 32, 128)], "extra_dtypes": []},
    # two strategies (TMA persistent, tiled) with several knobs each: a wider search
    "matmul_bias_gelu": {"shapes": [(4096, 4096, 4096), (8192, 8192, 8192)], "extra_dtypes": [],
                         "max_variants": 12},
}
# Shapes no spec lists (issue 31), to time packs ported only at the spec's shapes: row widths
# between and beyond the ported ones (3000 -> bucket 3072, 6144, 12288, 20000 -> 20480), row
# counts the spec has not (1000, 10000 at ported widths: a same-width bucket lends its config),
# and vocabulary widths (GPT-2's 50257, Qwen's 151936) where the op has one. Working sets span
# 33 MB to 0.8 GB in bf16, four of them >= 64 MB for the 85%-of-copy target.
UNSEEN_ROWS = [(10000, 3000), (3000, 6144), (1000, 12288), (4096, 20000), (10000, 4096),
               (1000, 8192)]
VOCAB = [(4096, 50257), (1024, 151936)]
# Shapes the launcher's unmeasured rules (heuristics.rowwise_default, bench/NOTES.md items 57,
# 59) were NOT swept at: the rows above at 12288-151936 columns were, and 2500 x 24000 and
# 8000 x 9000 in item 59 (held out in item 58), so these check that the rules hold elsewhere (a
# reduction at 6000, two blocks or a 4096-column loop at 11000, split_coop or the looped
# reduction at 40000, Falcon's 65024 vocabulary).
SWEPT_LATER = [(2500, 24000), (8000, 9000)]  # held out in item 58, swept in item 59
SWEPT = [(4096, 20000), (10000, 4096), (1000, 12288), *VOCAB, *SWEPT_LATER]
HELD_OUT = [(20000, 6000), (6000, 11000), (3000, 40000)]
VOCAB_HELD_OUT = [(4096, 65024)]
UNSEEN: dict[str, dict[str, Any]] = {
    "rmsnorm": {"shapes": UNSEEN_ROWS + SWEPT_LATER + HELD_OUT, "fp32": [(3000, 6144)]},
    "layernorm": {"shapes": UNSEEN_ROWS + SWEPT_LATER + HELD_OUT, "fp32": [(3000, 6144)]},
    "softmax": {"shapes": UNSEEN_ROWS + VOCAB + SWEPT_LATER + HELD_OUT + VOCAB_HELD_OUT,
                "fp32": [(3000, 6144)]},
    # ported in bf16 only
    "cross_entropy": {"shapes": UNSEEN_ROWS + VOCAB + SWEPT_LATER + HELD_OUT + VOCAB_HELD_OUT,
                      "fp32": []},
}
EVENTS_METHOD = ("CUDA events with a device-side head start (host launch overhead excluded for "
                 "all providers)")
UNSEEN_TARGET_PCT = 85.0  # issue 31: unseen rows >= 64 MB at >= 85% of copy bandwidth
MEMORY_BOUND = [op for op in OPS if op != "matmul_bias_gelu"]
BIG_BYTES = 64 * 2**20  # the 90%-of-copy-bandwidth target applies at working sets >= 64 MB
SMALL_BYTES = 32 * 2**20  # under this: "not slower than the best baseline"


def liger_provider(op: str) -> Callable[..., Any] | None:
    """Liger-Kernel's forward for `op`, or None where Liger has no such op or is not installed."""
    try:
        lf = importlib.import_module("liger_kernel.transformers.functional")
    except Exception:  # noqa: BLE001 - any import failure means "not available", reported once
        return None
    from_spec = {
        "rmsnorm": lambda x, w: lf.liger_rms_norm(x, w, 1e-6, in_place=False),
        "layernorm": lambda x, w, b: lf.liger_layer_norm(x, w, b, 1e-5),
        "softmax": lambda x: lf.liger_softmax(x),
        "swiglu": lambda a, b: lf.liger_swiglu(a, b),
        "cross_entropy": lambda x, t: lf.liger_cross_entropy(x, t),
        "add_rmsnorm": lambda x, r, w: lf.liger_fused_add_rms_norm(x, r, w, 1e-6, in_place=False),
    }
    return from_spec.get(op)


def copy_provider(problem: Any, shape: tuple[int, ...], dtype: Any) -> Callable[..., Any]:
    """A device copy moving the op's bytes (half read, half written): the speed of light at
    this working-set size, which at tens of MB sits below the large-copy ceiling (launch ramp
    and tail). Timed beside the others; not a baseline for speedups."""
    import torch

    from porter.planner import op_cost

    nbytes, _ = op_cost(problem, shape, dtype)
    n = max(1, nbytes // 2 // 2)
    src = torch.randn(n, device="cuda").to(torch.bfloat16)
    dst = torch.empty_like(src)
    return lambda *args: dst.copy_(src)


def matmul_alone_provider() -> Callable[..., Any]:
    """cuBLAS's matmul alone, x @ w.t() without bias or GELU (issue 5: the fused op should reach
    90% of its TFLOP/s). Timed beside the others; not a baseline for speedups."""
    import torch

    return lambda x, w, _b: torch.mm(x, w.t())


def row_dict(row: Any) -> dict[str, Any]:
    d = dataclasses.asdict(row)
    d["speedup"] = {k: list(v) for k, v in row.speedup.items()}
    d["shape"] = list(row.shape)
    return d


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summarize(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """Markdown summary: the table, then the targets of issue 5 with how each came out."""
    from tabulate import tabulate

    unseen = [r for r in rows if r.get("unseen")]
    rows = [r for r in rows if not r.get("unseen")]
    by_key: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_key.setdefault((r["op"], tuple(r["shape"]), r["dtype"]), {})[r["provider"]] = r
    table = []
    refs = [f"{r['op']} {'x'.join(map(str, r['shape']))} {r['dtype']}: {r['pack_runs']}"
            for r in rows if r["provider"] == "ported" and r.get("pack_runs", "kernel") != "kernel"]
    sp_compile, sp_liger, worst_vs_liger, big_misses, small_losses = [], [], [], [], []
    matmul_lines = []
    for (op, shape, dtype), prov in by_key.items():
        ours = prov.get("ported")
        if ours is None or ours.get("median_ms") is None:
            table.append([op, "x".join(map(str, shape)), dtype, "FAILED"] + [""] * 8)
            continue

        def sp(name: str, _ours: dict[str, Any] = ours) -> float | None:
            v = _ours["speedup"].get(name)
            return v[0] if v else None

        s_eager, s_comp, s_liger = sp("eager"), sp("compile"), sp("liger")
        is_mem = op in MEMORY_BOUND
        if is_mem and s_comp:
            sp_compile.append(s_comp)
        if is_mem and s_liger:
            sp_liger.append(s_liger)
            worst_vs_liger.append((s_liger, op, shape, dtype))
        # The speed of light at this size: a same-size copy (memory-bound rows) or cuBLAS's
        # matmul alone (the matmul row); "% of" it is a ratio of times measured side by side.
        copy = prov.get("copy") or prov.get("matmul_alone") or {}
        copy_pct = copy.get("pct_measured_peak")
        of_copy = (100.0 * copy["median_ms"] / ours["median_ms"]
                   if copy.get("median_ms") and ours.get("median_ms") else None)
        if is_mem and ours["bytes_moved"] >= BIG_BYTES and (ours["pct_measured_peak"] or 0) < 90:
            big_misses.append(f"{op} {'x'.join(map(str, shape))} {dtype}: "
                              f"{ours['pct_measured_peak']:.1f}%" +
                              (f" (a copy of as many bytes: {copy_pct:.1f}%)" if copy_pct else ""))
        if not is_mem and of_copy is not None:
            matmul_lines.append(
                f"{op} {'x'.join(map(str, shape))} {dtype}: {ours['tflops']:.0f} TFLOP/s, "
                f"{of_copy:.1f}% of cuBLAS's matmul alone (target >= 90%), "
                f"{s_eager or 0:.2f}x eager, {s_comp or 0:.2f}x torch.compile (targets > 1), "
                f"pack runs {ours.get('pack_runs', 'kernel')}")
        if ours["bytes_moved"] < SMALL_BYTES:
            best = max([s for s in (s_eager, s_comp, s_liger) if s] or [1.0])
            worst_base = min([s for s in (s_eager, s_comp, s_liger) if s] or [1.0])
            if worst_base < 1.0:
                small_losses.append(f"{op} {'x'.join(map(str, shape))} {dtype}: "
                                    f"{worst_base:.2f}x of the best baseline")
            del best

        def f(x: float | None, spec: str = ".2f") -> str:
            return "-" if x is None else format(x, spec)

        runs = ours.get("pack_runs", "kernel")
        table.append([op + ("" if runs == "kernel" else " (ref)"), "x".join(map(str, shape)),
                      dtype, f(ours["median_ms"], ".4f"),
                      f(ours["gbps"] if is_mem else ours["tflops"], ".0f"),
                      f(ours["pct_measured_peak"], ".1f"), f(ours["pct_datasheet_peak"], ".1f"),
                      f(copy_pct, ".1f"), f(of_copy, ".1f"),
                      f(s_eager), f(s_comp), f(s_liger)])
    headers = ["op", "shape", "dtype", "ours ms", "GB/s|TFLOP/s", "% measured", "% datasheet",
               "copy % measured", "% of copy", "x eager", "x compile", "x liger"]
    lines = [f"# Suite results: {meta['device']} ({meta['hw_model']}), {meta['date']}", "",
             f"- versions: {json.dumps(meta['versions'])}",
             f"- git: {meta.get('git_rev')}",
             f"- method: {meta['method']}",
             "- copy % measured: a device copy (`Tensor.copy_`) moving the row's bytes, timed in "
             "the same interleaved run: the speed of light at that size; % of copy: ours "
             "against it (time ratio). Matmul rows: cuBLAS's matmul alone (`x @ w.t()`, no "
             "bias, no GELU) in its place", "",
             tabulate(table, headers=headers, tablefmt="github"), ""]
    gm_c, gm_l = geomean(sp_compile), geomean(sp_liger)
    lines += ["## Against the targets of issue 5", "",
              f"- geometric-mean speedup over torch.compile, memory-bound ops: "
              f"{gm_c:.2f}x over {len(sp_compile)} rows (target >= 1.5x)" if gm_c else
              "- no memory-bound rows timed against torch.compile",
              f"- geometric-mean speedup over Liger where Liger has the op: {gm_l:.2f}x over "
              f"{len(sp_liger)} rows" if gm_l else
              "- no rows timed against Liger (not installed, or no op it has)"]
    if worst_vs_liger:
        w = min(worst_vs_liger)
        lines.append(f"- worst row vs Liger: {w[0]:.3f}x ({w[1]} {'x'.join(map(str, w[2]))} "
                     f"{w[3]}; "
                     "target: never more than 3% behind, i.e. >= 0.97x)")
    lines.append("- memory-bound rows >= 64 MB under 90% of measured copy bandwidth: " +
                 ("none" if not big_misses else "; ".join(big_misses)))
    lines += [f"- {line}" for line in matmul_lines]
    lines.append("- rows where the pack runs the reference op instead of a kernel (marked (ref)): "
                 + ("none" if not refs else "; ".join(refs)))
    lines.append("- rows under 32 MB slower than some baseline: " +
                 ("none" if not small_losses else "; ".join(small_losses)))
    if unseen:
        lines += ["", *summarize_unseen(unseen)]
    return "\n".join(lines) + "\n"


def summarize_unseen(rows: list[dict[str, Any]]) -> list[str]:
    """The unseen rows' table (shapes no spec lists, timed with the pack ported at the spec's
    shapes) and issue 31's targets for them: none slower than eager, >= 85% of copy from 64 MB."""
    from tabulate import tabulate

    by_key: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_key.setdefault((r["op"], tuple(r["shape"]), r["dtype"]), {})[r["provider"]] = r
    table, slower, misses = [], [], []
    for (op, shape, dtype), prov in by_key.items():
        name = f"{op} {'x'.join(map(str, shape))} {dtype}"
        ours = prov.get("ported")
        if ours is None or ours.get("median_ms") is None:
            table.append([op, "x".join(map(str, shape)), dtype, "", "FAILED"] + [""] * 8)
            slower.append(f"{name}: failed")
            continue
        eager = (ours["speedup"].get("eager") or [None])[0]
        comp = (ours["speedup"].get("compile") or [None])[0]
        runs = ours.get("pack_runs", "kernel")
        # the kernel's own ratio: timed beside where the pack ran the reference op instead
        forced = prov.get("kernel") or {}
        kernel_eager = (eager if runs == "kernel" else
                        (forced.get("speedup", {}).get("eager") or [None])[0])
        copy = prov.get("copy") or {}
        of_copy = (100.0 * copy["median_ms"] / ours["median_ms"]
                   if copy.get("median_ms") else None)
        how = runs if runs != "kernel" else (
            "same-width bucket" if "tuned for rows this wide" in ours.get("config_basis", "")
            else "derived config" if "derived for this shape" in ours.get("config_basis", "")
            else "kernel")
        if eager is not None and eager < 1.0:
            slower.append(f"{name}: {eager:.2f}x ({how})")
        if ours["bytes_moved"] >= BIG_BYTES and of_copy is not None \
                and of_copy < UNSEEN_TARGET_PCT:
            misses.append(f"{name}: {of_copy:.1f}% ({how})")

        def f(x: float | None, spec: str = ".2f") -> str:
            return "-" if x is None else format(x, spec)

        held = ("held out" if tuple(shape) in HELD_OUT + VOCAB_HELD_OUT else
                "swept" if tuple(shape) in SWEPT else "-")
        table.append([op, "x".join(map(str, shape)), dtype, held, how, ours.get("bucket", "-"),
                      f(ours["median_ms"], ".4f"), f(ours["bytes_moved"] / 2**20, ".0f"),
                      f(ours["pct_measured_peak"], ".1f"), f(of_copy, ".1f"), f(eager),
                      f(comp), f(kernel_eager)])
    headers = ["op", "shape", "dtype", "rules", "pack ran", "nearest bucket", "ours ms", "MB",
               "% measured", "% of copy", "x eager", "x compile", "kernel x eager"]
    return [
        "## Shapes no spec lists (`--unseen`, issue 31)", "",
        "Each pack was ported only at its spec's shapes, then timed at these. \"pack ran\": "
        "the config derived for the shape by the module's own rule, a same-width bucket's "
        "config, or the reference op where the pack's measurements estimated eager faster "
        "(docs/PACKS.md, \"Shapes no bucket was ported for\"). \"kernel x eager\": the "
        "pack's kernel against eager, timed beside where the pack ran the reference op (the "
        "check of that estimate). \"rules\": \"swept\" where the launcher's unmeasured "
        "rules were swept at the shape (bench/NOTES.md item 57), \"held out\" where they "
        "were not, to check them.", "",
        tabulate(table, headers=headers, tablefmt="github"), "",
        "- unseen rows slower than eager (target: none): " +
        ("none" if not slower else "; ".join(slower)),
        f"- unseen rows >= 64 MB under {UNSEEN_TARGET_PCT:.0f}% of copy bandwidth (target: "
        "none): " + ("none" if not misses else "; ".join(misses))]


def suite_units(op: str) -> list[tuple[tuple[int, ...], Any]]:
    """The (shape, dtype) units the suite measures for an op: bf16 shapes, then fp16/fp32."""
    import torch

    cfg = OPS[op]
    units = [(s, torch.bfloat16) for s in cfg["shapes"]]
    return units + [(s, d) for s in cfg["extra_dtypes"] for d in (torch.float16, torch.float32)]


def pack_choice(choice: Any) -> dict[str, Any]:
    """What the pack ran for a row (`PackedOp.choose`): "kernel" or why the reference op ran,
    the config and where it came from, and (unseen shapes) the kernel-vs-eager estimate."""
    if choice.bucket is None:
        runs = f"reference (fallback: {choice.reason})"
    elif choice.reference_why is not None:
        runs = ("reference (pack: eager estimated faster)" if choice.unseen
                else "reference (pack: eager measured faster)")
    else:
        runs = "kernel"
    d = {"pack_runs": runs, "config": choice.config}
    if choice.unseen:
        d.update(bucket=choice.bucket["bucket"], config_basis=choice.basis,
                 estimate=choice.reference_why or choice.evidence)
    return d


def unseen_units(op: str) -> list[tuple[tuple[int, ...], Any]]:
    """The (shape, dtype) units --unseen times for an op: shapes no spec lists (none for ops
    without an UNSEEN list)."""
    import torch

    cfg = UNSEEN.get(op, {})
    return ([(s, torch.bfloat16) for s in cfg.get("shapes", [])] +
            [(s, torch.float32) for s in cfg.get("fp32", [])])


def resume_rows(rows_path: Path, meta: dict[str, Any]) -> tuple[list[dict[str, Any]], set[str]]:
    """Rows of an earlier, interrupted or partial run in the same folder, and the parts it
    finished: "<op>" when its spec rows are all there (a "ported" row for every unit),
    "<op>:unseen" when its unseen rows are. Rows of unfinished parts are dropped from the file;
    an op with some but not all spec rows runs again whole (a new port: its unseen rows go too).
    `meta` keeps the first run's date and lists each resumption."""
    if not rows_path.exists():
        return [], set()
    from harness.roofline import dtype_key  # the rows' own dtype names

    rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    done: set[str] = set()
    kept: list[dict[str, Any]] = []
    for op in sorted({r["op"] for r in rows} & set(OPS)):
        spec = [r for r in rows if r["op"] == op and not r.get("unseen")]
        extra = [r for r in rows if r["op"] == op and r.get("unseen")]
        parts = ((op, spec, suite_units(op)), (f"{op}:unseen", extra, unseen_units(op)))
        if spec and not _all_units(spec, suite_units(op), dtype_key):
            continue
        for part, part_rows, units in parts:
            if part_rows and _all_units(part_rows, units, dtype_key):
                done.add(part)
                kept += part_rows
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    old_meta = rows_path.with_name("meta.json")
    if old_meta.exists() and kept:
        first = json.loads(old_meta.read_text())
        meta["resumed"] = [*first.get("resumed", []), meta["date"]]
        meta["date"] = first.get("date", meta["date"])
    return kept, done


def _all_units(rows: list[dict[str, Any]], units: list[tuple[tuple[int, ...], Any]],
               dtype_key: Callable[[Any], str]) -> bool:
    have = {(tuple(r["shape"]), r["dtype"]) for r in rows if r["provider"] == "ported"}
    return bool(units) and {(tuple(s), dtype_key(d)) for s, d in units} <= have


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated example ops")
    ap.add_argument("--out", required=True, help="results folder (created)")
    ap.add_argument("--reps", type=int, default=50, help="timed repetitions per provider")
    ap.add_argument("--max-variants", type=int, default=8, help="port search cap per bucket")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile baseline")
    ap.add_argument("--graph", action="store_true",
                    help="CUDA-graph timing (launch-inclusive, LLC flushed only between replays); "
                         "default: events with a device-side head start and a flush every rep")
    ap.add_argument("--unseen", action="store_true",
                    help="also time each pack at shapes no spec lists (UNSEEN; rows marked "
                         "unseen, a table of their own in SUMMARY.md)")
    ap.add_argument("--unseen-only", action="store_true",
                    help="time only the unseen shapes (the port still runs at the spec's "
                         "shapes; a pack left in <out>/packs/<op> by an earlier run is reused)")
    ap.add_argument("--summary-only", action="store_true",
                    help="write SUMMARY.md from the folder's rows.jsonl and meta.json and stop "
                         "(no GPU): the summary of a run cut off before its end")
    args = ap.parse_args(argv)
    if args.summary_only:
        out = Path(args.out)
        rows = [json.loads(ln) for ln in (out / "rows.jsonl").read_text().splitlines() if ln]
        summary = summarize(rows, json.loads((out / "meta.json").read_text()))
        (out / "SUMMARY.md").write_text(summary)
        print(summary)
        return 0

    import torch

    import hwmodels
    from harness import env_info
    from harness.bench_op import bench_op
    from harness.bench_op import format_table
    from porter.packs.loader import load_pack
    from porter.port import port
    from porter.specs import load_spec

    det = hwmodels.detect()
    if det.model is None or not torch.cuda.is_available():
        print(f"the suite times kernels on a GPU; none usable here: {det.reason}", file=sys.stderr)
        return 2
    hw = det.model
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": det.device_name, "hw_model": hw.name,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "versions": env_info.versions(),
            # a copy run from `git archive` (e.g. on a GPU machine) names its commit in
            # PORTER_GIT_REV; that wins over whatever repository encloses the copy
            "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(REPO),
            "method": "harness.bench_op: providers interleaved in one process (a fresh order "
                      "every repetition), "
                      f"{'CUDA graphs' if args.graph else EVENTS_METHOD}, "
                      "LLC flushed every repetition (a buffer of 2x LLC written, then read: no "
                      "dirty lines left for the timed kernel to write back), median of "
                      f"{args.reps} reps, "
                      "random normal inputs; our kernels loaded from the pack `porter port` wrote "
                      "on this device",
            "liger": _liger_version(),
            # switches that change what the porter offers (e.g. PORTER_OFFER_TMA_WS)
            "porter_env": {k: v for k, v in sorted(os.environ.items())
                           if k.startswith("PORTER_") and k != "PORTER_GIT_REV"}}
    rows_path = out / "rows.jsonl"
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        print(f"unknown op(s) {', '.join(unknown)}; the suite has {', '.join(OPS)}",
              file=sys.stderr)
        return 2
    all_rows, done = resume_rows(rows_path, meta)
    if done:
        print(f"resuming {out}: {', '.join(sorted(done))} already measured "
              f"(first run {meta['date']}); their rows are kept", flush=True)
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    unseen = args.unseen or args.unseen_only
    t0 = time.time()
    for op in ops:
        spec_units = [] if args.unseen_only or op in done else suite_units(op)
        extra_units = (unseen_units(op) if unseen and f"{op}:unseen" not in done else [])
        if unseen and not unseen_units(op):
            print(f"{op}: no unseen shapes listed for it (UNSEEN)", flush=True)
        if not spec_units and not extra_units:
            continue
        cfg = OPS[op]
        spec_path = REPO / "examples" / op / "spec.py"
        spec = load_spec(spec_path)
        pack_dir = out / "packs" / op
        if not spec_units and (pack_dir / "manifest.yaml").exists():
            # the spec rows (or an earlier --unseen-only run) already used this port's pack
            print(f"[{time.time() - t0:6.0f}s] {op}: reusing the pack {pack_dir}", flush=True)
            packed = load_pack(pack_dir)
        else:
            units = suite_units(op)
            print(f"[{time.time() - t0:6.0f}s] {op}: porting for {hw.name} "
                  f"({len(units)} shape x dtype units)", flush=True)
            result = port(spec_path, [hw.name], out / "packs", run_dir=out / "runs" / op,
                          max_variants=cfg.get("max_variants", args.max_variants),
                          units=units, progress=lambda line: print("   ", line, flush=True))
            packed = load_pack(result.pack_path)
        # Every provider allocates its own outputs (the plain calling convention): a pack that
        # runs the reference for a bucket then costs exactly the reference, no extra copy.
        providers: dict[str, Callable[..., Any]] = {"ported": lambda *a, _p=packed: _p(*a),
                                                    "eager": spec.reference}
        if not args.no_compile:
            providers["compile"] = torch.compile(spec.reference)
        lig = liger_provider(op)
        problem = spec.problem()
        # Unseen rows: eager and torch.compile only (issue 31), which keeps them cheap (Liger
        # compiles its kernels for every new width).
        for units, is_unseen in ((spec_units, False), (extra_units, True)):
            unit_providers = dict(providers)
            if lig is not None and not is_unseen:
                unit_providers["liger"] = lig
            baselines = [p for p in unit_providers if p != "ported"]
            for shape, dtype in units:
                probe = problem.make_inputs(shape, dtype, torch.device("cuda"),
                                            torch.Generator("cuda"))
                choice = packed.choose(*probe)
                del probe
                timed = dict(unit_providers)
                if is_unseen and choice.bucket is not None and choice.reference_why:
                    # what the kernel would have done where the pack ran eager: the check of
                    # its estimate (docs/PACKS.md)
                    timed["kernel"] = lambda *a, _p=packed: _p.force_kernel(*a)
                if op in MEMORY_BOUND:
                    timed["copy"] = copy_provider(problem, shape, dtype)
                else:
                    timed["matmul_alone"] = matmul_alone_provider()
                rows = bench_op(problem, timed, hw=hw, shapes=[shape], dtypes=[dtype],
                                reps=args.reps, baselines=baselines, graph=bool(args.graph))
                print(format_table(rows), flush=True)
                with rows_path.open("a") as fh:
                    for r in rows:
                        d = row_dict(r)
                        if is_unseen:
                            d["unseen"] = True
                        if r.provider == "ported":
                            d.update(pack_choice(choice))
                        all_rows.append(d)
                        fh.write(json.dumps(d) + "\n")
        torch.compiler.reset()
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": all_rows}, indent=1))
    with (out / "results.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["device", "op", "provider", "shape", "dtype", "median_ms", "p20_ms", "p80_ms",
                    "gbps", "tflops", "pct_measured", "pct_datasheet", "speedups"])
        for r in all_rows:
            w.writerow([hw.name, r["op"], r["provider"], "x".join(map(str, r["shape"])),
                        r["dtype"], r["median_ms"], r["p20_ms"], r["p80_ms"], r["gbps"],
                        r["tflops"], r["pct_measured_peak"], r["pct_datasheet_peak"],
                        json.dumps(r["speedup"])])
    summary = summarize(all_rows, meta)
    (out / "SUMMARY.md").write_text(summary)
    print(summary)
    return 0


def _liger_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("liger-kernel")
    except Exception:  # noqa: BLE001 - not installed
        return None


if __name__ == "__main__":
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    raise SystemExit(main())
