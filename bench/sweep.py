"""Sweep: time every config of the porter's variant space for a few (op, shape, dtype) cases.

The porter's own search tries a capped number of candidates per shape; this script times the
whole pruned space (or a filtered part of it) side by side, so that what wins can be turned into
the porter's defaults and search order (issue 5: "what you learn ... goes back into the
porter's search"). It is a measuring tool, not a source of kernels: every config it times is one
`porter/codegen/variants.py` offers.

    python -m bench.sweep --cases softmax:8192x5120:bf16,gelu:4096x4096:bf16 --out /tmp/sweep
    python -m bench.sweep --cases matmul_bias_gelu:4096x4096x4096:bf16 --where num_warps=8

Per case: the generated module is compiled for every config in parallel worker processes (they
fill Triton's on-disk cache; `--jobs`), each config is run once on fresh random inputs and
compared with the reference evaluated in float64 (a wrong config is listed, never timed), then
all right configs, eager PyTorch, Liger-Kernel (where installed and it has the op) and a copy
of the same bytes (memory-bound ops) are timed interleaved (`harness.timing.compare`: CUDA
events with a device-side head start, LLC flushed every repetition, median of `--reps`).
Results go to `<out>/sweep.jsonl` as each case finishes (after one line naming the device,
versions and commit) and a table per case is printed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Loose correctness bar for a sweep (the porter's judge is the real one): max |err| relative to
# the reference's scale.
SWEEP_TOL = {"bf16": 2e-2, "fp16": 4e-3, "fp32": 1e-4}


def parse_case(text: str) -> tuple[str, tuple[int, ...], str]:
    """"softmax:8192x5120:bf16" -> ("softmax", (8192, 5120), "bf16")."""
    parts = text.split(":")
    if len(parts) != 3 or parts[2] not in DTYPES:
        raise SystemExit(
            f"sweep: case {text!r} is not OP:SHAPE:DTYPE (e.g. softmax:4096x4096:bf16)"
        )
    return parts[0], tuple(int(s) for s in parts[1].split("x")), parts[2]


def parse_where(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if not value:
            raise SystemExit(f"sweep: --where {item!r} is not KEY=VALUE")
        out[key] = value
    return out


def generated(op_name: str) -> tuple[Any, Any]:
    """(spec, GeneratedOp) for an example op, generated as `porter port` does."""
    from porter.port import generate_op
    from porter.specs import load_spec

    spec = load_spec(REPO / "examples" / op_name / "spec.py")
    gen = torch.Generator().manual_seed(0)
    example = spec.make_inputs(spec.interpret_shapes[0], spec.dtypes[0], torch.device("cpu"), gen)
    return spec, generate_op(spec.reference, tuple(example), op_name)


def local_gpu(script: str) -> tuple[torch.device, Any]:
    """(device, hwmodels detection) of the GPU this script times on; exits naming `script`
    where no hardware model in hwmodels/devices/ matches it."""
    import hwmodels
    from harness.timing import require_gpu

    dev = require_gpu()
    det = hwmodels.detect()
    if det.model is None:
        raise SystemExit(f"{script}: the local GPU matches no hardware model in hwmodels/devices/")
    return dev, det


def configs_for(gen_op: Any, spec: Any, hw: Any, shape: tuple[int, ...], dtype: torch.dtype,
                where: dict[str, str], limit: int | None) -> list[dict[str, Any]]:
    meta = spec.make_inputs(shape, dtype, torch.device("meta"), torch.Generator().manual_seed(0))
    space = gen_op.variant_space(hw, tuple(meta), dtype)
    keep = [c for c in space if all(str(c.get(k)) in v.split("|") for k, v in where.items())]
    return keep[:limit] if limit else keep


def _compile_worker(source_path: str, op_name: str, shape: tuple[int, ...], dname: str,
                    configs: list[dict[str, Any]]) -> list[str | None]:
    """Launch each config once so Triton compiles it into its on-disk cache; errors per config."""
    from porter.codegen import load_generated_module

    spec, _ = generated(op_name)
    module = load_generated_module(Path(source_path).read_text(), f"sweep_{op_name}",
                                   interpret=False)
    dev = torch.device("cuda")
    inputs = spec.make_inputs(shape, DTYPES[dname], dev, torch.Generator(dev).manual_seed(1))
    errors: list[str | None] = []
    for cfg in configs:
        try:
            module.launch(*inputs, config=cfg)
            torch.cuda.synchronize()
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - a config that does not run is a result
            errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    del inputs
    torch.cuda.empty_cache()  # the workers live across cases: give the memory back
    return errors


def _max_rel_err(got: Any, want: Any) -> float:
    got_t = got if isinstance(got, torch.Tensor) else got[0]
    want_t = want if isinstance(want, torch.Tensor) else want[0]
    g, w = got_t.double(), want_t.double()
    if not torch.isfinite(g).all():
        return float("inf")
    scale = w.abs().max().clamp_min(1e-30)
    return float((g - w).abs().max() / scale)


def sweep_case(case: tuple[str, tuple[int, ...], str], hw: Any, where: dict[str, str],
               limit: int | None, pool: Any, jobs: int, reps: int,
               workdir: Path, graph: bool = False) -> list[dict[str, Any]]:
    from bench.suite import copy_provider
    from bench.suite import liger_provider
    from harness.roofline import analyze
    from harness.timing import compare
    from porter.codegen import load_generated_module
    from porter.planner import op_cost

    op_name, shape, dname = case
    dtype = DTYPES[dname]
    spec, gen_op = generated(op_name)
    configs = configs_for(gen_op, spec, hw, shape, dtype, where, limit)
    source = gen_op.triton_module_source()
    src_path = workdir / f"{op_name}.py"
    src_path.write_text(source)
    t0 = time.time()
    chunks = [configs[i::jobs] for i in range(jobs)]
    parts = pool.starmap(_compile_worker,
                         [(str(src_path), op_name, shape, dname, c) for c in chunks])
    errors: dict[int, str | None] = {}
    for j, part in enumerate(parts):
        for k, err in enumerate(part):
            errors[j + k * jobs] = err
    print(f"[{op_name} {shape} {dname}] {len(configs)} configs compiled in "
          f"{time.time() - t0:.0f} s ({jobs} workers)", flush=True)

    module = load_generated_module(source, f"sweep_{op_name}", interpret=False)
    dev = torch.device("cuda")
    nbytes, flops = op_cost(spec.problem(), shape, dtype)
    rows: list[dict[str, Any]] = []
    right: dict[str, Any] = {}
    for i, cfg in enumerate(configs):
        row = {"op": op_name, "shape": list(shape), "dtype": dname, "config": cfg,
               "error": errors.get(i)}
        rows.append(row)
        if row["error"]:
            continue
        inputs = spec.make_inputs(shape, dtype, dev, torch.Generator(dev).manual_seed(100 + i))
        want = spec.reference(*[x.double() if isinstance(x, torch.Tensor) and
                                x.is_floating_point() else x for x in inputs])
        got = module.launch(*inputs, config=cfg)
        err = _max_rel_err(got, want)
        row["max_rel_err"] = err
        if err > SWEEP_TOL[dname]:
            row["error"] = f"wrong: max error {err:.2e} of the reference's scale"
            continue
        right[str(i)] = (lambda *a, _c=cfg: module.launch(*a, config=_c))

    def make_args() -> tuple[Any, ...]:
        return tuple(spec.make_inputs(shape, dtype, dev, torch.Generator(dev)))

    # beside them: a copy of the same bytes (the speed of light at this size) and Liger-Kernel
    # where it is installed and has the op (bench/suite.py's)
    baselines = {"liger": liger_provider(op_name)}
    if gen_op.family != "matmul_epilogue":
        baselines["copy"] = copy_provider(spec.problem(), shape, dtype)
    baselines = {name: fn for name, fn in baselines.items() if fn is not None}
    providers = {**right, "eager": spec.reference, **baselines}
    cmp = compare(providers, make_args, hw=hw, reps=reps, warmup=3, graph=graph)
    eager_ms = cmp.timings["eager"].median_ms
    for i, row in enumerate(rows):
        t = cmp.timings.get(str(i))
        if t is None:
            continue
        unit = "matrix" if gen_op.family == "matmul_epilogue" else "simt"
        roof = analyze(nbytes, flops, t.median_ms, hw, dtype, math=unit) if nbytes else None
        row.update({"median_ms": t.median_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms,
                    "pct_measured_peak": roof.pct_peak if roof else None,
                    "speedup_vs_eager": cmp.ratio("eager", str(i))[0]})
    rows.append({"op": op_name, "shape": list(shape), "dtype": dname, "config": "eager",
                 "median_ms": eager_ms})
    for name in baselines:
        t = cmp.timings[name]
        roof = analyze(nbytes, flops, t.median_ms, hw, dtype, math="simt") if nbytes else None
        rows.append({"op": op_name, "shape": list(shape), "dtype": dname, "config": name,
                     "median_ms": t.median_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms,
                     "pct_measured_peak": roof.pct_peak if roof else None,
                     "speedup_vs_eager": cmp.ratio("eager", name)[0]})
    for row in rows:
        row["timing"] = "graph" if graph else "events"
    return rows


def print_table(rows: list[dict[str, Any]], top: int) -> None:
    from tabulate import tabulate

    timed = sorted((r for r in rows if r.get("median_ms") is not None),
                   key=lambda r: r["median_ms"])
    table = []
    for r in timed[:top]:
        cfg = r["config"]
        cfg_s = cfg if isinstance(cfg, str) else ",".join(
            f"{k}={v}" for k, v in cfg.items() if k != "dtype")
        pct = r.get("pct_measured_peak")
        sp = r.get("speedup_vs_eager")
        spread = (f"{r['p20_ms'] * 1e3:.1f}-{r['p80_ms'] * 1e3:.1f}" if r.get("p20_ms")
                  else "-")
        table.append([f"{r['median_ms'] * 1e3:.1f}", spread,
                      "-" if pct is None else f"{pct:.1f}",
                      "-" if sp is None else f"{sp:.2f}", cfg_s])
    print(tabulate(table, headers=["us", "p20-p80 us", "% peak", "x eager", "config"]))
    failed = [r for r in rows if r.get("error")]
    if failed:
        print(f"{len(failed)} configs failed or were wrong; first: {failed[0]['error']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True, help="OP:SHAPE:DTYPE,... e.g. softmax:4096x4096:bf16")
    ap.add_argument("--where", action="append", default=[],
                    help="KEY=VALUE filter on configs; VALUE may list alternatives: "
                         "strategy=looped|persistent")
    ap.add_argument("--limit", type=int, default=None, help="at most this many configs per case")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--top", type=int, default=12, help="rows per printed table")
    ap.add_argument("--graph", action="store_true",
                    help="time inside CUDA graphs (no host launch cost at all; to tell host "
                         "overhead from kernel time)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)

    _, det = local_gpu("sweep")
    hw = det.model
    args.out.mkdir(parents=True, exist_ok=True)
    where = parse_where(args.where)
    from harness import env_info

    meta = {"meta": True, "device": det.device_name, "hw_model": hw.name,
            "versions": env_info.versions(),
            "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(REPO),
            "reps": args.reps, "timing": "graph" if args.graph else "events"}
    print(json.dumps(meta), flush=True)
    cases = [parse_case(text) for text in args.cases.split(",")]
    # One pool for all cases: each worker pays for its CUDA context once.
    with mp.get_context("spawn").Pool(args.jobs) as pool, \
            (args.out / "sweep.jsonl").open("a") as sink:
        sink.write(json.dumps(meta) + "\n")
        for case in cases:
            rows = sweep_case(case, hw, where, args.limit, pool, args.jobs, args.reps, args.out,
                              graph=args.graph)
            for r in rows:
                sink.write(json.dumps(r, default=str) + "\n")
            sink.flush()
            print_table(rows, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
