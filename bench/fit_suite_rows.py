"""Fixed cost and streaming rate of one op from a suite run: time = fixed + bytes / bandwidth.

Reads a suite's rows.jsonl (bench/suite.py) and fits, per provider, a least-squares line through
the op's memory-bound rows of at least --min-mb moved (the fit of bench/probe_copy_size.py), so
that "slower than a copy" can be split into a lower rate and a larger fixed cost per call
(bench/NOTES.md item 37: cross-entropy on the H200).

    python bench/fit_suite_rows.py results/h200-2026-11-24-run7/rows.jsonl --op cross_entropy
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.probe_copy_size import fit  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=Path, help="a suite's rows.jsonl")
    ap.add_argument("--op", required=True)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--min-mb", type=float, default=64.0, help="rows moving at least this")
    args = ap.parse_args(argv)

    points: dict[str, list[tuple[float, float]]] = {}
    for line in args.rows.read_text().splitlines():
        r = json.loads(line)
        if (r.get("op") == args.op and r.get("dtype") == args.dtype and r.get("error") is None
                and r.get("bound") == "memory" and r["bytes_moved"] >= args.min_mb * 2**20):
            points.setdefault(r["provider"], []).append((r["bytes_moved"], r["median_ms"] * 1e3))
    if not points:
        raise SystemExit(f"{args.rows}: no {args.op} {args.dtype} rows of >= {args.min_mb} MB")
    print(f"{args.op} {args.dtype}, rows >= {args.min_mb:g} MB of {args.rows}:")
    for provider, pts in sorted(points.items()):
        if len(pts) < 2:
            print(f"  {provider:<10} {len(pts)} row: no fit")
            continue
        fixed, gbps = fit(pts)
        print(f"  {provider:<10} {len(pts)} rows: fixed {fixed:5.2f} us, {gbps:6.0f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
