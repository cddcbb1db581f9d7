"""Probe: does a provider's time depend on which provider ran just before it?

bench/NOTES.md items 19 and 21: one kernel measured 15.1-15.6 us in some interleaved runs and
16.4 us in others, and Liger's softmax 14.1 us in the suite and 15.9 us in a probe, with the
order of the interleaved providers as the one visible difference. Here each provider appears
twice in one `harness.timing.compare` run, at positions with different predecessors, so the
same callable is timed in two neighbourhoods side by side; then once more with the order
shuffled every repetition (`shuffle=True`).

    python bench/probe_order.py --op softmax --shape 4097x1537 --out /tmp/order
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import torch  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="softmax", help="example op (examples/<op>/spec.py)")
    ap.add_argument("--shape", default="4097x1537")
    ap.add_argument("--config", default='{"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 2048, '
                    '"num_warps": 8}', help="config of the generated kernel (JSON)")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import hwmodels
    from harness.timing import compare
    from porter.codegen import load_generated_module
    from suite import copy_provider
    from suite import liger_provider
    from sweep import generated

    hw = hwmodels.detect().model
    shape = tuple(int(s) for s in args.shape.split("x"))
    dtype = torch.bfloat16
    spec, gen_op = generated(args.op)
    problem = spec.problem()
    module = load_generated_module(gen_op.triton_module_source(), f"order_{args.op}",
                                   interpret=False)
    config = json.loads(args.config)
    ours = lambda *a: module.launch(*a, config=config)  # noqa: E731
    copy = copy_provider(problem, shape, dtype)
    liger = liger_provider(args.op)
    if liger is None:
        print(f"Liger-Kernel has no {args.op} here (not installed?): its two slots are left out")
    dev = torch.device("cuda")

    def make_args() -> tuple:
        return tuple(problem.make_inputs(shape, dtype, dev, torch.Generator(dev)))

    # each callable twice, with different predecessors (the order is cyclic across reps)
    providers = {"ours_a": ours, "copy_a": copy, "liger_a": liger,
                 "ours_b": ours, "liger_b": liger, "copy_b": copy}
    providers = {name: fn for name, fn in providers.items() if fn is not None}
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for shuffle in (False, True):
        cmp = compare(providers, make_args, hw=hw, reps=args.reps, warmup=3, graph=False,
                      shuffle=shuffle)
        row = {n: round(cmp.timings[n].median_ms * 1e3, 2) for n in providers}
        results["shuffled" if shuffle else "fixed"] = row
        print(f"{hw.name} {args.op} {shape} order {'shuffled' if shuffle else 'fixed'}: "
              f"{json.dumps(row)}", flush=True)
    (args.out / "probe_order.json").write_text(json.dumps(
        {"device": hw.name, "op": args.op, "shape": shape, "config": config,
         "order": list(providers), "us": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
