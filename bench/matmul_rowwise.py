"""The matmul_rowwise family on the GPU: KernelBench level-2 files of the form matmul ->
elementwise -> row-wise reduction, at the files' own sizes, beside the file's own Model.

    python -m bench.matmul_rowwise KB_LEVEL2_DIR --out DIR [--files 99_...py,45_...py]
        [--dtypes fp32[,bf16]] [--mm-configs N] [--row-configs N] [--reps N]

For each file (default: 99_Matmul_GELU_Softmax, 45_Gemm_Sigmoid_LogSumExp) and dtype (the
files' own fp32 by default; bf16 casts the inputs and the model):

1. the generated op (porter.codegen.generate on the file's reference, traced at a small size:
   the module serves every size), compiled for this GPU;
2. correctness at the file's own sizes: each config's output against the reference in float64
   on the GPU, held to the judge's policy for the dtype (harness.tolerance: every element within
   atol + rtol * |ref|) or, where eager PyTorch is no closer, to 4x eager's own error;
3. a screen of each stage's configs (the op's variant space, pruned by the hardware model,
   varies one stage at a time; a shortlist of `--mm-configs` configs per matmul stage and
   `--row-configs` row configs), each timed as the whole op with `harness.timing.bench`
   (median, LLC flushed, few reps);
4. the best few configs (the default, the best two of the screen, and each stage's best joined:
   the stages' times add), the file's Model in eager and under
   torch.compile, timed interleaved with `harness.timing.compare` (CUDA events, LLC flushed every
   repetition, median of `--reps`); each checked against float64 first.

Prints ms, TFLOP/s (the matmul FLOPs, torch's FLOP counter), % of the device's matmul ceiling
for the dtype (the measured one in hwmodels/devices/<device>.yaml, `matmul_<dtype>_tflops`,
else the datasheet's dense rate, labelled) and speedups over eager and torch.compile; writes
DIR/results.json. About 1-2 minutes of device time on an H100 for the two files in fp32.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FILES = ("99_Matmul_GELU_Softmax.py", "45_Gemm_Sigmoid_LogSumExp.py")
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
SCREEN_REPS = 8
ERR_FACTOR = 4.0  # the judge's rule for ill-conditioned outputs: within 4x eager's own error


def ceiling(hw: Any, dtype: Any) -> tuple[float | None, str]:
    """The matmul rate this device is held to in `dtype` (TFLOP/s) and where it came from."""
    from harness.roofline import dtype_key

    key = dtype_key(dtype)
    measured = hw.measured_value(f"matmul_{key}_tflops")
    if measured is not None:
        return measured, f"measured {key} matmul (hwmodels)"
    return hw.peak_tflops(key), f"datasheet {key} dense rate (no measured {key} matmul)"


def matmul_flops(reference: Any, inputs: tuple[Any, ...]) -> int:
    """FLOPs of the reference's matmuls at these inputs (torch's counter, meta tensors)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    meta = tuple(torch.empty_like(x, device="meta") if isinstance(x, torch.Tensor) else x
                 for x in inputs)
    with FlopCounterMode(display=False) as counter:
        reference(*meta)
    return int(counter.get_total_flops())


def max_err(got: Any, ref: Any) -> float:
    return float((got.double() - ref).abs().max().item())


def passes(got: Any, ref: Any, tol: Any, eager_err: float) -> bool:
    """Every element within the policy's atol + rtol * |ref|, or the largest error within
    ERR_FACTOR x eager PyTorch's own (an output the dtype cannot hold to the policy)."""
    err = (got.double() - ref).abs()
    return bool((err <= tol.atol + tol.rtol * ref.abs()).all().item()) or \
        float(err.max().item()) <= ERR_FACTOR * eager_err


def shortlist(space: list[dict[str, Any]], default: dict[str, Any], prefixes: tuple[str, ...],
              stage: int, n: int) -> list[dict[str, Any]]:
    """Up to `n` configs of the space that vary stage `stage` only, the default first, spread
    over the stage's tile shapes: one config per matmul tile (larger tiles first, but none
    with more than 128 accumulator values per thread, which spill), or per row strategy, rows
    and warps (other strategies first)."""
    from porter.codegen import matmul_rowwise

    parts = matmul_rowwise.split_config(default, prefixes)
    mine = parts[stage]

    def others_default(c: dict[str, Any]) -> bool:
        split = matmul_rowwise.split_config(c, prefixes)
        return all(p == d for i, (p, d) in enumerate(zip(split, parts, strict=True))
                   if i != stage)

    cands = [matmul_rowwise.split_config(c, prefixes)[stage] for c in space if others_default(c)]
    if "BLOCK_M" in mine:  # a matmul stage: fp32 ones on the tensor cores (tf32x3) first
        cands.sort(key=lambda c: (not c.get("tf32x3", False), c["strategy"] != mine["strategy"],
                                  c["BLOCK_M"] * c["BLOCK_N"] > 128 * 32 * c["num_warps"],
                                  -c["BLOCK_M"] * c["BLOCK_N"], c["BLOCK_K"] != 64,
                                  abs(c["num_stages"] - 3), -c["num_warps"]))
        tile = ("strategy", "tf32x3", "BLOCK_M", "BLOCK_N", "BLOCK_K")
    else:
        cands.sort(key=lambda c: (c["strategy"] == mine["strategy"],
                                  abs(c["num_warps"] - mine["num_warps"])))
        tile = ("strategy", "ROWS", "num_warps")
    out, seen = [default], {tuple(mine.get(k) for k in tile)}
    for c in cands:
        key = tuple(c.get(k) for k in tile)
        if key not in seen and len(out) < n:
            seen.add(key)
            out.append(matmul_rowwise.join_config(
                [c if i == stage else d for i, d in enumerate(parts)], prefixes))
    return out


