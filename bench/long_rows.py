"""Long rows on the GPU: the row-wise generator's long-row families (split_row, looped_l2,
split_coop) against its other families, torch eager and torch.compile, at the shapes of issue 31.

    python -m bench.long_rows --out DIR [--cases ln3_16x64x256x256_fp32,...]
                              [--per-family 2] [--per-new 3] [--reps 20] [--no-compile]

Per case: the generated module (compiled, not interpreted) runs up to --per-family configs of
each existing family the variant space offers at that shape (the launcher's own default config
among them) and --per-new of each long-row family (every split_coop config), as different from
each other as the space allows; each config's
output is first checked against the reference in float64 on the first rows (rows are
independent; a 6.4 GB softmax has no float64 copy), and a wrong config is listed, never timed.
The right ones are screened (`harness.timing.compare`, interleaved, L2 flushed, --screen-reps),
then the best of each family, eager and torch.compile are timed together (--reps, medians). The
table gives ms, GB/s (inputs read once + outputs written once: the ideal traffic), % of the
device's measured copy bandwidth (hwmodels), and speedups over eager and torch.compile. Rows go
to DIR/long_rows.jsonl after a line naming the device and versions.

Device time: ~3-4 minutes on an H100 with the defaults, most of it compiling (about 100
kernels) and torch.compile; --cases and --no-compile cut it.
"""

from __future__ import annotations

import argparse
import time
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

NEW = ("split_row", "looped_l2", "split_coop")
# families whose every config is tried: split_coop's space is small (15 configs, 5 kernels at
# most) and its best differs by width and dtype (bench/NOTES.md item 51); a config whose
# programs cannot all be resident fails at launch at once
EVERY = ("split_coop",)
CHECK_ROWS = 8  # rows checked in float64
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 4e-3}  # max|err| / max|ref|


def layernorm3(x, w, b):
    return F.layer_norm(x, x.shape[1:], w, b, 1e-5)


def softmax(x):
    return torch.softmax(x, dim=-1)


def log_softmax(x):
    return torch.log_softmax(x, dim=-1)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def instance_norm(x):
    return F.instance_norm(x, eps=1e-5)  # KernelBench 34: rows of H x W, no weights


def group_norm(x, w, b):
    return F.group_norm(x, 8, w, b, 1e-5)  # KernelBench 35: rows of C/8 channels x H x W


def l1_norm(x):
    return x / torch.mean(torch.abs(x), dim=1, keepdim=True)  # KernelBench 38


def l2_norm(x):
    return x / torch.norm(x, p=2, dim=1, keepdim=True)  # KernelBench 39


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    shape: tuple[int, ...]  # of x; weights take the normalised dims
    dtype: torch.dtype
    weights: int = 0  # trailing-dim tensors after x (layernorm: w, b; rmsnorm: w)
    norm_dims: int = 1  # trailing dims the weights cover
    channels: bool = False  # the weights cover dim 1 instead (group norm's per channel)
    small_shape: tuple[int, ...] | None = None  # the example's, where the default does not fit

    def inputs(self, device: Any, seed: int = 0) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(self.shape, generator=gen, device=device, dtype=self.dtype)
        w_shape = self.shape[1:2] if self.channels else self.shape[-self.norm_dims:]
        ws = [torch.randn(w_shape, generator=gen, device=device, dtype=self.dtype)
              for _ in range(self.weights)]
        return (x, *ws)

    def small(self) -> tuple[torch.Tensor, ...]:
        """Example inputs of the same rank and dtype, to generate the module from."""
        shape = self.small_shape or (tuple(min(s, 4) for s in self.shape[:-self.norm_dims])
                                     + tuple(min(s, 8) for s in self.shape[-self.norm_dims:]))
        return Case(self.name, self.fn, shape, self.dtype, self.weights, self.norm_dims,
                    self.channels).inputs("cpu")


