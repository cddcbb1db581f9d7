"""Probe: does a kernel time the same through its pack as when the port timed it?

bench/NOTES.md item 19: the port timed softmax 4097x1537 at 14.3 us on an H200, and the suite,
minutes later, timed the pack's kernel (same config) at 15.7 us. This ports one example op for
one shape on this GPU (as bench/suite.py does), then times, interleaved: the pack's callable
(`porter.load_pack`), the bucket's module called directly with its config (what the port
times), Liger-Kernel where it has the op, and a device copy of the same bytes; once through
`harness.timing.compare` (the port's way) and once through `harness.bench_op` (the suite's),
each `--rounds` times.

    python bench/probe_pack_overhead.py --op softmax --shape 4097x1537 --out /tmp/pack_probe
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
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    import hwmodels
    from harness.bench_op import bench_op
    from harness.timing import compare
    from porter.codegen import load_generated_module
    from porter.loader import load_pack
    from porter.port import port
    from porter.spec import load_spec
    from suite import copy_provider
    from suite import liger_provider

    hw = hwmodels.detect().model
    shape = tuple(int(s) for s in args.shape.split("x"))
    dtype = torch.bfloat16
    spec_path = REPO / "examples" / args.op / "spec.py"
    spec = load_spec(spec_path)
    problem = spec.problem()
    args.out.mkdir(parents=True, exist_ok=True)
    result = port(spec_path, [hw.name], args.out / "packs", run_dir=args.out / "run",
                  max_variants=8, units=[(shape, dtype)], progress=lambda line: print(" ", line))
    packed = load_pack(result.pack_path)
    dev = torch.device("cuda")
    probe = problem.make_inputs(shape, dtype, dev, torch.Generator(dev))
    choice = packed.choose(*probe)
    assert choice.bucket is not None and choice.runs_kernel, choice.reason
    config = choice.bucket.get("config")
    source = (Path(result.pack_path) / choice.bucket["file"]).read_text()
    module = load_generated_module(source, f"probe_{args.op}", interpret=False)
    providers = {"pack": lambda *a: packed(*a),
                 "module": lambda *a: module.launch(*a, config=config),
                 "copy": copy_provider(problem, shape, dtype)}
    lig = liger_provider(args.op)
    if lig is not None:
        providers["liger"] = lig
    print(f"{hw.name} {args.op} {shape} bf16, bucket config {config}")

    def make_args() -> tuple:
        return tuple(problem.make_inputs(shape, dtype, dev, torch.Generator(dev)))

    results = []
    for r in range(args.rounds):
        cmp = compare(providers, make_args, hw=hw, reps=args.reps, warmup=3, graph=False)
        row = {"round": r, "way": "compare",
               **{n: cmp.timings[n].median_ms * 1e3 for n in providers}}
        results.append(row)
        print(json.dumps(row), flush=True)
        rows = bench_op(problem, providers, hw=hw, shapes=[shape], dtypes=[dtype], reps=args.reps,
                        graph=False)
        row = {"round": r, "way": "bench_op", **{b.provider: b.median_ms * 1e3 for b in rows}}
        results.append(row)
        print(json.dumps(row), flush=True)
    (args.out / "probe_pack_overhead.json").write_text(json.dumps(
        {"device": hw.name, "op": args.op, "shape": shape, "config": config,
         "us": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
