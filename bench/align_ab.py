"""The row kernels' ALIGN on the GPU (issue 31): each generated op with the launcher's ALIGN
(`heuristics.rowwise_align`) against the same module with ALIGN forced to 1 (the kernels as
they were before it), torch eager and a copy of the input, at widths no spec lists.

    python -m bench.align_ab --out DIR [--cases rmsnorm_10000x3000_bf16,...] [--reps 30]

Per case: the generated module (compiled, not interpreted) runs the launcher's own default
config twice: as generated ("align"), and from a second copy of the module whose
`rowwise_align` returns 1 ("align1"). Each output is first checked against the reference in
float64 on the first rows; a wrong one is listed, never timed. Then both, eager and a copy of
x (`torch.Tensor.copy_` into a buffer: one read and one write, the traffic a row-wise op
cannot beat) are timed together (`harness.timing.compare`: interleaved, L2 flushed, --reps,
medians). The table gives ms, GB/s (inputs read once + the output written once), % of the
copy's GB/s measured here, speedup over eager and align1's time over align's. The controls
(widths 4096 and 1537) should show no difference: there ALIGN is 16 (the JIT's own
specialization) or 1. Rows go to DIR/align_ab.jsonl after a line naming the device and
versions.

Device time: about a minute on an H100 (mostly compiling two modules per op).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from bench.configs import case_parser
from bench.configs import case_rows
from bench.configs import check_config
from bench.configs import local_gpu
from bench.configs import run_cases
from bench.configs import select_cases

CHECK_ROWS = 8  # rows (or, for a column case, indices of dim 0) checked in float64
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 4e-3}  # max|err| / max|ref|


def rmsnorm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def softmax(x):
    return torch.softmax(x, dim=-1)


def rmsnorm_channels(x):
    # KernelBench level1/36_RMSNorm_.py's forward: the column kernel
    return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    shape: tuple[int, ...]  # of x; weights take the last dim
    dtype: torch.dtype
    weights: int = 0  # last-dim tensors after x (layernorm: w, b; rmsnorm: w)
    row_stride: int = 0  # > last dim: x is a column slice of rows this wide

    def inputs(self, device: Any, seed: int = 0) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator(device=device).manual_seed(seed)
        wide = (*self.shape[:-1], max(self.row_stride, self.shape[-1]))
        x = torch.randn(wide, generator=gen, device=device, dtype=self.dtype)
        x = x[..., :self.shape[-1]]
        ws = [torch.randn(self.shape[-1], generator=gen, device=device, dtype=self.dtype)
              for _ in range(self.weights)]
        return (x, *ws)

    def small(self) -> tuple[torch.Tensor, ...]:
        """Example inputs of the same rank and dtype, to generate the module from."""
        shape = tuple(min(s, 4) for s in self.shape[:-1]) + (min(self.shape[-1], 8),)
        return Case(self.name, self.fn, shape, self.dtype, self.weights).inputs("cpu")


def _cases() -> list[Case]:
    bf16 = torch.bfloat16
    out = []
    for fn, weights in ((rmsnorm, 1), (layernorm, 2), (softmax, 0)):
        n = fn.__name__
        out += [Case(f"{n}_10000x3000_bf16", fn, (10000, 3000), bf16, weights),
                Case(f"{n}_10000x3000_fp32", fn, (10000, 3000), torch.float32, weights),
                Case(f"{n}_10000x3000_of_3008_bf16", fn, (10000, 3000), bf16, weights, 3008),
                Case(f"{n}_10000x4096_bf16", fn, (10000, 4096), bf16, weights),  # ALIGN 16
                Case(f"{n}_4097x1537_bf16", fn, (4097, 1537), bf16, weights)]  # ALIGN 1
    out.append(Case("rms36_16x64x3000_bf16", rmsnorm_channels, (16, 64, 3000), bf16))
    return out


def modules(case: Case, interpret: bool = False) -> tuple[Any, Any]:
    """The case's generated module, and a second copy whose launcher takes ALIGN = 1."""
    from porter.codegen import generate
    from porter.codegen import load_generated_module

    name = f"ab_{case.fn.__name__}"
    src = generate(case.fn, case.small(), name=name).triton_module_source()
    mod = load_generated_module(src, name, interpret=interpret)
    mod1 = load_generated_module(src, name + "_align1", interpret=interpret)
    mod1.rowwise_align = lambda n_cols, strides, cap=16: 1  # the launcher reads the global
    return mod, mod1