def run_file(path: Path, dtype_name: str, args: argparse.Namespace, hw: Any) -> dict[str, Any]:
    """One file in one dtype: correctness, the screen, the final timing (see the docstring)."""
    import torch

    from harness.timing import bench
    from harness.timing import compare
    from harness.tolerance import tolerance
    from porter.codegen import UnsupportedOpError
    from porter.codegen import generate
    from porter.codegen import load_generated_module
    from porter.codegen import matmul_rowwise
    from porter.specs.kernelbench import kernelbench_problem
    from porter.specs.kernelbench import load_kernelbench

    dtype = getattr(torch, DTYPES[dtype_name])
    row: dict[str, Any] = {"file": path.name, "dtype": dtype_name}
    spec = load_kernelbench(path)
    kb = kernelbench_problem(spec)
    shape = tuple(spec.shapes[0])
    row["sizes"] = spec.describe_shape(shape)
    small = spec.make_inputs(spec.interpret_shapes[-1], dtype, torch.device("cpu"),
                             torch.Generator().manual_seed(0))
    try:
        op = generate(spec.reference, small, name=spec.name)
    except UnsupportedOpError as exc:
        row["verdict"] = f"not covered: {exc}"
        return row
    row["family"] = op.family
    row["fusion"] = op.fusion.text
    dev = torch.device("cuda")
    inputs = tuple(spec.make_inputs(shape, dtype, dev, torch.Generator(dev).manual_seed(0)))
    n_in = kb.n_inputs
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=False)
    flops = matmul_flops(spec.reference, inputs)
    peak, peak_src = ceiling(hw, dtype)
    row.update(flops=flops, peak_tflops=peak, peak_source=peak_src)

    with torch.no_grad():
        ref = spec.reference(*(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                               else x for x in inputs))
        eager_err = max_err(spec.reference(*inputs), ref)
    tol = tolerance(dtype)
    row["eager_err"], row["tolerance"] = eager_err, tol.describe()

    def checked(config: dict[str, Any]) -> float:
        """The config's largest error; inf where it fails the check."""
        out = mod.launch(*inputs, config=config)
        torch.cuda.synchronize()
        return max_err(out, ref) if passes(out, ref, tol, eager_err) else math.inf

    default = op.default_config(hw, inputs, dtype)
    space = op.variant_space(hw, inputs, dtype)
    t0 = time.perf_counter()
    prefixes = op.prefixes
    screened: list[tuple[float, int, dict[str, Any]]] = []
    make = lambda: inputs  # noqa: E731 - one argument set; the LLC is flushed between reps
    for stage in range(len(prefixes)):
        n = args.row_configs if stage == len(prefixes) - 1 else args.mm_configs
        for cfg in shortlist(space, default, prefixes, stage, n):
            try:
                if checked(cfg) == math.inf:
                    print(f"    stage {stage + 1} config fails the check: {cfg}",
                          file=sys.stderr)
                    continue
                t = bench(lambda *a, c=cfg: mod.launch(*a, config=c), make, hw=hw,
                          reps=SCREEN_REPS, warmup=2).median_ms
            except Exception as exc:  # noqa: BLE001 - a config that does not build is skipped
                print(f"    stage {stage + 1} config failed: {type(exc).__name__}: {exc}",
                      file=sys.stderr)
                continue
            screened.append((t, stage, cfg))
            print(f"    screen stage {stage + 1} {t:8.3f} ms  {cfg}", file=sys.stderr)
    row["screen_s"] = round(time.perf_counter() - t0, 1)
    if not screened:
        row["verdict"] = "no config passed"
        return row
    finals: dict[str, dict[str, Any]] = {"porter default": default}
    # each stage's best config, joined: the stages' times add
    bests = [min((s for s in screened if s[1] == i), key=lambda s: s[0], default=None)
             for i in range(len(prefixes))]
    if all(bests):
        finals["porter best"] = matmul_rowwise.join_config(
            [matmul_rowwise.split_config(b[2], prefixes)[i] for i, b in enumerate(bests)],
            prefixes)
    for i, (_, _, cfg) in enumerate(sorted(screened, key=lambda s: s[0])[:2]):
        if cfg not in finals.values():
            finals[f"porter screen #{i + 1}"] = cfg
    row["configs"], row["errors"] = finals, {}
    for name, cfg in finals.items():
        row["errors"][name] = checked(cfg)
    providers: dict[str, Any] = {name: (lambda *a, c=cfg: mod.launch(*a, config=c))
                                 for name, cfg in finals.items()
                                 if row["errors"][name] < math.inf}
    model = copy.deepcopy(kb.model(shape)).to(device=dev, dtype=dtype).eval()
    compiled = torch.compile(model)
    providers["eager"] = lambda *a: model(*a[:n_in])
    providers["compile"] = lambda *a: compiled(*a[:n_in])
    with torch.no_grad():
        row["errors"]["compile"] = max_err(compiled(*inputs[:n_in]), ref)
        row["errors"]["eager"] = max_err(model(*inputs[:n_in]), ref)
        cmp = compare(providers, make, hw=hw, reps=args.reps, warmup=3)
    row["ms"] = {k: t.median_ms for k, t in cmp.timings.items()}
    row["tflops"] = {k: flops / (ms * 1e-3) / 1e12 for k, ms in row["ms"].items()}
    row["pct_of_peak"] = {k: 100.0 * v / peak for k, v in row["tflops"].items()} if peak else {}
    row["speedup"] = {k: {"vs_eager": cmp.ratio("eager", k)[0],
                          "vs_compile": cmp.ratio("compile", k)[0]}
                      for k in row["ms"] if k.startswith("porter")}
    row["verdict"] = "timed"
    return row


