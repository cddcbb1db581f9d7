"""The fp32 tiled matmul's operand and split knobs on the GPU: SWAP_AB (the tile as
C^T = B^T A^T), B_KMAJOR (B copied K-contiguous first), SPLIT_K (partial tiles summed by a
reduce kernel), PAD_K (zero-padded K-contiguous copies of A and B, the K loop unmasked), EVEN_K
and tile shapes, against eager torch.matmul, at the three KernelBench level-1 files where the
port still falls back to eager and two controls.

    python -m bench.matmul_knobs --out DIR [--cases kb6,kb8,...] [--reps 20]

Cases (M x K @ K x N, fp32 torch.rand operands, row-major, as KernelBench draws them):
kb6 256 x 524288 @ 524288 x 256 (16 tiles for 132 SMs: split-K), kb8 8205 x 2949 @ 2949 x 5921
(odd K and row strides: PAD_K), kb9 32768 x 32 @ 32 x 32768 (output-store bound: tile shapes),
sq4096 4096^3 and c1024 1024 x 8192 @ 8192 x 8192 (controls: B_KMAJOR's measured 1.7-1.8x).

Per case: `a @ b` is generated once (porter.codegen.generate, compiled, not interpreted), and
each config (the h100 default, `variants.default_config`, then the same with one knob changed)
runs once and is checked against float64 on its first and last 32 rows: `max rel err` is the
largest |error| over the largest |reference| and `x tol` the worst error over fp32's judge
tolerance (harness.tolerance: > 1 fails). A config that raises or fails the check is listed,
never timed. The rest and eager (torch.matmul, TF32 off: exact fp32, as KernelBench runs it)
are timed together (`harness.timing.compare`: interleaved, L2 flushed, --reps, medians). The
table gives ms, TFLOP/s (2MNK), x eager (eager's time over the config's) and the errors. Rows
go to DIR/matmul_knobs.jsonl after a line naming the device and versions.

Device time: about 3-5 minutes on an H100 for all cases (kb8 and the controls run ~10 configs
each at 3-9 ms; kb6's A and B take 1 GB).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from bench.configs import case_parser
from bench.configs import case_rows
from bench.configs import local_gpu
from bench.configs import run_cases
from bench.configs import select_cases

CHECK_ROWS = 32  # rows checked in float64 at each end of the output


def matmul(a, b):
    return a @ b


@dataclass(frozen=True)
class Case:
    name: str
    m: int
    k: int
    n: int

    def inputs(self, device: Any, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator(device=device).manual_seed(seed)
        return (torch.rand(self.m, self.k, generator=gen, device=device),
                torch.rand(self.k, self.n, generator=gen, device=device))


def _cases() -> list[Case]:
    return [Case("kb6", 256, 524288, 256), Case("kb8", 8205, 2949, 5921),
            Case("kb9", 32768, 32, 32768), Case("sq4096", 4096, 4096, 4096),
            Case("c1024", 1024, 8192, 8192)]


def configs(case: Case, default: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """label -> config: the default, then the same with one knob changed (and for kb6 the
    split counts at two tiles, for kb9 the tile shapes), without repeats."""
    d = dict(default)
    x3 = {"ieee": False, "tf32x3": True}
    out: dict[str, dict[str, Any]] = {
        "default": d,
        "swap": {**d, "SWAP_AB": True},
        "noswap_kmajor": {**d, "SWAP_AB": False, "B_KMAJOR": True},
        "noswap_nocopy": {**d, "SWAP_AB": False, "B_KMAJOR": False},  # B reordered per K step
        "pad": {**d, "PAD_K": True},
        "nopad": {**d, "PAD_K": False},
        "nopad_swap": {**d, "PAD_K": False, "SWAP_AB": True},
    }
    if case.k % d["BLOCK_K"] == 0:
        out["even_k"] = {**d, "EVEN_K": True}  # unmasked K loop: K is whole blocks already
    if case.name == "kb6":
        for s in (1, 8, 16, 32):
            out[f"split{s}"] = {**d, "SPLIT_K": s}
        out["split16_noswap"] = {**d, "SPLIT_K": 16, "SWAP_AB": False}
        out["split16_kmajor"] = {**d, "SPLIT_K": 16, "SWAP_AB": False, "B_KMAJOR": True}
        big = {**d, **x3, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "num_warps": 8,
               "num_stages": 3}
        for s in (33, 66):  # 66: two programs per SM
            out[f"128x128_split{s}"] = {**big, "SPLIT_K": s}
            out[f"128x128_split{s}_kmajor"] = {**big, "SPLIT_K": s, "SWAP_AB": False,
                                               "B_KMAJOR": True}
    if case.name == "kb9":
        for (bm, bn, w) in ((64, 64, 4), (128, 64, 4), (64, 128, 4), (128, 128, 8),
                            (128, 256, 8), (256, 128, 8)):
            for form, prec in (("x3", x3), ("ieee", {"ieee": True, "tf32x3": False})):
                out[f"{bm}x{bn}_w{w}_{form}"] = {
                    **d, **prec, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 32,
                    "GROUP_M": 8, "num_warps": w, "num_stages": 2}
    seen: list[dict[str, Any]] = []
    unique = {}
    for label, cfg in out.items():
        if cfg not in seen:
            seen.append(cfg)
            unique[label] = cfg
    return unique


def _check_rows(case: Case, device: Any) -> torch.Tensor:
    return torch.cat([torch.arange(min(CHECK_ROWS, case.m)),
                      torch.arange(max(case.m - CHECK_ROWS, 0), case.m)]).to(device)


def _check(mod: Any, inputs: tuple[torch.Tensor, ...], want: torch.Tensor, cfg: dict[str, Any],
           case: Case, label: str, device: str
           ) -> tuple[dict[str, Any], Callable[..., Any] | None]:
    """Run the config once; compare its first and last CHECK_ROWS rows with `want` (float64)."""
    from harness.tolerance import tolerance

    row: dict[str, Any] = {"case": case.name, "provider": label, "config": cfg}
    a, b = inputs
    rows = _check_rows(case, a.device)
    try:
        got = mod.launch(a, b, config=cfg)
        if device == "cuda":
            torch.cuda.synchronize()
        got = got[rows].double()
    except Exception as exc:  # noqa: BLE001 - a config that fails is a result
        return {**row, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}, None
    err = (got - want).abs()
    tol = tolerance(torch.float32)
    rel = float(err.max() / want.abs().max()) if torch.isfinite(got).all() else float("inf")
    x_tol = float((err / (tol.atol + tol.rtol * want.abs())).max())
    row.update(max_rel_err=rel, x_tol=x_tol)
    if not x_tol <= 1:
        return {**row, "error": f"x tol {x_tol:.3g} > 1 (max rel err {rel:.3g})"}, None
    return row, lambda *args: mod.launch(*args, config=cfg)


def run_case(case: Case, hw: Any, args: argparse.Namespace, device: str = "cuda",
             interpret: bool = False) -> list[dict[str, Any]]:
    """The case's rows: each config's check, then the timings. `device` and `interpret` let a
    test run a small case on the CPU with a stand-in `compare`."""
    from harness import timing
    from porter.codegen import generate
    from porter.codegen import load_generated_module

    small = (torch.rand(48, 80), torch.rand(80, 112))
    op = generate(matmul, small, name=f"knobs_{case.name}")
    mod = load_generated_module(op.triton_module_source(), op.name, interpret=interpret)
    inputs = case.inputs(torch.device(device))
    meta = tuple(torch.empty_strided(t.shape, t.stride(), device="meta") for t in inputs)
    default = op.default_config(hw, meta)
    want = inputs[0][_check_rows(case, inputs[0].device)].double() @ inputs[1].double()
    rows: list[dict[str, Any]] = []
    final: dict[str, Callable[..., Any]] = {}
    for label, cfg in configs(case, default).items():
        row, run = _check(mod, inputs, want, cfg, case, label, device)
        # what the launcher resolves for this config (the op mirrors it for the compile check)
        _, knobs = op._tiled_launch(meta, cfg, sms=int(hw.compute_units.value))
        row["resolved"] = {k: knobs[k] for k in ("SWAP_AB", "EVEN_K", "splits", "K",
                                                 "ACC_CHUNK") if k in knobs}
        rows.append(row)
        if run is not None:
            final[label] = run
    if not final:
        return rows
    final["eager"] = torch.matmul
    cmp = timing.compare(final, lambda: inputs, hw=hw, reps=args.reps, warmup=2, graph=False)
    flops = 2 * case.m * case.n * case.k
    checked = {r["provider"]: r for r in rows}
    for name, t in cmp.timings.items():
        r = checked.get(name, {})
        rows.append({"case": case.name, "provider": name, "final": True, "ms": t.median_ms,
                     "tflops": flops / t.median_ms / 1e9,
                     "x_eager": cmp.speedup(name, "eager").median,
                     "max_rel_err": r.get("max_rel_err"), "x_tol": r.get("x_tol"),
                     "resolved": r.get("resolved"), "config": r.get("config")})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    parts = case_rows(rows)
    if parts is None:
        return
    case, final, errors = parts
    print(f"\n{case}")
    print(f"  {'config':<24}{'ms':>9}{'TFLOP/s':>9}{'x eager':>9}{'max rel err':>13}"
          f"{'x tol':>8}  resolved / tile")
    for r in sorted(final, key=lambda r: r["ms"]):
        cfg = r["config"] or {}
        tile = (f"{cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} w{cfg['num_warps']} "
                f"s{cfg['num_stages']}{' ieee' if cfg.get('ieee') else ''}" if cfg else "")
        err = f"{r['max_rel_err']:13.2e}{r['x_tol']:8.3f}" if r["max_rel_err"] is not None \
            else f"{'-':>13}{'-':>8}"
        print(f"  {r['provider']:<24}{r['ms']:>9.3f}{r['tflops']:>9.1f}{r['x_eager']:>9.2f}"
              f"{err}  {r['resolved'] or ''} {tile}")
    for r in errors:
        print(f"  {r['provider']:<24} WRONG OR FAILED: {r['error']}")


def main(argv: list[str] | None = None) -> int:
    cases = _cases()
    args = case_parser("matmul_knobs", __doc__, cases, reps=20).parse_args(argv)
    cases = select_cases(cases, args.cases, "matmul_knobs")
    det = local_gpu("matmul_knobs")
    torch.backends.cuda.matmul.allow_tf32 = False  # eager is exact fp32, as KernelBench runs it
    args.out.mkdir(parents=True, exist_ok=True)

    def run(case: Case) -> list[dict[str, Any]]:
        rows = run_case(case, det.model, args)
        torch.cuda.empty_cache()
        return rows

    run_cases(args.out / "matmul_knobs.jsonl", det, det.model, args.reps, cases, run,
              print_table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
