"""What a call costs from Python: the pack beside a bare launch, eager, torch.compile and Liger.

    python -m bench.call_cost --out results/<device>-<date>-call-cost [--ops rmsnorm,softmax]

For each example op, on the GPU it runs on:
  1. `porter.port.port` ports the op for this device at decode rows (1-512 rows) and two larger
     shapes, bf16 (the port's own search; no hand-picked configs), and the pack is loaded;
  2. at each shape and in each input form a model hands over (2-D rows; (batch, seq, hidden);
     rows strided in a wider buffer; `out=`), the pack's result is checked against the
     reference computed in fp32 (fresh random inputs, the output poisoned first);
  3. each provider is timed three ways:
       cpu_us    host time per call until it returns, calls back to back (its Python and
                 launch cost; harness.timing.call_time)
       call_us   host time per call until the device is done: what a caller sees, the larger
                 of the CPU cost and the device time (harness.timing.call_time)
       device_us device time per call, the calls captured in a CUDA graph and replayed
                 (triton.testing.do_bench_cudagraph): launch cost removed
     Providers: `pack` (the loaded pack's call), `custom_op` (torch.ops.kernel_porter.<op>,
     what porter.patch uses), `compiled_launch` (the same compiled kernels with the same
     arguments through Triton's CompiledKernel[grid](...): a bare launch), `jit_launch` (the
     same kernels through JITFunction[grid](...), what a tutorial-style launcher pays),
     `eager` (the spec's reference), `compile` (torch.compile of it), `liger` where Liger-Kernel
     has the op and is installed.
  4. `rows.jsonl` (each row as measured), `results.json`, and `SUMMARY.md` (device, versions,
     method, the tables).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

DECODE_ROWS = [1, 8, 32, 128, 512]
OPS: dict[str, dict[str, Any]] = {
    "rmsnorm": {"width": 4096},
    "layernorm": {"width": 4096},
    "add_rmsnorm": {"width": 4096},
    "softmax": {"width": 4096},
    "cross_entropy": {"width": 32000},
    "gelu": {"width": 4096},
    "swiglu": {"width": 4096},
}
LARGE_ROWS = [4096, 16384]


def units(op: str) -> list[tuple[int, int]]:
    width = OPS[op]["width"]
    return [(r, width) for r in DECODE_ROWS + LARGE_ROWS]


def forms(inputs: tuple[Any, ...], rows_of: list[int], nd: bool) -> dict[str, tuple[Any, ...]]:
    """The input forms a model hands over, from 2-D inputs: the row-indexed inputs (`rows_of`,
    the manifest's leading_dims) as (batch, seq, ...) where the reference takes them so (`nd`:
    the port's verdict; F.cross_entropy reads a 3-D input's dim 1 as classes), and as rows
    strided in a wider buffer."""
    import torch

    n = inputs[0].shape[0]
    batch = 2 if n % 2 == 0 else 1
    batched = tuple(t.view(batch, n // batch, *t.shape[1:]) if i in rows_of else t
                    for i, t in enumerate(inputs))
    strided = []
    for i, t in enumerate(inputs):
        if i in rows_of and t.dim() == 2:
            buf = torch.empty(t.shape[0], t.shape[1] + 64, dtype=t.dtype, device=t.device)
            buf[:, :t.shape[1]].copy_(t)
            strided.append(buf[:, :t.shape[1]])
        else:
            strided.append(t)
    return {"2d": inputs, **({"3d": batched} if nd else {}), "strided": tuple(strided)}


def check(packed: Any, reference: Callable[..., Any], inputs: tuple[Any, ...],
          use_out: bool) -> dict[str, Any]:
    """The pack's result against the reference in fp32: shape, dtype and values."""
    import torch

    def listed(r: Any) -> list[Any]:
        return list(r) if isinstance(r, (tuple, list)) else [r]

    wants = listed(reference(*[t.float() if isinstance(t, torch.Tensor) and t.is_floating_point()
                               else t for t in inputs]))
    dtypes = [r.dtype for r in listed(reference(*inputs))]
    if use_out:
        outs = [torch.full(w.shape, float("nan"), dtype=d, device=w.device)
                for w, d in zip(wants, dtypes, strict=True)]
        given = outs[0] if len(outs) == 1 else tuple(outs)
        got = packed(*inputs, out=given)
        same_object = got is given
    else:
        got, same_object = packed(*inputs), True
    gots = listed(got)
    ok_shape = len(gots) == len(wants) and all(
        tuple(g.shape) == tuple(w.shape) and g.dtype == d
        for g, w, d in zip(gots, wants, dtypes, strict=False))
    err, scale = 0.0, 1.0
    if ok_shape:
        for g, w in zip(gots, wants, strict=True):
            if g.numel():
                err = max(err, float((g.float() - w.float()).abs().max()))
                scale = max(scale, float(w.float().abs().max()))
    ok = ok_shape and same_object and err <= 2e-2 * scale and not math.isnan(err)
    return {"ok": bool(ok), "shapes": [list(g.shape) for g in gots],
            "dtypes": [str(g.dtype) for g in gots], "max_abs_err": err}