def print_row(row: dict[str, Any]) -> None:
    print(f"\n{row['file']} ({row['dtype']}; {row.get('sizes', '')})")
    if row.get("verdict") != "timed":
        print(f"  {row.get('verdict')}")
        return
    print(f"  {row['fusion']}")
    print(f"  check vs float64: {row['tolerance']}, or 4x eager's own error "
          f"{row['eager_err']:.2e}; ceiling {row['peak_tflops']} TFLOP/s ({row['peak_source']})")
    print(f"  {'provider':<20} {'ms':>9} {'TFLOP/s':>8} {'% peak':>7} {'vs eager':>9} "
          f"{'vs compile':>10} {'max err':>9}")
    for name, ms in row["ms"].items():
        sp = row["speedup"].get(name, {})
        pct = row["pct_of_peak"].get(name)
        pct_s = "" if pct is None else f"{pct:6.1f}%"
        eager_s = f"{sp['vs_eager']:.2f}x" if sp else ""
        compile_s = f"{sp['vs_compile']:.2f}x" if sp else ""
        print(f"  {name:<20} {ms:9.3f} {row['tflops'][name]:8.1f} {pct_s:>7} {eager_s:>9} "
              f"{compile_s:>10} {row['errors'].get(name, float('nan')):9.2e}")
    for name, cfg in row["configs"].items():
        print(f"  {name}: {cfg}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kb_dir", type=Path, help="KernelBench's level2/ folder (unmodified)")
    ap.add_argument("--out", type=Path, required=True, help="folder for results.json")
    ap.add_argument("--files", default=",".join(DEFAULT_FILES), help="comma-separated files")
    ap.add_argument("--dtypes", default="fp32", help="comma-separated: fp32, bf16, fp16")
    ap.add_argument("--mm-configs", type=int, default=6, help="matmul configs screened")
    ap.add_argument("--row-configs", type=int, default=4, help="row configs screened")
    ap.add_argument("--reps", type=int, default=30, help="repetitions of the final timing")
    args = ap.parse_args(argv)

    import torch

    import hwmodels
    from harness import env_info

    det = hwmodels.detect()
    if det.model is None or not torch.cuda.is_available():
        print(f"error: timing needs a GPU; none usable here ({det.reason})", file=sys.stderr)
        return 2
    hw = det.model
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"device": det.device_name, "hw_model": hw.name,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "versions": env_info.versions(), "git_rev": env_info.git_rev(REPO),
            "command": "python -m bench.matmul_rowwise " + " ".join(argv or sys.argv[1:])}
    rows = []
    t0 = time.perf_counter()
    for name in args.files.split(","):
        for dtype_name in args.dtypes.split(","):
            print(f"{name} {dtype_name} ...", file=sys.stderr, flush=True)
            try:
                row = run_file(args.kb_dir / name, dtype_name, args, hw)
            except Exception as exc:  # noqa: BLE001 - one row's failure is that row's verdict
                row = {"file": name, "dtype": dtype_name,
                       "verdict": f"error: {type(exc).__name__}: {exc}"}
            rows.append(row)
            print_row(row)
            torch.cuda.empty_cache()
    meta["wall_s"] = round(time.perf_counter() - t0, 1)
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2,
                                                      default=str) + "\n")
    print(f"\nwrote {args.out / 'results.json'} ({meta['wall_s']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