def run_case(case: Case, hw: Any, args: argparse.Namespace, device: str = "cuda",
             interpret: bool = False) -> list[dict[str, Any]]:
    """The case's rows: each module's check, then the final timings. `device` and `interpret`
    let a test run it on the CPU with a stand-in `compare`."""
    from harness import timing

    mod, mod1 = modules(case, interpret)
    inputs = case.inputs(torch.device(device))
    head = tuple(t[:CHECK_ROWS] if i == 0 else t for i, t in enumerate(inputs))
    want = case.fn(*(t.double() for t in head))
    rows: list[dict[str, Any]] = []
    final: dict[str, Callable[..., Any]] = {}
    for key, m in (("align", mod), ("align1", mod1)):
        # the default config, with the name of the strategy it took (the launcher picks it)
        row, run = check_config(m, inputs, None, want, CHECK_ROWS, TOL[case.dtype], device,
                                case.name, key)
        rows.append(row)
        if run is not None:
            final[key] = run
    if not final:
        return rows
    final["eager"] = case.fn
    buf = torch.empty_like(inputs[0])
    final["copy"] = lambda x, *_: buf.copy_(x)
    cmp = timing.compare(final, lambda: inputs, hw=hw, reps=args.reps, warmup=2, graph=False)
    nbytes = sum(t.numel() * t.element_size() for t in inputs) + \
        inputs[0].numel() * inputs[0].element_size()  # one full-size output
    copy_gbps = 2 * inputs[0].numel() * inputs[0].element_size() / \
        cmp.timings["copy"].median_ms / 1e6
    for name, t in cmp.timings.items():
        moved = 2 * inputs[0].numel() * inputs[0].element_size() if name == "copy" else nbytes
        gbps = moved / t.median_ms / 1e6
        rows.append({"case": case.name, "provider": name, "final": True, "ms": t.median_ms,
                     "gbps": gbps, "pct_copy": 100 * gbps / copy_gbps,
                     "x_eager": cmp.speedup(name, "eager").median,
                     "align1_ratio": (cmp.ratio("align1", name).median
                                      if "align1" in cmp.timings else None)})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    parts = case_rows(rows)
    if parts is None:
        return
    case, final, errors = parts
    print(f"\n{case}")
    print(f"  {'provider':<10}{'ms':>9}{'GB/s':>9}{'% copy':>8}{'x eager':>9}"
          f"{'t(align1)/t':>13}")
    for r in final:
        a1 = f"{r['align1_ratio']:.3f}" if r["align1_ratio"] else "-"
        print(f"  {r['provider']:<10}{r['ms']:>9.3f}{r['gbps']:>9.0f}{r['pct_copy']:>7.1f}%"
              f"{r['x_eager']:>9.2f}{a1:>13}")
    for r in errors:
        print(f"  {r['provider']:<10} WRONG OR FAILED: {r['error']}")


def main(argv: list[str] | None = None) -> int:
    cases = _cases()
    args = case_parser("align_ab", __doc__, cases, reps=30).parse_args(argv)
    cases = select_cases(cases, args.cases, "align_ab")
    det = local_gpu("align_ab")
    args.out.mkdir(parents=True, exist_ok=True)
    run_cases(args.out / "align_ab.jsonl", det, det.model, args.reps, cases,
              lambda case: run_case(case, det.model, args), print_table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
