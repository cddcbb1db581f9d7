"""The default port's budget against the exhaustive search, per example op, on the local GPU.

For every example op (examples/<op>/spec.py) it runs `porter.port.port(spec, [this device])`
twice: once with the default budget (what `porter port` does without options) and once
exhaustive (`exhaustive=True`, every valid candidate). It records each port's wall time and, per
(bucket, dtype), the kept kernel's measured median time in both, and reports per op

    default time s | exhaustive time s | kept kernel time default/exhaustive: worst, geomean

(a ratio over 1: the default kept a slower kernel than the full search found). The kept times
come from each port's own final timing (DEVICE_REPS repetitions beside eager, in the same
process as that port), so two equal configs can differ by a percent of run-to-run noise; the
"same config" column says how many buckets kept the very same config.

GPU time is scarce, so:
- every op's row goes to `<out>/rows.jsonl` as soon as it is measured, and `<out>/SUMMARY.md`
  is rewritten after each op: an interrupted run keeps what it measured, and running the same
  command again skips the ops already there;
- `--ops rmsnorm,softmax` limits the ops, `--exhaustive-ops rmsnorm` the ops searched
  exhaustively (default: all of --ops), `--dtypes bf16` and `--max-shapes 3` the units;
- `--max-exhaustive-s 900` stops an exhaustive port that runs longer, at the end of the
  (bucket, dtype) unit in progress (its ledger is kept in
  `<out>/runs/<op>-exhaustive/`, so the same command continues it where it stopped; the row is
  written only once it finished).

    python bench/port_budget.py --out results/port-budget-h100 [--ops rmsnorm,softmax]
    python -m bench.port_budget --out ...           # the same, from the repository root
    python bench/port_budget.py --out DIR --summary-only   # SUMMARY.md from DIR's rows (no GPU)

Each machine call is limited in time: give each call a few ops (`--ops`), keep the exhaustive
units small (`--dtypes bf16 --max-shapes 4 --max-exhaustive-s 150`), bring back `rows.jsonl` and
`meta.json`, join the rows.jsonl files and run `--summary-only` on the joined folder.

On a machine without a GPU it says so in one line and exits 2 (the CPU tier's ports are
projected, not timed: there is nothing to compare).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script (python bench/port_budget.py), like suite.py
    sys.path.insert(0, str(REPO))

DTYPE_NAMES = ("bf16", "fp16", "fp32")


class _Overtime(Exception):
    """An exhaustive port ran past --max-exhaustive-s (raised from its progress callback)."""


def example_ops() -> list[str]:
    """Every example op with a spec (examples/<op>/spec.py), in name order."""
    return sorted(p.parent.name for p in (REPO / "examples").glob("*/spec.py"))


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def units_of(spec: Any, dtypes: list[str], max_shapes: int | None) -> list[tuple[Any, Any]]:
    """The (shape, torch dtype) pairs to port: the spec's shapes (the first `max_shapes`) x its
    dtypes (those named in `dtypes`; all when empty)."""
    from porter.planner import dtype_name

    shapes = [tuple(s) for s in spec.shapes][: max_shapes or None]
    kept = [d for d in spec.dtypes if not dtypes or dtype_name(d) in dtypes]
    return [(s, d) for s in shapes for d in kept]


def kept_times(result: Any) -> dict[str, dict[str, Any]]:
    """Per "bucket/dtype": the kept kernel's config and measured median time (ms)."""
    out: dict[str, dict[str, Any]] = {}
    for target in result.targets:
        for c in target.choices:
            out[f"{c.bucket}/{c.dtype}"] = {"config": c.config, "time_ms": c.numbers.get("time_ms"),
                                            "label": c.numbers.get("label"), "tier": c.tier}
    return out


