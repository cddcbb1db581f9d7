"""Shapes a pack was not ported for, before and after `porter pack tune` (issue 46).

    python -m bench.tuned_shapes --out results/<device>-<date>-tuned [--op softmax]

On the GPU it runs on: ports the op at a few of its spec's shapes (bf16), then at shapes no
bucket has (UNSEEN, the issue's softmax rows) times the pack as loaded (a derived or neighbour's
config, or eager where its estimate says so) beside eager and a same-size device copy; tunes
those shapes (`PackedOp.tune`, what `porter pack tune` runs, default bounds); loads the pack
again, which reads the tuning cache, and times it the same way. Device times: harness.timing
(CUDA events, LLC flushed, median); call times: harness.timing.call_time (back to back).
Writes `rows.jsonl` and `SUMMARY.md`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

PORTED = [(4096, 4096), (16384, 8192), (4096, 32768), (4096, 128256)]
UNSEEN = [(8192, 1000), (2048, 50257), (65536, 512)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tuned_shapes")
    ap.add_argument("--out", required=True)
    ap.add_argument("--op", default="softmax")
    args = ap.parse_args(argv)

    import torch

    import hwmodels
    from bench.suite import copy_provider
    from harness import env_info
    from harness.timing import call_time
    from harness.timing import compare
    from porter.packs.loader import load_pack
    from porter.port import port
    from porter.specs import load_spec

    det = hwmodels.detect()
    if det.model is None or not torch.cuda.is_available():
        print(f"needs a GPU: {det.reason}", file=sys.stderr)
        return 2
    hw = det.model
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "tuning-cache"
    spec_path = REPO / "examples" / args.op / "spec.py"
    spec = load_spec(spec_path)
    problem = spec.problem()
    result = port(spec_path, [hw.name], out / "packs", run_dir=out / "runs",
                  units=[(s, torch.bfloat16) for s in PORTED], progress=lambda line: None)
    copy_pct = hw.measured_value("copy_bandwidth_gbps")
    rows: list[dict[str, Any]] = []

    def measure(label: str, packed: Any) -> None:
        for shape in UNSEEN:
            gen = torch.Generator("cuda").manual_seed(1)

            def make_args(_s: tuple[int, int] = shape, _g: Any = gen) -> tuple[Any, ...]:
                return tuple(problem.make_inputs(_s, torch.bfloat16, torch.device("cuda"), _g))

            cmp = compare({"pack": lambda *a: packed(*a), "eager": spec.reference,
                           "copy": copy_provider(problem, shape, torch.bfloat16)}, make_args,
                          hw=hw, reps=30, graph=False)
            x = make_args()
            nbytes = 2 * x[0].numel() * x[0].element_size()
            row = {"when": label, "shape": list(shape), "dtype": "bf16",
                   "ran": packed.describe(*x).splitlines()[1]}
            for name, t in cmp.timings.items():
                row[f"{name}_us"] = round(t.median_ms * 1e3, 2)
            row["pack_pct_of_measured_copy"] = round(
                nbytes / (row["pack_us"] * 1e-6) / 1e9 / copy_pct * 100, 1)
            row["eager_pct_of_measured_copy"] = round(
                nbytes / (row["eager_us"] * 1e-6) / 1e9 / copy_pct * 100, 1)
            row["pack_call_us"] = round(call_time(packed, x).call_us, 2)
            row["eager_call_us"] = round(call_time(spec.reference, x).call_us, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)

    measure("before tuning", load_pack(result.pack_path, tuning_cache=cache))
    tuner = load_pack(result.pack_path, tuning_cache=cache)
    for t in tuner.tune(list(UNSEEN), ["bf16"], progress=lambda line: print("  ", line)):
        print(f"tuned {t.shape}: {t.runs} {t.config} ({t.describe()})", flush=True)
    measure("after tuning", load_pack(result.pack_path, tuning_cache=cache))
    # a cache hit against an exact bucket: the call cost of the tuned path itself
    tuned = load_pack(result.pack_path, tuning_cache=cache)
    hit = tuple(problem.make_inputs(UNSEEN[0], torch.bfloat16, torch.device("cuda"),
                                    torch.Generator("cuda")))
    exact = tuple(problem.make_inputs(PORTED[0], torch.bfloat16, torch.device("cuda"),
                                      torch.Generator("cuda")))
    cost = {"cache_hit_cpu_us": round(call_time(lambda: tuned(*hit), ()).cpu_us, 2),
            "exact_bucket_cpu_us": round(call_time(lambda: tuned(*exact), ()).cpu_us, 2),
            "eager_cpu_us_at_hit_shape": round(call_time(lambda: spec.reference(*hit),
                                                         ()).cpu_us, 2)}
    print(json.dumps(cost), flush=True)
    meta = {"device": det.device_name, "hw_model": hw.name, "versions": env_info.versions(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(REPO),
            "ported_at": PORTED, "measured_copy_gbps": copy_pct}
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = [f"# Unseen shapes before and after `porter pack tune`: {args.op}, {hw.name}", "",
             json.dumps(meta), "", "| when | shape | pack us | eager us | copy us | pack % of "
             "copy | eager % | pack call us | eager call us | ran |", "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['when']} | {'x'.join(map(str, r['shape']))} | {r['pack_us']} | "
                     f"{r['eager_us']} | {r['copy_us']} | {r['pack_pct_of_measured_copy']} | "
                     f"{r['eager_pct_of_measured_copy']} | {r['pack_call_us']} | "
                     f"{r['eager_call_us']} | {r['ran']} |")
    lines += ["", f"Call cost (CPU us, back to back): {json.dumps(cost)}", ""]
    (out / "SUMMARY.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
