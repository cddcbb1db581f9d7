"""Probe: what the fused epilogue of the TMA matmul costs, and which changes to it pay.

bench/NOTES.md item 29. matmul+bias+GELU runs at 88% / 93.5% of cuBLAS's matmul alone at
4096^3 / 8192^3 on the H100 and level with eager; its epilogue (bias add, GELU, store) runs
between tiles in the same warps as the main loop, so each tile pays for it in full. This
builds variants of the generated `tma_persistent` kernel by editing its source text (each edit
must apply exactly, or the probe stops), checks each against a float64 reference, and times
them interleaved beside eager and cuBLAS's matmul alone:

- base: the kernel as the porter generates it;
- gelu_ops: GELU spelled out op by op (0.5 x (1 + erf(x / sqrt 2)) with the 16-bit erfc
  formula), as the emitter wrote it before the whole-GELU helper `porter_gelu`;
- bias_row: the bias loaded as one [1, BLOCK_N] row (mask on N only) instead of a
  [BLOCK_M, BLOCK_N] broadcast load;
- tma_store: the result stored with a TMA store (a descriptor made in the kernel) instead of
  pointer stores;
- both: bias_row and tma_store;
- no_epilogue: the accumulator stored as it is (not the op: the bound on what any epilogue
  change can gain; not checked).

With --compile-only TARGET it cross-compiles every variant on the CPU instead (registers,
spills, shared memory, SASS counts of global/shared memory instructions) and times nothing.

    python bench/probe_matmul_epilogue.py --out /tmp/epi
    python bench/probe_matmul_epilogue.py --compile-only h100
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import torch  # noqa: E402

# The configs the H100 suite picked (results/h100-2026-11-23-run6/): 4096^3 and 8192^3.
PICKS = {
    (4096, 4096, 4096): {"strategy": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256,
                         "BLOCK_K": 64, "GROUP_M": 4, "FLATTEN": False, "SUBTILE": True,
                         "num_warps": 8, "num_stages": 4},
    (8192, 8192, 8192): {"strategy": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256,
                         "BLOCK_K": 64, "GROUP_M": 8, "FLATTEN": False, "SUBTILE": True,
                         "num_warps": 8, "num_stages": 3},
}
# Tiles small enough for two programs per SM (shared memory and registers, from
# `--compile-only`): one program's epilogue can then run beside the other's main loop.
_SMALL = {"strategy": "tma_persistent", "BLOCK_M": 128, "BLOCK_K": 64, "FLATTEN": False}
CONFIGS = {
    "128x128 w4 st3 1/SM": {**_SMALL, "BLOCK_N": 128, "GROUP_M": 8, "SUBTILE": True,
                            "num_warps": 4, "num_stages": 3, "PROGRAMS_PER_SM": 1},
    "128x128 w4 st3 2/SM": {**_SMALL, "BLOCK_N": 128, "GROUP_M": 8, "SUBTILE": True,
                            "num_warps": 4, "num_stages": 3, "PROGRAMS_PER_SM": 2},
    "128x128 w4 st3 2/SM flat": {**_SMALL, "BLOCK_N": 128, "GROUP_M": 8, "SUBTILE": True,
                                 "num_warps": 4, "num_stages": 3, "PROGRAMS_PER_SM": 2,
                                 "FLATTEN": True},
    "128x128 w8 st3 1/SM": {**_SMALL, "BLOCK_N": 128, "GROUP_M": 8, "SUBTILE": True,
                            "num_warps": 8, "num_stages": 3, "PROGRAMS_PER_SM": 1},
    "128x128 w8 st3 2/SM": {**_SMALL, "BLOCK_N": 128, "GROUP_M": 8, "SUBTILE": True,
                            "num_warps": 8, "num_stages": 3, "PROGRAMS_PER_SM": 2},
    "128x64 w4 st4 2/SM": {**_SMALL, "BLOCK_N": 64, "GROUP_M": 8, "SUBTILE": False,
                           "num_warps": 4, "num_stages": 4, "PROGRAMS_PER_SM": 2},
}
STORE = "tl.store(out0_ptr + offs_m * out0_s0 + offs_n * out0_cs1, ({v}).to(out0_ptr.dtype.element_ty), mask=mask)"
GELU = "v3 = porter_gelu(v2, {lowp})"
BIAS = "x1 = tl.load(in2_ptr + (offs_n * in2_cs0), mask=mask, other=0.0).to(tl.float32)"
TILE_ROWS = "rm = (first_c + ((tile_c % num_pid_in_group) % size_c)) * BLOCK_M + tl.arange(0, BLOCK_M)"


def _replace(text: str, old: str, new: str, count: int) -> str:
    if text.count(old) != count:
        raise SystemExit(f"probe out of date: expected {count} x {old!r} in the TMA kernel, "
                         f"found {text.count(old)}")
    return text.replace(old, new)


def _tma_kernel_span(src: str) -> tuple[int, int]:
    start = src.index("_matmul_tma_kernel(\n")
    return start, src.index("\ndef _tma_descriptor", start)


def variant_source(src: str, name: str) -> str:
    """The generated module with its TMA kernel edited as variant `name` (SUBTILE configs)."""
    a, b = _tma_kernel_span(src)
    k = src[a:b]
    # the epilogue's result variable: the one the stores write
    v = re.search(r"offs_n \* out0_cs1, \((\w+)\)\.to\(", k).group(1)
    store_line = STORE.format(v=v)
    if name == "gelu_ops":
        # GELU op by op, as the emitter wrote it before porter_gelu (bench/NOTES.md item 29)
        lowp = re.search(r"porter_gelu\(v2, (.*)\)\n", k).group(1)
        k = _replace(k, GELU.format(lowp=lowp),
                     f"v3 = (v2 * 0.5) * porter_one_plus_erf(v2 * 0.7071067811865475, {lowp})", 3)
    if name in ("bias_row", "both"):
        k = _replace(k, BIAS, BIAS.replace("mask=mask", "mask=offs_n < N"), 3)
    if name in ("tma_store", "both"):
        # one descriptor per program, for the N halves the SUBTILE epilogue stores
        k = _replace(k, "    for tile in tl.range(",
                     "    out_desc = tl.make_tensor_descriptor(out0_ptr, [M, N], [out0_s0, 1], "
                     "[BLOCK_M, BLOCK_N // 2])\n    for tile in tl.range(", 1)
        k = _replace(k, TILE_ROWS,
                     "m0 = (first_c + ((tile_c % num_pid_in_group) % size_c)) * BLOCK_M\n"
                     "        rm = m0 + tl.arange(0, BLOCK_M)", 1)
        stores = k.split(store_line)
        if len(stores) != 4:
            raise SystemExit("probe out of date: the TMA kernel has not 3 stores")
        store = "out_desc.store([m0, {n}], ({v}).to(out0_ptr.dtype.element_ty))"
        k = (stores[0] + store.format(n="start_n", v=v) + stores[1]
             + store.format(n="start_n + BLOCK_N // 2", v=v) + stores[2] + store_line + stores[3])
    if name == "no_epilogue":
        lines = k.split("\n")
        kept = [ln for ln in lines if not re.match(r"\s+(x1|v\d+) = ", ln)]
        k = _replace("\n".join(kept), f"({v}).to(", "(acc).to(", 3)
    elif name != "base" and k == src[a:b]:
        raise SystemExit(f"unknown variant {name}")
    return src[:a] + k + src[b:]


VARIANTS = ("base", "gelu_ops", "bias_row", "tma_store", "both", "no_epilogue")


def compile_only(target: str, shape: tuple[int, ...]) -> int:
    """Cross-compile each variant for `target` on the CPU and print what it compiles to."""
    from compile_report import sass_counts, sass_text
    from sweep import DTYPES
    from sweep import generated

    import hwmodels
    import targets
    from targets.base import LaunchConfig

    hw = hwmodels.get(target)
    spec, gen_op = generated("matmul_bias_gelu")
    inputs = tuple(spec.make_inputs(shape, DTYPES["bf16"], torch.device("meta"),
                                    torch.Generator().manual_seed(0)))
    config = PICKS[shape]
    with tempfile.TemporaryDirectory() as tmp:
        for name in VARIANTS:
            path = Path(tmp) / f"{name}.py"
            path.write_text(variant_source(gen_op.triton_module_source(), name))
            for ref in gen_op.kernel_refs(inputs, config, source_path=str(path)):
                rep = targets.for_device(hw).compile(
                    ref, LaunchConfig(config["num_warps"], config["num_stages"]), hw)
                r = rep.resources
                line = (f"{name:12s} {r.registers_per_thread} registers, {r.spill_bytes} B "
                        f"spilled, {r.shared_memory_bytes} B shared")
                if rep.binary is not None and hw.build.backend == "triton-cuda":
                    c = sass_counts(sass_text(rep.binary))
                    mem = {k: v for k, v in sorted(c.items())
                           if k.startswith(("LDG", "STG", "LDS", "STS", "UTMA", "BAR"))}
                    line += f"; {sum(c.values())} SASS, {mem}"
                print(line + ("" if rep.fits else f"; does not fit: {rep.reasons}"), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096x4096x4096,8192x8192x8192")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="epilogue variants of the pick to time")
    ap.add_argument("--configs", default="", help=f"of {sorted(CONFIGS)}, comma-separated, "
                    "timed as generated (base)")
    ap.add_argument("--compile-only", metavar="TARGET", default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    shapes = [tuple(int(s) for s in sh.split("x")) for sh in args.shapes.split(",")]
    if args.compile_only:
        for shape in shapes:
            print(f"-- {'x'.join(map(str, shape))} on {args.compile_only}")
            compile_only(args.compile_only, shape)
        return 0

    import triton
    from suite import matmul_alone_provider
    from sweep import _max_rel_err
    from sweep import generated

    import hwmodels
    from harness import env_info
    from harness.timing import compare
    from harness.timing import require_gpu
    from porter.codegen import load_generated_module

    require_gpu()
    if args.out is None:
        raise SystemExit("--out DIR is needed to time")
    args.out.mkdir(parents=True, exist_ok=True)
    hw = hwmodels.detect().model
    report: dict = {"device": hwmodels.detect().device_name, "versions": env_info.versions(),
                    "shapes": {}}
    spec, gen_op = generated("matmul_bias_gelu")
    dev = torch.device("cuda")
    variants = [v for v in args.variants.split(",") if v]
    modules = {v: load_generated_module(variant_source(gen_op.triton_module_source(), v),
                                        f"epi_{v}", interpret=False) for v in {*variants, "base"}}
    triton.set_allocator(modules["base"]._scratch)  # in-kernel descriptors (tma_store)
    runs = [(v, v, PICKS) for v in variants]
    runs += [(c, "base", {s: CONFIGS[c] for s in PICKS}) for c in args.configs.split(",") if c]
    for shape in shapes:
        tag = "x".join(map(str, shape))
        providers = {}
        errors: dict[str, float] = collections.OrderedDict()
        for i, (name, variant, configs) in enumerate(runs):
            config, module = configs[shape], modules[variant]
            inputs = spec.make_inputs(shape, torch.bfloat16, dev,
                                      torch.Generator(dev).manual_seed(100 + i))
            out = module.launch(*inputs, config=config)
            if name != "no_epilogue":
                errors[name] = _max_rel_err(out, spec.reference(*[x.double() for x in inputs]))
                print(f"{tag} {name}: max error {errors[name]:.2e} of the reference's scale",
                      flush=True)
                if errors[name] > 2e-2:
                    continue
            providers[name] = (lambda *a, _m=module, _c=config: _m.launch(*a, config=_c))
        providers["eager"] = spec.reference
        providers["matmul_alone"] = matmul_alone_provider()
        cmp = compare(providers, lambda _s=shape: tuple(spec.make_inputs(
            _s, torch.bfloat16, dev, torch.Generator(dev))), hw=hw, reps=args.reps, warmup=3)
        flops = 2 * shape[0] * shape[1] * shape[2]
        alone = cmp.timings["matmul_alone"].median_ms
        rows = {}
        for name, t in cmp.timings.items():
            print(f"{tag} {name:14s} {t.median_ms * 1e3:8.1f} us  "
                  f"{flops / t.median_ms / 1e9:5.0f} TFLOP/s  {alone / t.median_ms:6.1%} of "
                  f"cuBLAS alone  p20-p80 {t.p20_ms * 1e3:.1f}-{t.p80_ms * 1e3:.1f}", flush=True)
            rows[name] = {"median_ms": t.median_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms}
        report["shapes"][tag] = {"pick": PICKS[shape], "configs": {
            c: CONFIGS[c] for c in args.configs.split(",") if c}, "max_rel_err": errors,
            "timings": rows}
    (args.out / "epilogue_probe.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
