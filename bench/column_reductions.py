"""Reductions over a dim that is not the last, on the GPU: the row-wise generator's column
kernel (porter/codegen/rowwise/columns.py) against its row-per-program kernel, torch eager and
torch.compile.

    python -m bench.column_reductions --out DIR [--cases rms36_112x64x512x512_fp32,...]
                                      [--columns 6] [--top 3] [--reps 20] [--no-compile]

Cases: KernelBench level1/36_RMSNorm_.py at its own sizes (x of (112, 64, 512, 512) fp32, the
mean of x^2 over the 64 channels: 7.5 GB in, 7.5 GB out), and a sum (47_Sum's form, keepdim)
and a softmax over dim 1 of (128, 4096, 1024) fp32.

Per case: the generated module (compiled, not interpreted) runs the column kernel's default
config and up to --columns more spread over its part of the variant space, and the row kernel
the launcher took before the column kernel existed (`heuristics.rowwise_default` with the
reduced dim not last: ROWS rows of the whole reduced dim per program). Each output is first
checked against the reference in float64 on the first two indices of dim 0 (they reduce
independently); a wrong config is listed, never timed. The right column configs are screened
(`harness.timing.compare`: interleaved, L2 flushed, --screen-reps), then the --top best, the
row kernel, eager and torch.compile are timed together (--reps, medians). The table gives ms,
GB/s (inputs read once + outputs written once: the ideal traffic), % of the device's measured
copy bandwidth (hwmodels), and speedups over eager, torch.compile and the row kernel. Rows go
to DIR/column_reductions.jsonl after a line naming the device and versions.

Device time: about 1.5 minutes on an H100 with the defaults (mostly compiling; written on
2026-11-26 without a GPU, not yet run).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from bench.configs import case_parser
from bench.configs import case_rows
from bench.configs import check_config
from bench.configs import local_gpu
from bench.configs import run_cases
from bench.configs import select_cases

CHECK = 2  # indices of dim 0 checked in float64
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 4e-3}  # max|err| / max|ref|


def rmsnorm_channels(x):
    # KernelBench level1/36_RMSNorm_.py's forward
    return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)


def sum_dim1(x):
    return torch.sum(x, dim=1, keepdim=True)  # 47_Sum_reduction_over_a_dimension's form


def softmax_dim1(x):
    return torch.softmax(x, dim=1)


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    shape: tuple[int, ...]
    dtype: torch.dtype
    out_full: bool  # the output has x's size (else it is x's without the reduced dim)

    def inputs(self, device: Any) -> tuple[torch.Tensor]:
        gen = torch.Generator(device=device).manual_seed(0)
        return (torch.randn(self.shape, generator=gen, device=device, dtype=self.dtype),)

    def small(self) -> tuple[torch.Tensor]:
        """Example inputs of the same rank and dtype, to generate the module from."""
        return (torch.randn(tuple(min(s, 8) for s in self.shape), dtype=self.dtype),)

    def bytes_moved(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        out = n if self.out_full else n // self.shape[1]
        return (n + out) * torch.empty((), dtype=self.dtype).element_size()


CASES = [
    Case("rms36_112x64x512x512_fp32", rmsnorm_channels, (112, 64, 512, 512), torch.float32, True),
    Case("sum_dim1_128x4096x1024_fp32", sum_dim1, (128, 4096, 1024), torch.float32, False),
    Case("softmax_dim1_128x4096x1024_fp32", softmax_dim1, (128, 4096, 1024), torch.float32,
         True),
]


def spread(configs: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    step = max(1, len(configs) // max(n, 1))
    return configs[::step][:n]


def row_kernel_config(op: Any, hw: Any, inputs: tuple[torch.Tensor, ...]) -> dict[str, Any]:
    """The launcher's choice before the column kernel: the row kernels' rule with the reduced
    dim not last."""
    from porter.codegen import heuristics

    sizes = op.problem_sizes(inputs)
    return heuristics.rowwise_default(
        sizes["n_rows"], sizes["n_cols"], inputs[0].element_size(), False, hw.warp_size,
        int(hw.limits.max_threads_per_block.value), full_output="full" in op.plan.out_kind,
        one_round_variance=op._mm.get("one_round_variance", False))


def run_case(case: Case, hw: Any, args: argparse.Namespace, device: str = "cuda",
             interpret: bool = False) -> list[dict[str, Any]]:
    """One case's rows: each config tried (its error, or its max relative error), then the
    final timings. `device` and `interpret` let a test run it on the CPU under the
    interpreter (with a stand-in for `harness.timing.compare`)."""
    from harness import timing
    from porter.codegen import generate
    from porter.codegen import load_generated_module

    t0 = time.time()
    op = generate(case.fn, case.small(), name=f"col_{case.name}")
    mod = load_generated_module(op.triton_module_source(), f"col_{case.name}",
                                interpret=interpret)
    inputs = case.inputs(torch.device(device))
    default = op.default_config(hw, inputs, case.dtype)
    space = [c for c in op.variant_space(hw, inputs, case.dtype) if c["strategy"] == "columns"]
    tried = [default] + [c for c in spread(space, args.columns) if c != default]
    configs = {f"columns#{i}": c for i, c in enumerate(tried)}
    configs["rows"] = {**row_kernel_config(op, hw, inputs), "dtype": default["dtype"]}
    want = case.fn(inputs[0][:CHECK].double())
    rows: list[dict[str, Any]] = []
    good: dict[str, Callable[..., Any]] = {}
    for key, cfg in configs.items():
        row, run = check_config(mod, inputs, cfg, want, CHECK, TOL[case.dtype], device,
                                case.name, key)
        rows.append(row)
        if run is not None:
            good[key] = run
    # one set: every case's input is far over L2
    make_args = (lambda args_: (lambda: args_))(inputs)
    column_keys = [k for k in good if k.startswith("columns")]
    if len(column_keys) > args.top:
        screen = timing.compare({k: good[k] for k in column_keys}, make_args, hw=hw,
                                reps=args.screen_reps, warmup=1, graph=False)
        column_keys = sorted(column_keys, key=lambda k: screen.timings[k].median_ms)[:args.top]
    final: dict[str, Callable[..., Any]] = {k: good[k] for k in column_keys}
    if "rows" in good:
        final["rows"] = good["rows"]
    final["eager"] = case.fn
    if not args.no_compile:
        final["torch.compile"] = torch.compile(case.fn, dynamic=False)
    cmp = timing.compare(final, make_args, hw=hw, reps=args.reps, warmup=2, graph=False)
    nbytes = case.bytes_moved()
    copy = hw.measured_value("copy_bandwidth_gbps") or hw.peak_bandwidth_gbps
    for name, t in cmp.timings.items():
        gbps = nbytes / t.median_ms / 1e6
        rows.append({
            "case": case.name, "provider": name, "final": True, "ms": t.median_ms,
            "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "gbps": gbps,
            "pct_copy": 100 * gbps / copy, "x_eager": cmp.speedup(name, "eager").median,
            "x_compile": (cmp.speedup(name, "torch.compile").median
                          if "torch.compile" in cmp.timings else None),
            "x_rows": cmp.speedup(name, "rows").median if "rows" in cmp.timings else None,
            "config": configs.get(name)})
    rows.append({"case": case.name, "seconds": time.time() - t0})
    del inputs
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    parts = case_rows(rows)
    if parts is None:
        return
    case, final, errors = parts
    print(f"\n{case}")
    print(f"  {'provider':<15}{'ms':>9}{'GB/s':>8}{'% copy':>8}{'x eager':>9}{'x compile':>10}"
          f"{'x rows':>8}  config")
    for r in sorted(final, key=lambda r: r["ms"]):
        xc = f"{r['x_compile']:.2f}" if r["x_compile"] is not None else "-"
        xr = f"{r['x_rows']:.2f}" if r["x_rows"] is not None else "-"
        cfg = {k: v for k, v in (r["config"] or {}).items() if k != "dtype"}
        print(f"  {r['provider']:<15}{r['ms']:>9.3f}{r['gbps']:>8.0f}{r['pct_copy']:>7.1f}%"
              f"{r['x_eager']:>9.2f}{xc:>10}{xr:>8}  {cfg or ''}")
    for r in errors:
        print(f"  {r['provider']:<15} WRONG OR FAILED: {r['error']}  {r['config']}")


def main(argv: list[str] | None = None) -> int:
    ap = case_parser("column_reductions", __doc__, CASES, reps=20)
    ap.add_argument("--columns", type=int, default=6,
                    help="column configs tried besides the default")
    ap.add_argument("--top", type=int, default=3, help="column configs in the final timing")
    ap.add_argument("--screen-reps", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile")
    args = ap.parse_args(argv)
    cases = select_cases(CASES, args.cases, "column_reductions")
    from harness.timing import TimingUnavailable

    try:
        det = local_gpu("column_reductions")
    except TimingUnavailable as exc:
        print(f"column_reductions: needs a GPU ({exc}); the column kernel's CPU tests are "
              "tests/porter/test_codegen_columns.py")
        return 2
    hw = det.model
    args.out.mkdir(parents=True, exist_ok=True)
    run_cases(args.out / "column_reductions.jsonl", det, hw, args.reps, cases,
              lambda case: run_case(case, hw, args), print_table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