def run_port(spec_path: Path, target: str, run_dir: Path, units: list[Any], *, exhaustive: bool,
             max_s: float | None, log: Any) -> dict[str, Any]:
    """One port; returns its wall time, candidates judged, kept times, and whether it finished."""
    from porter.port import port

    t0 = time.perf_counter()

    def progress(line: str) -> None:
        log(line)
        # checked after each (bucket, dtype) unit ("[h100] 3/8 ..."), except the last one
        unit = re.search(r"\] (\d+)/(\d+) ", line)
        if (max_s is not None and unit is not None and unit.group(1) != unit.group(2)
                and time.perf_counter() - t0 > max_s):
            raise _Overtime

    try:
        result = port(spec_path, [target], None, run_dir=run_dir, exhaustive=exhaustive,
                      units=units, progress=progress)
    except _Overtime:
        return {"finished": False, "wall_s": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    return {"finished": True, "wall_s": wall, "budget": result.budget,
            "judged": sum(1 for _ in _ledger_entries(run_dir)), "kept": kept_times(result),
            "missing": [t.target for t in result.missing]}


def _ledger_entries(run_dir: Path) -> list[Any]:
    from porter.ledger import Ledger

    return list(Ledger(run_dir / "ledger.jsonl"))


def compare(default: dict[str, Any], exhaustive: dict[str, Any] | None) -> dict[str, Any]:
    """Worst and geomean of kept-kernel time default/exhaustive over the common buckets."""
    if exhaustive is None or not exhaustive.get("finished"):
        return {}
    ratios, same = [], 0
    for key, d in default["kept"].items():
        e = exhaustive["kept"].get(key)
        if e is None or not d.get("time_ms") or not e.get("time_ms"):
            continue
        ratios.append(d["time_ms"] / e["time_ms"])
        same += d["config"] == e["config"]
    if not ratios:
        return {}
    return {"worst": max(ratios), "geomean": geomean(ratios), "buckets": len(ratios),
            "same_config": same}


def summarize(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    from tabulate import tabulate

    table = []
    for r in rows:
        cmp = r.get("compare") or {}
        ex = r.get("exhaustive") or {}
        table.append([
            r["op"], r["units"], f"{r['default']['wall_s']:.0f}", r["default"].get("judged", ""),
            f"{ex['wall_s']:.0f}" if ex.get("finished") else (ex.get("note") or "-"),
            ex.get("judged", "") if ex.get("finished") else "",
            f"{cmp['worst']:.3f}" if cmp else "-", f"{cmp['geomean']:.3f}" if cmp else "-",
            f"{cmp['same_config']}/{cmp['buckets']}" if cmp else "-"])
    v = meta.get("versions", {})
    lines = [
        f"# Default port budget vs exhaustive search ({meta['device']})",
        "",
        (f"- device: {meta['device']} (hw model {meta['hw_model']}); torch {v.get('torch')}, "
         f"triton {v.get('triton')}, python {v.get('python')}; git {meta.get('git_rev')}; "
         f"{meta['date']}"),
        f"- default: {meta.get('budget', '?')}",
        ("- ratio: the kept kernel's measured median time with the default budget over the "
         "exhaustive search's, per (bucket, dtype) (over 1: the default kept a slower kernel); "
         "each from its own port's final timing, so equal configs differ by run-to-run noise"),
        "",
        tabulate(table, headers=["op", "units", "default s", "judged", "exhaustive s", "judged",
                                 "worst ratio", "geomean ratio", "same config"],
                 tablefmt="github", disable_numparse=True),  # keep "1.000" as written
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="results folder (created; rerun to continue)")
    ap.add_argument("--ops", default="", help="comma-separated example ops (default: all)")
    ap.add_argument("--exhaustive-ops", default=None,
                    help="ops also ported exhaustively (default: every op of --ops; '' for none)")
    ap.add_argument("--dtypes", default="", help=f"limit the dtypes ({', '.join(DTYPE_NAMES)})")
    ap.add_argument("--max-shapes", type=int, default=None, help="only each spec's first N shapes")
    ap.add_argument("--max-exhaustive-s", type=float, default=None,
                    help="stop an exhaustive port after this many seconds (rerun to continue it)")
    ap.add_argument("--summary-only", action="store_true",
                    help="write SUMMARY.md from the folder's rows.jsonl and meta.json and stop "
                         "(no GPU): e.g. after joining the rows.jsonl of several machine calls")
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
    from porter.specs import load_spec

    known = example_ops()
    ops = [o.strip() for o in args.ops.split(",") if o.strip()] or known
    exhaustive_ops = ops if args.exhaustive_ops is None else [
        o.strip() for o in args.exhaustive_ops.split(",") if o.strip()]
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    bad = [o for o in {*ops, *exhaustive_ops} if o not in known] + [
        d for d in dtypes if d not in DTYPE_NAMES]
    if bad:
        print(f"unknown op(s) or dtype(s) {', '.join(sorted(bad))}; ops: {', '.join(known)}; "
              f"dtypes: {', '.join(DTYPE_NAMES)}", file=sys.stderr)
        return 2
    det = hwmodels.detect()
    if det.model is None or not torch.cuda.is_available():
        print(f"bench/port_budget.py times ports on a GPU; none usable here: {det.reason}",
              file=sys.stderr)
        return 2

    hw = det.model
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    rows = [json.loads(ln) for ln in rows_path.read_text().splitlines() if ln] if (
        rows_path.exists()) else []
    done = {r["op"] for r in rows}
    meta = {"device": det.device_name, "hw_model": hw.name,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "versions": env_info.versions(),
            "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(REPO),
            "args": vars(args)}
    t_start = time.perf_counter()

    def log(line: str) -> None:
        print(f"[{time.perf_counter() - t_start:6.0f}s]   {line}", flush=True)

    for op in ops:
        if op in done:
            print(f"{op}: already in {rows_path}; skipped", flush=True)
            continue
        spec_path = REPO / "examples" / op / "spec.py"
        units = units_of(load_spec(spec_path), dtypes, args.max_shapes)
        # the default port's numbers are kept apart until the op's row is final: rerun to
        # continue an exhaustive port, the default one is not redone (a resumed port's wall time
        # would be that of reading its ledger)
        saved = out / "runs" / f"{op}-default.json"
        if saved.exists():
            default = json.loads(saved.read_text())
            print(f"{op}: default port from {saved}", flush=True)
        else:
            print(f"{op}: {len(units)} shape x dtype units, default budget", flush=True)
            default = run_port(spec_path, hw.name, out / "runs" / f"{op}-default", units,
                               exhaustive=False, max_s=None, log=log)
            saved.write_text(json.dumps(default, default=str))
        meta["budget"] = default.get("budget")
        row: dict[str, Any] = {"op": op, "units": len(units), "default": default}
        if op in exhaustive_ops:
            print(f"{op}: exhaustive", flush=True)
            row["exhaustive"] = run_port(spec_path, hw.name, out / "runs" / f"{op}-exhaustive",
                                         units, exhaustive=True, max_s=args.max_exhaustive_s,
                                         log=log)
            if not row["exhaustive"]["finished"]:
                row["exhaustive"]["note"] = (f"stopped at {args.max_exhaustive_s:.0f} s "
                                             "(rerun to continue)")
                print(f"{op}: exhaustive port stopped at --max-exhaustive-s; its ledger is kept, "
                      "the same command continues it", flush=True)
        row["compare"] = compare(default, row.get("exhaustive"))
        if "exhaustive" in row and not row["exhaustive"]["finished"]:
            # not final: the row is written once the exhaustive port has finished
            rows_now = [*rows, row]
        else:
            rows.append(row)
            with rows_path.open("a") as fh:
                fh.write(json.dumps(row, default=str) + "\n")
            rows_now = rows
        (out / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
        summary = summarize(rows_now, meta)
        (out / "SUMMARY.md").write_text(summary)
        print(summary, flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    raise SystemExit(main())