def _cases() -> list[Case]:
    out = [Case("ln3_16x64x256x256_fp32", layernorm3, (16, 64, 256, 256), torch.float32, 2, 3),
           Case("softmax_4096x393216_fp32", softmax, (4096, 393216), torch.float32),
           # the suite's Llama-3 vocabulary row
           Case("softmax_4096x128256_bf16", softmax, (4096, 128256), torch.bfloat16),
           Case("in_112x64x512x512_fp32", instance_norm, (112, 64, 512, 512), torch.float32,
                norm_dims=2)]
    for fn in (softmax, log_softmax):
        for width in (50257, 151936):
            for dt, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
                out.append(Case(f"{fn.__name__}_4096x{width}_{tag}", fn, (4096, width), dt))
    out.append(Case("rmsnorm_16x4194304_fp32", rmsnorm, (16, 4194304), torch.float32, 1, 1))
    out.append(Case("gn8_112x64x512x512_fp32", group_norm, (112, 64, 512, 512), torch.float32, 2,
                    channels=True, small_shape=(2, 16, 4, 8)))
    # KernelBench 38/39's rows: 65,535 fp32, not 16-byte aligned
    out += [Case(f"{fn.__name__}_32768x65535_fp32", fn, (32768, 65535), torch.float32)
            for fn in (l1_norm, l2_norm)]
    return out


def family(cfg: dict[str, Any]) -> str:
    return cfg["strategy"]


