"""The user's kernel as shipped vs retuned by the porter vs the porter's generated kernel, on the
GPU this runs on (issue 35).

    python -m bench.user_kernels --out results/<gpu>-<date>-user-kernels/

For each kernel nobody here wrote (Liger-Kernel's RMSNorm, LayerNorm and SwiGLU forward, by
import path, and the tutorial-style persistent softmax in examples/softmax_tutorial) at a shape
where its shipped config is weak (Liger's LayerNorm at row width 32768 ran at about a quarter of
copy bandwidth on an H100 in the suite) and one where it is strong:

1. `porter port` on this GPU (measured tier) for that one shape and dtype: the ledger has the
   shipped config, every retuned config judged and the generated kernels, each measured;
2. the three timed again interleaved in one process (`harness.timing.compare`: LLC flushed
   every repetition, a fresh order each repetition, median of REPS): shipped
   (``{"origin": "existing"}``), the best retuned config, and the pack the port wrote;
3. the retuned kernel is the faster of the best retuned config and shipped by that interleaved
   timing, so it is never slower than shipped; the summary says which of the three the pack keeps
   and why (the ledger's reason).

GB/s from the spec's BYTES (bytes that must move) over the median time, and % of the hardware
model's datasheet bandwidth. Writes summary.md and rows.json into --out. Needs a GPU: without one
it says so in one line and exits 2. (Written 2026-11-26 with no GPU time left; not yet run.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
# (spec, shape, why it is here): the weak shape first, then a strong one
SWEEP: list[tuple[Path, tuple[int, int], str]] = [
    (EX / "liger" / "layernorm.py", (4096, 32768), "weak: ~25% of copy bandwidth on an H100"),
    (EX / "liger" / "layernorm.py", (4096, 4096), "strong"),
    (EX / "liger" / "rmsnorm.py", (4096, 32768), "wide row"),
    (EX / "liger" / "rmsnorm.py", (16384, 4096), "strong"),
    (EX / "liger" / "swiglu.py", (4096, 14336), "Llama-3 8B MLP width"),
    (EX / "softmax_tutorial" / "spec.py", (4096, 32768), "wide row, persistent grid"),
    (EX / "softmax_tutorial" / "spec.py", (8192, 4096), "strong"),
]
REPS = 50
MAX_VARIANTS = 8


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="results folder (default results/<gpu>-<date>-user-kernels)")
    parser.add_argument("--dtype", default="bf16", help="dtype of every row (default bf16)")
    parser.add_argument("--only", default="", help="comma-separated spec stems to run")
    parser.add_argument("--reps", type=int, default=REPS)
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("bench.user_kernels: needs a GPU (torch.cuda.is_available() is False); the CPU "
              "tiers of the same ports run in tests/porter/test_user_kernels.py")
        return 2
    import hwmodels
    from targets.dtypes import torch_dtype

    det = hwmodels.detect()
    if det.model is None:
        print(f"bench.user_kernels: this GPU has no hardware model: {det.reason}")
        return 2
    hw = det.model
    dtype = torch_dtype(args.dtype)
    out = args.out or ROOT / "results" / f"{hw.name}-{time.strftime('%Y-%m-%d')}-user-kernels"
    out.mkdir(parents=True, exist_ok=True)
    only = {s for s in args.only.split(",") if s}
    rows = []
    for spec_path, shape, why in SWEEP:
        stem = spec_path.stem if spec_path.stem != "spec" else spec_path.parent.name
        if only and stem not in only:
            continue
        row = bench_one(spec_path, shape, dtype, hw, out, args.reps)
        row["why"] = why
        rows.append(row)
        print(_line(row), flush=True)
    (out / "rows.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")
    (out / "summary.md").write_text(summary(rows, hw, args.dtype))
    print(f"wrote {out / 'summary.md'}")
    bad = [r for r in rows if r.get("retuned_ms") and r.get("shipped_ms")
           and r["retuned_ms"] > r["shipped_ms"]]
    return 1 if bad else 0


def bench_one(spec_path: Path, shape: tuple[int, int], dtype: Any, hw: Any, out: Path,
              reps: int) -> dict[str, Any]:
    """Port at one shape on this GPU, then time shipped, retuned and the pack interleaved."""
    import torch

    from harness import timing
    from porter import user_report
    from porter.packs.loader import load_pack
    from porter.port import port
    from porter.specs import load_spec
    from porter.user_kernel import SHIPPED
    from porter.user_kernel import launch_user

    spec = load_spec(spec_path)
    run = out / "runs" / f"{spec.name}-{shape[0]}x{shape[1]}"
    res = port(spec_path, [hw.name], out / "packs", run_dir=run, units=[(shape, dtype)],
               max_variants=MAX_VARIANTS, progress=lambda line: None)
    (status,) = user_report.statuses(res) or [None]
    unit = status.rows[0] if status is not None and status.rows else None
    row: dict[str, Any] = {"op": spec.name, "shape": list(shape), "dtype": str(dtype),
                           "device": hw.name, "user_kernel": status.state if status else "none",
                           "why_not": status.why if status else ""}
    if unit is None:
        return row
    retuned_cfg = unit.retuned.config if unit.retuned is not None else dict(SHIPPED)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = spec.make_inputs(shape, dtype, torch.device("cuda"), gen)
    launcher = spec.triton_launcher
    op = load_pack(res.pack_path, device=hw.name) if res.pack_path is not None else None
    providers = {"shipped": lambda *a: launch_user(launcher, a, None, SHIPPED),
                 "retuned": lambda *a: launch_user(launcher, a, None, retuned_cfg)}
    if op is not None:
        providers["pack"] = lambda *a: op(*a)
    cmp = timing.compare(providers, lambda: tuple(inputs), hw=hw, reps=reps)
    nbytes = int(spec.bytes_moved(inputs, None)) if spec.bytes_moved else None
    peak = hw.memory.bandwidth_gbps.value
    for name, t in cmp.timings.items():
        row[f"{name}_ms"] = t.median_ms
        row[f"{name}_p20_ms"], row[f"{name}_p80_ms"] = t.p20_ms, t.p80_ms
        if nbytes:
            gbs = nbytes / (t.median_ms * 1e-3) / 1e9
            row[f"{name}_gbps"], row[f"{name}_pct_peak"] = gbs, 100 * gbs / peak
    # never slower than shipped: where the best retuned config lost the interleaved timing,
    # the retuned kernel is the shipped one
    if row.get("retuned_ms", 0) > row.get("shipped_ms", float("inf")):
        row["retuned_config"] = dict(SHIPPED)
        row["retuned_note"] = "retuned config lost the interleaved timing; shipped kept"
        for k in ("ms", "p20_ms", "p80_ms", "gbps", "pct_peak"):
            if f"shipped_{k}" in row:
                row[f"retuned_{k}"] = row[f"shipped_{k}"]
    else:
        row["retuned_config"] = retuned_cfg
    row["generated"] = unit.generated.text() if unit.generated is not None else "-"
    row["pack_keeps"] = unit.kept_origin or "nothing"
    row["pack_config"] = unit.kept_config
    row["why_kept"] = unit.why_kept
    return row


def _line(r: dict[str, Any]) -> str:
    def t(name: str) -> str:
        ms = r.get(f"{name}_ms")
        pct = r.get(f"{name}_pct_peak")
        return "-" if ms is None else f"{ms * 1e3:.1f} us" + (f" ({pct:.0f}%)" if pct else "")

    return (f"{r['op']} {r['shape'][0]}x{r['shape'][1]}: shipped {t('shipped')}, retuned "
            f"{t('retuned')}, pack {t('pack')} keeps {r.get('pack_keeps', '-')}")


def summary(rows: list[dict[str, Any]], hw: Any, dtype: str) -> str:
    lines = [f"# The user's kernel: shipped vs retuned vs generated ({hw.full_name}, {dtype})", "",
             ("Medians of interleaved timings (harness.timing.compare); % of the datasheet "
              "bandwidth from the spec's BYTES."), "",
             "| op | shape | why | shipped | retuned (config) | pack | pack keeps | why |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def cell(name: str, r: dict[str, Any] = r) -> str:
            ms = r.get(f"{name}_ms")
            if ms is None:
                return "-"
            pct = r.get(f"{name}_pct_peak")
            return f"{ms * 1e3:.1f} us" + (f", {pct:.0f}%" if pct else "")

        cfg = {k: v for k, v in (r.get("retuned_config") or {}).items() if k != "origin"}
        lines.append(f"| {r['op']} | {r['shape'][0]}x{r['shape'][1]} | {r.get('why', '')} | "
                     f"{cell('shipped')} | {cell('retuned')} ({cfg or 'as shipped'}) | "
                     f"{cell('pack')} | {r.get('pack_keeps', '-')} | "
                     f"{' '.join(str(r.get('why_kept', r.get('why_not', ''))).split())} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
