"""fp32 matmuls on the GPU: the tiled kernel's fp32 dots (exact IEEE on the SIMT units, tf32x3 on
the tensor cores) with one accumulator or partial ones (ACC_CHUNK, `heuristics.acc_chunk`),
against float64 and eager PyTorch, at KernelBench level 1's sizes.

    python -m bench.fp32_matmul [--shapes 256x256x524288,2048x1x1048576,...] [--reps N]

Each shape (M x N x K, torch.rand operands as KernelBench's files draw them) runs the generated
`a @ b` (porter.codegen.generate) with the default tile of the h100 variant space in four forms:
ieee / tf32x3, each with ACC_CHUNK 0 (one accumulator) and the launcher's own (partials past
K = 8192). For each: the max error relative to the fp32 policy (harness.tolerance: |out - ref|
<= atol + rtol |ref|, `x tol` > 1 fails the judge), eager's (torch.matmul in fp32, TF32 off), and
the median time of `--reps` calls (CUDA events, no LLC flush: a screen, not a suite number).
Answers: does tf32x3 hold fp32's tolerance on all-positive data (the tensor cores' accumulation),
do the partials bring KernelBench's 4 and 6 within it, and what each costs. ~1 minute on an H100.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SHAPES = ("256x256x524288", "2048x1x1048576", "2048x4096x8192", "4096x4096x4096")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    import torch

    import hwmodels
    from harness.tolerance import tolerance
    from porter.codegen import generate
    from porter.codegen.loading import load_generated_module

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    hw = hwmodels.get("h100")
    tol = tolerance(torch.float32)
    op = generate(lambda a, b: a @ b, (torch.rand(64, 128), torch.rand(128, 32)), name="fp32mm")
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=False)
    print(f"{torch.cuda.get_device_name()}; fp32 policy atol {tol.atol:g} rtol {tol.rtol:g}")
    print(f"{'shape':>20} {'form':>16} {'ACC_CHUNK':>9} {'max err':>10} {'x tol':>7} {'ms':>8}")

    def timed(fn) -> float:
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    def run_shape(text: str) -> None:
        m, n, k = (int(v) for v in text.split("x"))
        g = torch.Generator(device=dev).manual_seed(0)
        a = torch.rand(m, k, device=dev, generator=g)
        b = torch.rand(k, n, device=dev, generator=g)
        ref = a.double() @ b.double()
        allowed = tol.atol + tol.rtol * ref.abs()

        def report(form: str, chunk: str, out: torch.Tensor, ms: float) -> None:
            err = (out.double() - ref).abs()
            print(f"{text:>20} {form:>16} {chunk:>9} {float(err.max()):10.3e} "
                  f"{float((err / allowed).max()):7.2f} {ms:8.3f}", flush=True)

        report("eager", "-", torch.matmul(a, b), timed(lambda: torch.matmul(a, b)))
        meta = (torch.empty(m, k, device="meta"), torch.empty(k, n, device="meta"))
        base = {c: v for c, v in op.default_config(hw, meta).items()
                if c not in ("ieee", "tf32x3")}
        for form, extra in (("ieee", {}), ("tf32x3", {"ieee": False, "tf32x3": True})):
            for chunk in (0, None):
                cfg = {**base, **extra, **({"ACC_CHUNK": 0} if chunk == 0 else {})}
                (ref_k,) = op.kernel_refs(meta, cfg)
                out = mod.launch(a, b, config=cfg)
                report(f"{form} {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']}",
                       str(ref_k.constexprs["ACC_CHUNK"]), out,
                       timed(lambda cfg=cfg: mod.launch(a, b, config=cfg)))

    for text in args.shapes.split(","):
        run_shape(text)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