def pick(space: list[dict[str, Any]], default: dict[str, Any], per_family: int,
         per_new: int) -> dict[str, list[dict[str, Any]]]:
    """Up to per_family configs of each family (per_new of the long-row ones, all of EVERY's),
    as different from each other as the space allows: the launcher's default (or the family's middle
    config) first, then each time the config differing from every one chosen in the most
    knobs (ties: space order)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for c in space:
        by.setdefault(family(c), []).append(c)
    out = {}
    for fam, cfgs in by.items():
        n = len(cfgs) if fam in EVERY else per_new if fam in NEW else per_family
        chosen = [default if family(default) == fam else cfgs[len(cfgs) // 2]]
        while len(chosen) < min(n, len(cfgs)):
            chosen.append(max((c for c in cfgs if c not in chosen),
                              key=lambda c, chosen=chosen: _spread(c, chosen)))
        out[fam] = chosen
    return out


def _spread(c: dict[str, Any], chosen: list[dict[str, Any]]) -> int:
    """The fewest knobs in which `c` differs from any config of `chosen`."""
    return min(sum(c.get(k) != o.get(k) for k in set(c) | set(o)) for o in chosen)


def run_case(case: Case, hw: Any, args: argparse.Namespace, device: str = "cuda",
             interpret: bool = False) -> list[dict[str, Any]]:
    """The case's rows: each tried config (wrong ones with why), then the final timings.
    `device` and `interpret` let a test run it on the CPU with a stand-in `compare`."""
    from harness import timing
    from porter.codegen import generate
    from porter.codegen import load_generated_module

    t0 = time.time()
    # one module per op (its kernels are typed at launch): a config compiled for one case is
    # reused by the next case of the same op where dtypes and specializations agree
    name = f"lr_{case.fn.__name__}"
    op = generate(case.fn, case.small(), name=name)
    mod = load_generated_module(op.triton_module_source(), name, interpret=interpret)
    inputs = case.inputs(torch.device(device))
    space = op.variant_space(hw, inputs, case.dtype)
    default = op.default_config(hw, inputs, case.dtype)
    chosen = pick(space, default, args.per_family, args.per_new)
    # float64 reference on the first rows (each row is independent)
    head = tuple(t[:CHECK_ROWS] if i == 0 else t for i, t in enumerate(inputs))
    want = case.fn(*(t.double() for t in head))
    rows: list[dict[str, Any]] = []
    good: dict[str, Callable[..., Any]] = {}
    for fam, cfgs in chosen.items():
        for i, cfg in enumerate(cfgs):
            key = f"{fam}#{i}"
            row, run = check_config(mod, inputs, cfg, want, CHECK_ROWS, TOL[case.dtype], device,
                                    case.name, key)
            rows.append(row)
            if run is not None:
                good[key] = run
    if not good:
        return rows
    make_args = lambda: inputs  # noqa: E731 - one set: every case's input is far over L2
    screen = timing.compare(good, make_args, hw=hw, reps=args.screen_reps, warmup=1, graph=False)
    for r in rows:  # every right config's screen time, to see each family's spread
        if r["provider"] in screen.timings:
            r["screen_ms"] = screen.timings[r["provider"]].median_ms
    best: dict[str, str] = {}
    for key, t in screen.timings.items():
        fam = key.split("#")[0]
        if fam not in best or t.median_ms < screen.timings[best[fam]].median_ms:
            best[fam] = key
    final: dict[str, Callable[..., Any]] = {fam: good[key] for fam, key in best.items()}
    final["eager"] = case.fn
    if not args.no_compile:
        compiled = torch.compile(case.fn, dynamic=False)
        final["torch.compile"] = compiled
    cmp = timing.compare(final, make_args, hw=hw, reps=args.reps, warmup=2, graph=False)
    nbytes = sum(t.numel() * t.element_size() for t in inputs) + \
        inputs[0].numel() * inputs[0].element_size()  # one full-size output
    copy = hw.measured_value("copy_bandwidth_gbps") or hw.peak_bandwidth_gbps
    for name, t in cmp.timings.items():
        ms = t.median_ms
        gbps = nbytes / ms / 1e6
        row = {"case": case.name, "provider": name, "final": True, "ms": ms, "gbps": gbps,
               "pct_copy": 100 * gbps / copy,
               "x_eager": cmp.speedup(name, "eager").median,
               "x_compile": (cmp.speedup(name, "torch.compile").median
                             if "torch.compile" in cmp.timings else None),
               "config": next((r["config"] for r in rows
                               if r["provider"] == best.get(name)), None)}
        rows.append(row)
    rows.append({"case": case.name, "seconds": time.time() - t0})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    parts = case_rows(rows)
    if parts is None:
        return
    case, final, errors = parts
    print(f"\n{case}")
    print(f"  {'provider':<15}{'ms':>9}{'GB/s':>9}{'% copy':>8}{'x eager':>9}{'x compile':>10}"
          "  config")
    for r in sorted(final, key=lambda r: r["ms"]):
        xc = f"{r['x_compile']:.2f}" if r["x_compile"] is not None else "-"
        cfg = {k: v for k, v in (r["config"] or {}).items() if k not in ("dtype", "strategy")}
        print(f"  {r['provider']:<15}{r['ms']:>9.3f}{r['gbps']:>9.0f}{r['pct_copy']:>7.1f}%"
              f"{r['x_eager']:>9.2f}{xc:>10}  {cfg or ''}")
    for r in errors:
        print(f"  {r['provider']:<15} WRONG OR FAILED: {r['error']}  {r['config']}")
    screened = sorted((r for r in rows if "screen_ms" in r), key=lambda r: r["screen_ms"])
    if screened and final:
        fastest = screened[0]["screen_ms"]
        print(f"  screened ({len(screened)} configs, median of --screen-reps; x: time over the "
              "fastest's)")
        for r in screened:
            cfg = {k: v for k, v in (r["config"] or {}).items() if k != "dtype"}
            print(f"    {r['provider']:<15}{r['screen_ms']:>9.3f}{r['screen_ms'] / fastest:>7.2f}x"
                  f"  {cfg}")


def main(argv: list[str] | None = None) -> int:
    cases = _cases()
    ap = case_parser("long_rows", __doc__, cases, reps=20)
    ap.add_argument("--per-family", type=int, default=2,
                    help="configs tried per existing family (the default among them)")
    ap.add_argument("--per-new", type=int, default=3,
                    help="configs tried per long-row family (" + ", ".join(NEW) + ")")
    ap.add_argument("--screen-reps", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="leave out torch.compile")
    args = ap.parse_args(argv)
    cases = select_cases(cases, args.cases, "long_rows")
    det = local_gpu("long_rows")
    hw = det.model
    args.out.mkdir(parents=True, exist_ok=True)

    def run(case: Case) -> list[dict[str, Any]]:
        rows = run_case(case, hw, args)
        torch.cuda.empty_cache()  # the case's inputs and outputs (up to 13 GB) go back
        return rows

    run_cases(args.out / "long_rows.jsonl", det, hw, args.reps, cases, run, print_table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