def launch_providers(packed: Any, inputs: tuple[Any, ...]) -> dict[str, Callable[[], Any]]:
    """`compiled_launch` and `jit_launch` of the kernels the pack's launcher runs for these
    inputs, with the same arguments (recorded once: porter.packs.bound)."""
    from porter.packs import bound

    choice = packed.choose(*inputs)
    if not choice.runs_kernel or choice.bucket["file"].endswith(".metal"):
        return {}
    merged = packed._merged(inputs, None)
    args = merged.inputs if merged is not None else inputs
    module = packed._module(choice.bucket["file"], False)
    runner = packed._fast.get(_key(inputs))
    config = getattr(runner, "config", choice.config)
    rec = bound.record(lambda: module.launch(*args, config=config))
    launches = list(rec.launches)

    def compiled() -> None:
        for x in launches:
            x.kernel[x.grid](*x.args)

    def jit() -> None:
        for x in launches:
            x.jit_fn[x.call_grid](*x.call_args, **x.call_kwargs)

    return {"compiled_launch": compiled, "jit_launch": jit}


def _key(inputs: tuple[Any, ...]) -> Any:
    from porter.packs.loader import call_key

    return call_key(inputs, None)


def device_us(fn: Callable[[], Any]) -> float | None:
    import triton.testing

    try:
        return float(triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")) * 1e3
    except Exception as exc:  # noqa: BLE001 - a provider that cannot be captured: said, not timed
        print(f"      (device time not taken: {type(exc).__name__}: {exc})", flush=True)
        return None


def summarize(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"# Call cost: {meta['device']} ({meta['hw_model']})", "",
             f"Date {meta['date']}; versions {json.dumps(meta['versions'])}; commit "
             f"{meta['git_rev']}.", "", meta["method"], ""]
    provs = ["pack", "custom_op", "compiled_launch", "jit_launch", "eager", "compile", "liger"]
    for what in ("cpu_us", "call_us", "device_us"):
        lines += [f"## {what}", "", "| op | shape | form | " + " | ".join(provs) +
                  " | pack/eager | pack/bare |",
                  "|" + "---|" * (len(provs) + 5)]
        for r in rows:
            t = r["times"]
            cells = [f"{t[p][what]:.1f}" if p in t and t[p].get(what) is not None else "-"
                     for p in provs]
            pe = (t["pack"][what] / t["eager"][what]
                  if t.get("pack", {}).get(what) and t.get("eager", {}).get(what) else None)
            pb = (t["pack"][what] / t["compiled_launch"][what]
                  if t.get("pack", {}).get(what) and t.get("compiled_launch", {}).get(what)
                  else None)
            lines.append(f"| {r['op']} | {'x'.join(map(str, r['shape']))} | {r['form']} | "
                         + " | ".join(cells) + f" | {'-' if pe is None else f'{pe:.2f}'} | "
                         f"{'-' if pb is None else f'{pb:.2f}'} |")
        lines.append("")
    bad = [r for r in rows if not r["check"]["ok"]]
    lines += ["## Correctness of every form", "",
              f"{len(rows) - len(bad)} of {len(rows)} rows match the fp32 reference in shape, "
              "dtype and values (atol 2e-2 x max|ref|)."]
    lines += [f"- FAILED {r['op']} {r['shape']} {r['form']}: {r['check']}" for r in bad]
    lines += ["", "## What ran", ""]
    lines += [f"- {r['op']} {'x'.join(map(str, r['shape']))} {r['form']}: {r['path']}"
              for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.call_cost", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--out", required=True, help="results folder (created)")
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join(OPS)}")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    args = ap.parse_args(argv)

    import torch

    import hwmodels
    from bench.suite import liger_provider
    from harness import env_info
    from harness.timing import call_time
    from porter.packs.loader import load_pack
    from porter.port import port
    from porter.specs import load_spec

    det = hwmodels.detect()
    if det.model is None or not torch.cuda.is_available():
        print(f"call costs are timed on a GPU; none usable here: {det.reason}", file=sys.stderr)
        return 2
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    if unknown := [o for o in ops if o not in OPS]:
        print(f"unknown op(s) {', '.join(unknown)}; known: {', '.join(OPS)}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": det.device_name, "hw_model": det.model.name,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "versions": env_info.versions(), "liger": _version("liger_kernel"),
            "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(REPO),
            "method": "harness.timing.call_time: 200 calls back to back on one input set, "
                      "median of 7 rounds (cpu_us until the calls returned, call_us until the "
                      "device finished); device_us: triton.testing.do_bench_cudagraph, median. "
                      "bf16, random normal inputs; the pack ported on this device by "
                      "porter.port.port at the shapes listed; every provider allocates its "
                      "output (form 'out' passes a preallocated one)."}
    rows_path = out / "rows.jsonl"
    rows: list[dict[str, Any]] = []
    t0 = time.time()
    for op in ops:
        spec_path = REPO / "examples" / op / "spec.py"
        spec = load_spec(spec_path)
        todo = [(s, torch.bfloat16) for s in units(op)]
        print(f"[{time.time() - t0:5.0f}s] {op}: porting for {det.model.name} at {len(todo)} "
              "shapes", flush=True)
        result = port(spec_path, [det.model.name], out / "packs", run_dir=out / "runs" / op,
                      units=todo, progress=lambda line: None)
        packed = load_pack(result.pack_path)
        custom = packed.register_custom_op()
        verdict = packed.manifest.get("leading_dims") or {}
        rows_of, nd = verdict.get("rows") or [0], bool(verdict.get("flatten"))
        base: dict[str, Callable[..., Any]] = {"eager": spec.reference}
        if not args.no_compile:
            base["compile"] = torch.compile(spec.reference)
        if (lig := liger_provider(op)) is not None:
            base["liger"] = lig
        for shape, dtype in todo:
            gen = torch.Generator("cuda").manual_seed(hash(shape) % 2**31)
            inputs = tuple(spec.make_inputs(shape, dtype, torch.device("cuda"), gen))
            for form, fin in (list(forms(inputs, rows_of, nd).items()) + [("out", inputs)]):
                use_out = form == "out"
                verdict = check(packed, spec.reference, fin, use_out)
                if use_out:
                    ref = spec.reference(*fin)
                    o = tuple(torch.empty_like(r) for r in ref) if isinstance(ref, tuple) \
                        else torch.empty_like(ref)
                    provs = {"pack": lambda _i=fin, _o=o, _p=packed: _p(*_i, out=_o)}
                else:
                    provs = {"pack": lambda _i=fin, _p=packed: _p(*_i),
                             "custom_op": lambda _i=fin, _c=custom: _c(*_i)}
                    if form == "2d":
                        provs.update(launch_providers(packed, fin))
                        provs.update({k: (lambda _f=f, _i=fin: _f(*_i)) for k, f in base.items()})
                    else:
                        provs["eager"] = lambda _i=fin, _r=spec.reference: _r(*_i)
                times: dict[str, dict[str, float | None]] = {}
                for name, fn in provs.items():
                    try:
                        ct = call_time(fn, ())
                    except Exception as exc:  # noqa: BLE001 - a provider that fails: said
                        print(f"    {name} failed: {type(exc).__name__}: {exc}", flush=True)
                        continue
                    times[name] = {"cpu_us": ct.cpu_us, "call_us": ct.call_us,
                                   "device_us": device_us(fn)}
                row = {"op": op, "shape": list(shape), "dtype": "bf16", "form": form,
                       "check": verdict, "times": times,
                       "path": packed.describe(*fin).splitlines()[-1]}
                rows.append(row)
                with rows_path.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                brief = "  ".join(f"{k} {v['cpu_us']:.1f}/{v['call_us']:.1f}"
                                  for k, v in times.items())
                print(f"  {op} {shape} {form:8s} {'ok' if verdict['ok'] else 'WRONG'}  "
                      f"cpu/call us: {brief}", flush=True)
        torch.compiler.reset()
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    summary = summarize(rows, meta)
    (out / "SUMMARY.md").write_text(summary)
    bad = sum(not r["check"]["ok"] for r in rows)
    pe = [r["times"]["pack"]["call_us"] / r["times"]["eager"]["call_us"] for r in rows
          if "pack" in r["times"] and "eager" in r["times"]]
    print(f"{len(rows)} rows, {bad} wrong; pack/eager call time: median "
          f"{statistics.median(pe):.2f}, max {max(pe):.2f}" if pe else f"{len(rows)} rows")
    return 0 if bad == 0 else 1


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module.replace("_", "-"))
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    raise SystemExit(main())
