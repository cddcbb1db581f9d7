"""Host launch cost: how long the host spends per call of a generated launcher, per config.

Events-mode timing hides host work only while the device is busier than the host; a launcher
that costs more host time than its kernel runs makes the device idle between calls (issue 5:
the persistent TMA matmul at 4096^3 took 981 us with events, 223 us in CUDA graphs). This
script separates the two for a few (op, shape, dtype) cases:

    python bench/launch_cost.py --cases matmul_bias_gelu:4096x4096x4096:bf16 --profile

Per case and config (the launcher's default, each strategy's default, eager PyTorch): the host
time per call, from a wall clock around batches of calls queued behind a long device sleep (so
the device never waits for the host and the host never waits for the device), the median over
batches; then the device time per call (CUDA events around one batch, after the sleep); with
`--profile`, the top functions of a cProfile run of the slowest launcher.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Callable

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from bench.sweep import DTYPES  # noqa: E402
from bench.sweep import generated  # noqa: E402
from bench.sweep import parse_case  # noqa: E402

SLEEP_CYCLES = 200_000_000  # ~0.1 s of device sleep: longer than any batch takes to queue


def host_and_device_us(fn: Callable[[], Any], calls: int, batches: int) -> tuple[float, float]:
    """(host us per call, device us per call) for `fn`, medians over `batches` batches."""
    host, device = [], []
    for _ in range(batches):
        torch.cuda.synchronize()
        torch.cuda._sleep(SLEEP_CYCLES)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host.append((time.perf_counter() - t0) / calls * 1e6)
        end.record()
        torch.cuda.synchronize()
        device.append(start.elapsed_time(end) / calls * 1e3)
    return statistics.median(host), statistics.median(device)


def strategy_defaults(gen_op: Any, hw: Any, inputs: tuple[Any, ...], dtype: torch.dtype
                      ) -> dict[str, dict[str, Any]]:
    """The launcher's default config and the first config of each other strategy."""
    out = {"default": gen_op.default_config(hw, inputs, dtype)}
    for cfg in gen_op.variant_space(hw, inputs, dtype):
        name = cfg.get("strategy", "default")
        if name not in out and cfg.get("strategy") != out["default"].get("strategy"):
            out[name] = cfg
    return out


def profile_top(fn: Callable[[], Any], calls: int, top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", required=True, help="OP:SHAPE:DTYPE,...")
    ap.add_argument("--calls", type=int, default=20, help="calls per batch")
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--profile", action="store_true", help="cProfile the slowest launcher")
    ap.add_argument("--out", type=Path, default=None, help="append JSON lines here")
    args = ap.parse_args(argv)

    import hwmodels
    from harness import env_info
    from harness.timing import require_gpu
    from porter.codegen import load_generated_module

    require_gpu()
    hw = hwmodels.detect().model
    meta = {"device": hwmodels.detect().device_name, "versions": env_info.versions(),
            "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(REPO)}
    print(json.dumps(meta), flush=True)
    dev = torch.device("cuda")
    for text in args.cases.split(","):
        op_name, shape, dname = parse_case(text)
        spec, gen_op = generated(op_name)
        module = load_generated_module(gen_op.triton_module_source(), f"cost_{op_name}",
                                       interpret=False)
        inputs = spec.make_inputs(shape, DTYPES[dname], dev, torch.Generator(dev).manual_seed(0))
        fns: dict[str, Callable[[], Any]] = {"eager": lambda: spec.reference(*inputs)}
        for name, cfg in strategy_defaults(gen_op, hw, tuple(inputs), DTYPES[dname]).items():
            fns[f"{name} {json.dumps(cfg)}"] = (lambda c=cfg: module.launch(*inputs, config=c))
        rows = []
        for name, fn in fns.items():
            for _ in range(3):  # compile and warm every path first
                fn()
            torch.cuda.synchronize()
            host, device = host_and_device_us(fn, args.calls, args.batches)
            rows.append((host, device, name))
            print(f"[{op_name} {'x'.join(map(str, shape))} {dname}] host {host:8.1f} us/call   "
                  f"device {device:8.1f} us/call   {name}", flush=True)
            if args.out:
                with args.out.open("a") as sink:
                    sink.write(json.dumps({**meta, "op": op_name, "shape": shape, "dtype": dname,
                                           "provider": name, "host_us": host,
                                           "device_us": device}) + "\n")
        if args.profile:
            host, _, name = max(rows)
            print(f"--- cProfile of {name} ({args.calls} calls, by own time) ---")
            print(profile_top(fns[name], args.calls, 15), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    raise SystemExit(main())
