"""Probe: does the warp-specialized TMA matmul (strategy tma_ws) build and run on this GPU?

bench/NOTES.md item 26: the first sweep with tma_ws configs on an H100 printed nothing for
560 s, not even its "configs compiled" line. This runs each tma_ws config alone in a child
process with a deadline; at the deadline the child prints where it is stuck (Triton's compile or
the kernel itself, seen as a wait in `torch.cuda.synchronize`) and exits. The configs that ran
are then checked against a float64 reference and timed interleaved beside the tma_persistent
config the last suite picked, eager PyTorch and cuBLAS's matmul alone. Exit status 0 when at
least one tma_ws config ran and matched the reference, 1 otherwise.

    python bench/probe_tma_ws.py --shape 4096x4096x4096 --out /tmp/ws_probe
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import torch

# Written out, not taken from the variant space: the space offers tma_ws only where
# `variants.warp_specialization_builds` says so.
WS_BASE = {"strategy": "tma_ws", "GROUP_M": 8, "FLATTEN": False, "SUBTILE": False,
           "num_warps": 4, "dtype": "bf16"}
WS_TILES = [(128, 128, 64, 3), (128, 128, 64, 4), (128, 256, 64, 3), (128, 256, 64, 4)]
# The tma_persistent config the H100 suite of results/h100-2026-11-23-run5 picked at 4096^3.
PERSISTENT = {"strategy": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64,
              "GROUP_M": 8, "FLATTEN": False, "SUBTILE": True, "num_warps": 8,
              "num_stages": 4, "dtype": "bf16"}


def ws_configs() -> list[dict]:
    return [{**WS_BASE, "BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "num_stages": s}
            for m, n, k, s in WS_TILES]


def child(shape: tuple[int, ...], cfg: dict, deadline_s: float) -> None:
    """Run one config once; at the deadline print the stack (compile or kernel) and exit."""
    import faulthandler

    from sweep import generated

    from porter.codegen import load_generated_module

    faulthandler.dump_traceback_later(deadline_s, exit=True)
    spec, gen_op = generated("matmul_bias_gelu")
    module = load_generated_module(gen_op.triton_module_source(), "ws_probe", interpret=False)
    dev = torch.device("cuda")
    inputs = spec.make_inputs(shape, torch.bfloat16, dev, torch.Generator(dev).manual_seed(1))
    t0 = time.time()
    module.launch(*inputs, config=cfg)
    torch.cuda.synchronize()
    print(json.dumps({"ran_s": round(time.time() - t0, 1)}), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4096x4096x4096")
    ap.add_argument("--deadline", type=float, default=60.0, help="seconds per child")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--max-configs", type=int, default=len(WS_TILES))
    ap.add_argument("--keep-going", action="store_true", help="try every config after a hang")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    shape = tuple(int(s) for s in args.shape.split("x"))
    if args.child:
        child(shape, json.loads(args.child), args.deadline)
        return 0

    from suite import matmul_alone_provider
    from sweep import _max_rel_err
    from sweep import generated

    import hwmodels
    from harness import env_info
    from harness.timing import compare
    from harness.timing import require_gpu
    from porter.codegen import load_generated_module

    require_gpu()
    args.out.mkdir(parents=True, exist_ok=True)
    hw = hwmodels.detect().model
    report: dict = {"device": hwmodels.detect().device_name, "versions": env_info.versions(),
                    "shape": list(shape), "configs": []}
    ran = []
    for cfg in ws_configs()[:args.max_configs]:
        t0 = time.time()
        proc = subprocess.run([sys.executable, __file__, "--shape", args.shape, "--deadline",
                               str(args.deadline), "--child", json.dumps(cfg), "--out",
                               str(args.out)], capture_output=True, text=True, check=False,
                              timeout=args.deadline + 60)
        outcome = "ran" if proc.returncode == 0 and '"ran_s"' in proc.stdout else (
            "deadline" if "Timeout" in proc.stderr else f"error rc={proc.returncode}")
        tail = "\n".join(proc.stderr.strip().splitlines()[-14:])
        print(f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} st{cfg['num_stages']}: "
              f"{outcome} after {time.time() - t0:.0f} s", flush=True)
        if outcome != "ran":
            print(tail, flush=True)
        report["configs"].append({"config": cfg, "outcome": outcome, "stderr_tail": tail})
        if outcome == "ran":
            ran.append(cfg)
        elif outcome == "deadline" and not args.keep_going:
            print("stopping at the first config past its deadline (--keep-going tries the rest)")
            break

    if ran:
        spec, gen_op = generated("matmul_bias_gelu")
        module = load_generated_module(gen_op.triton_module_source(), "ws_probe",
                                       interpret=False)
        dev = torch.device("cuda")
        providers = {}
        for i, cfg in enumerate([PERSISTENT] + ran):
            inputs = spec.make_inputs(shape, torch.bfloat16, dev,
                                      torch.Generator(dev).manual_seed(100 + i))
            want = spec.reference(*[x.double() for x in inputs])
            err = _max_rel_err(module.launch(*inputs, config=cfg), want)
            name = f"{cfg['strategy']} {cfg['BLOCK_M']}x{cfg['BLOCK_N']} st{cfg['num_stages']}"
            print(f"{name}: max error {err:.2e} of the reference's scale", flush=True)
            if err < 2e-2:
                providers[name] = (lambda *a, _c=cfg: module.launch(*a, config=_c))
        providers["eager"] = spec.reference
        providers["matmul_alone"] = matmul_alone_provider()
        cmp = compare(providers, lambda: tuple(spec.make_inputs(shape, torch.bfloat16, dev,
                                                                 torch.Generator(dev))),
                      hw=hw, reps=args.reps, warmup=3)
        flops = 2 * shape[0] * shape[1] * shape[2]
        for name, t in cmp.timings.items():
            line = (f"{name:32s} {t.median_ms * 1e3:8.1f} us  {flops / t.median_ms / 1e9:6.0f} "
                    f"TFLOP/s  p20-p80 {t.p20_ms * 1e3:.1f}-{t.p80_ms * 1e3:.1f}")
            print(line, flush=True)
            report.setdefault("timings", {})[name] = {"median_ms": t.median_ms,
                                                      "p20_ms": t.p20_ms, "p80_ms": t.p80_ms}
    report["right"] = [name for name in report.get("timings", {}) if name.startswith("tma_ws")]
    (args.out / "ws_probe.json").write_text(json.dumps(report, indent=1))
    return 0 if report["right"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
