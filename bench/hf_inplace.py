"""Hugging Face models patched in place on the local GPU: prefill and decode, beside eager,
torch.compile and Liger-Kernel, with the profile's prediction beside the measurement.

    python -m bench.hf_inplace --archs llama,gemma --out results/<device>-<date>-hf-inplace

Per architecture (built from its config at `--size`, random weights, bf16, on the GPU):
1. `profile_model(..., in_place=True)`: the groups the in-place patch can replace, timed on
   the device; the `--top` best are ported for this GPU (`porter port-profile`, measured tier,
   `--max-variants`) unless their packs are already in `--packs`; profiled again with the packs'
   measured times, for the prediction 1 / (1 - sum f + sum f / s) over the replaced groups;
2. prefill, `model(ids, use_cache=False)` back to back from Python, time per call until the
   GPU is done (wall clock, synced, around `--reps` calls, median of 5 runs): eager, torch.compile,
   patched (`porter.patch(..., inplace=True)`: judged against torch.compile per group, output
   checked, the untouched kernels profiled before and after), patched + torch.compile, and
   Liger-Kernel's `apply_liger_kernel_to_<arch>` last (it patches classes for the process);
3. decode: `generate()` greedy at `--batches` after a `--kv`-token prompt; time per new
   token = (time for `--new` tokens - time for 1) / (`--new` - 1), medians of 3, unpatched
   and patched, and whether the greedy tokens agree (bf16: they may part after a near tie);
   with `--graphs` also under CUDA graphs (static cache, `torch.compile(mode="reduce-overhead")`).
Prefill also reports device time (the profiler's sum of GPU kernel times, no launch gaps).
Writes rows.jsonl (each row as it is measured) and meta.json under `--out`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _ms_per_call(fn: Any, reps: int) -> float:
    """Median over 5 runs of `reps` back-to-back calls, each run timed until the device is done
    (wall clock with a sync either side: what a Python caller waits)."""
    fn()
    _sync()
    runs = []
    for _ in range(5):
        _sync()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        _sync()
        runs.append((time.perf_counter() - t) * 1e3 / reps)
    return statistics.median(runs)


def _host_ms(fn: Any) -> float:
    """CPU time to issue one call (from the call until it returns, the device not waited for),
    median of 5: near the call's whole time only where something in it waits for the device."""
    fn()
    runs = []
    for _ in range(5):
        _sync()
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1e3)
        _sync()
    return statistics.median(runs)


def _host_top(fn: Any, n: int = 8) -> list[tuple[str, float]]:
    """The `n` ops with the most CPU time of their own in one profiled call (us): where a
    call's host time goes."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile

    fn()
    _sync()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
        _sync()
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:n]
    return [(e.key, round(e.self_cpu_time_total, 1)) for e in ops]


def _device_ms(fn: Any) -> float | None:
    """Device time of one call: the sum of the GPU kernels' times in a profiler trace (no
    launch gaps, no Python), median of 3 calls."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile

    if not torch.cuda.is_available():
        return None
    fn()
    _sync()
    runs = []
    for _ in range(3):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            _sync()
        runs.append(sum(e.self_device_time_total for e in prof.key_averages()) / 1e3)
    return statistics.median(runs)


def _decode_ms(lm: Any, ids: Any, new: int, **gen_kw: Any) -> tuple[float, Any]:
    """Time per new token of greedy `generate()` after the prompt `ids`: (time for `new`
    tokens - time for 1) / (new - 1), each the median of 3 runs."""
    import torch

    def gen(n: int) -> Any:
        return lm.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           pad_token_id=0, **gen_kw)

    with torch.no_grad():
        gen(3)  # warm: the prompt's shapes and a decode step's (a CUDA-graph capture too)
        times: dict[int, float] = {}
        for n in (1, new):
            runs = []
            for _ in range(3):
                _sync()
                t = time.perf_counter()
                out = gen(n)
                _sync()
                runs.append((time.perf_counter() - t) * 1e3)
            times[n] = statistics.median(runs)
    return (times[new] - times[1]) / (new - 1), out


def _port(prof: dict[str, Any], top: int, packs: Path, work: Path, target: str,
          max_variants: int) -> list[str]:
    from porter.model.report import save_profile

    want = [g for g in prof["groups"][:top] if not (packs / g["pack_name"]).is_dir()]
    if want:
        sub = dict(prof, groups=want)
        path = save_profile(sub, work / f"profile-{len(list(work.glob('profile-*')))}.json")
        cmd = [sys.executable, "-m", "porter.cli", "port-profile", str(path), "--top",
               str(len(want)), "--targets", target, "--out", str(packs), "--run-dir",
               str(work / "run"), "--max-variants", str(max_variants)]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=REPO)
    return [g["pack_name"] for g in prof["groups"][:top]]


def run_arch(arch: str, args: argparse.Namespace, packs: Path, work: Path, hw: Any,
             emit: Any) -> None:
    import torch

    import porter
    from porter.model.inplace import restore
    from porter.model.load import build_hf
    from porter.model.profile import profile_model
    from porter.model.rank import combined_gain
    from porter.patching import PatchError

    torch.manual_seed(0)
    wrapper, (ids,), source = build_hf(arch, size=args.size, device=args.device)
    lm = wrapper.lm
    prof = profile_model(wrapper, (ids,), source=source, hw_name=hw.name, in_place=True)
    _port(prof, args.top, packs, work, hw.name, args.max_variants)
    prof = profile_model(wrapper, (ids,), source=source, hw_name=hw.name, in_place=True,
                         packs=str(packs))

    def prefill(m: Any) -> Any:
        return lambda: m(ids, use_cache=False)

    def row(kind: str, **kw: Any) -> None:
        emit({"arch": arch, "kind": kind, "shape": list(ids.shape), **kw})

    with torch.no_grad():
        t = {"eager": _ms_per_call(prefill(lm), args.reps)}
        dev = {"eager": _device_ms(prefill(lm))}
        host = {"eager": _host_ms(prefill(lm))}
        host_top = {"eager": _host_top(prefill(lm))}
        torch._dynamo.reset()
        compiled = torch.compile(lm)
        t["compile"] = _ms_per_call(prefill(compiled), args.reps)
        dev["compile"] = _device_ms(prefill(compiled))
    try:
        result = porter.patch(lm, packs, example_inputs=(ids,), inplace=True)
    except PatchError as exc:
        row("prefill", ms=t, device_ms=dev, patch_error=str(exc))
        return
    print(result.report(), flush=True)
    replaced = [r.pack_name for r in result.replaced]
    groups = [g for g in prof["groups"] if g["pack_name"] in replaced]
    predicted = combined_gain(groups) if groups else 1.0
    with torch.no_grad():
        t["patched"] = _ms_per_call(prefill(lm), args.reps)
        dev["patched"] = _device_ms(prefill(lm))
        host["patched"] = _host_ms(prefill(lm))
        host_top["patched"] = _host_top(prefill(lm))
        torch._dynamo.reset()
        compiled = torch.compile(lm)
        t["patched_compile"] = _ms_per_call(prefill(compiled), args.reps)
        dev["patched_compile"] = _device_ms(prefill(compiled))
    row("prefill", ms=t, device_ms=dev, host_issue_ms=host, host_top_us=host_top,
        device_speedup_patched_vs_eager=dev["eager"] / dev["patched"] if dev["patched"] else None,
        speedup_patched_vs_eager=t["eager"] / t["patched"],
        speedup_patched_compile_vs_compile=t["compile"] / t["patched_compile"],
        predicted_vs_eager=predicted,
        replaced=[{"pack": r.pack_name, "status": r.status, "places": r.places,
                   "reason": r.reason, "ran": r.ran} for r in result.replacements],
        untouched=result.untouched.describe() if result.untouched else None,
        check=result.check.tolerance if result.check else None)
    # Decode: patched and unpatched in turn, `--rounds` times, on the same prompt; toggled by
    # swapping the patched forwards in and out (no re-patching between rounds).
    swapped = [(p.module, p.module.__dict__["forward"]) for p in result.patched]

    def use(patched: bool) -> None:
        if patched:
            for m, ours in swapped:
                m.forward = ours
        else:
            restore(result.patched)
        # Hugging Face keeps its compiled decode step (static cache) on the model
        lm.__dict__.pop("_compiled_call", None)
        torch._dynamo.reset()

    def active() -> int:  # the patched forwards in place now
        return sum(m.__dict__.get("forward") is ours for m, ours in swapped)

    settings = [("eager", b, {}) for b in args.batches]
    if args.graphs and args.device == "cuda":
        # a static KV cache: generate() compiles its decode step with CUDA graphs itself
        # (transformers' auto-compile, CompileConfig's mode "reduce-overhead")
        settings += [("cuda_graphs", b, {"cache_implementation": "static"})
                     for b in args.batches[:1]]
    for mode, b, gen_kw in settings:
        prompt = torch.randint(0, 200, (b, args.kv), device=args.device,
                               generator=torch.Generator(args.device).manual_seed(b))
        per: dict[str, list[float]] = {"patched": [], "unpatched": []}
        toks: dict[str, Any] = {}
        in_turn: dict[str, int] = {}
        rounds = 1 if mode == "cuda_graphs" else args.rounds  # a toggle recompiles there
        for _ in range(rounds):
            for state in ("patched", "unpatched"):
                use(state == "patched")
                in_turn[state] = active()
                ms, toks[state] = _decode_ms(lm, prompt, args.new, **gen_kw)
                per[state].append(ms)
        use(True)
        agree = float((toks["patched"][:, args.kv:] ==
                       toks["unpatched"][:, args.kv:]).float().mean())
        unp, pat = statistics.median(per["unpatched"]), statistics.median(per["patched"])
        row("decode", mode=mode, batch=b, kv=args.kv, new_tokens=args.new,
            unpatched_ms_per_token=unp, patched_ms_per_token=pat, speedup=unp / pat,
            rounds={k: [round(x, 4) for x in v] for k, v in per.items()},
            patched_modules_in_turn=in_turn,
            greedy_token_agreement=agree)
    result.unpatch()
    try:
        liger = _liger(arch, lm)
        if liger is not None:
            with torch.no_grad():
                ms = _ms_per_call(prefill(lm), args.reps)
                dms = _device_ms(prefill(lm))
            row("prefill_liger", ms=ms, device_ms=dms, speedup_vs_eager=t["eager"] / ms,
                how=liger)
    except Exception as exc:  # noqa: BLE001 - Liger's failure is its own row
        row("prefill_liger", error=f"{type(exc).__name__}: {exc}")


def _liger(arch: str, lm: Any) -> str | None:
    try:
        import liger_kernel.transformers as lt
    except ImportError:
        return None
    fn = getattr(lt, f"apply_liger_kernel_to_{arch}", None)
    if fn is None:
        return None
    fn(model=lm, cross_entropy=False, fused_linear_cross_entropy=False)
    return f"{fn.__name__}(model=..., cross_entropy=False, fused_linear_cross_entropy=False)"


def summarize(out: Path) -> str:
    """SUMMARY.md's tables from `out`'s rows.jsonl and meta.json (what a run measured, nothing
    typed in)."""
    meta = json.loads((out / "meta.json").read_text())
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines() if line]
    v = meta["versions"]
    lines = [f"# Hugging Face models patched in place: {meta['device']}, {meta['date']}", "",
             f"torch {v.get('torch')}, triton {v.get('triton')}, transformers "
             f"{v.get('transformers')}, driver {v.get('driver')}; git {meta.get('git_rev')}; "
             f"`python -m bench.hf_inplace {' '.join(_argv(meta['args']))}`. Method: "
             "bench/hf_inplace.py's docstring (meta.json holds it).", "",
             "## Prefill (call time: back to back from Python, until the GPU is done; device "
             "time: the profiler's sum of kernel times)", "",
             "| arch | eager ms | compile ms | patched ms | patched+compile ms | Liger ms | "
             "patched / eager | patched+compile / compile | Liger / eager | device time: "
             "patched / eager | predicted | replaced |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    liger = {r["arch"]: r for r in rows if r["kind"] == "prefill_liger" and "ms" in r}
    for r in rows:
        if r["kind"] != "prefill" or "speedup_patched_vs_eager" not in r:
            continue
        t, lg = r["ms"], liger.get(r["arch"])
        rep = ", ".join(f"{x['pack']} x{x['places']}" for x in r["replaced"]
                        if x["status"] == "replaced")
        lines.append(f"| {r['arch']} | {t['eager']:.2f} | {t['compile']:.2f} | "
                     f"{t['patched']:.2f} | {t['patched_compile']:.2f} | "
                     + (f"{lg['ms']:.2f} | " if lg else "- | "))
        lines[-1] += (f"{r['speedup_patched_vs_eager']:.3f}x | "
                      f"{r['speedup_patched_compile_vs_compile']:.3f}x | "
                      + (f"{lg['speedup_vs_eager']:.3f}x | " if lg else "- | ")
                      + (f"{r['device_speedup_patched_vs_eager']:.3f}x | "
                         if r.get("device_speedup_patched_vs_eager") else "- | ")
                      + f"{r['predicted_vs_eager']:.3f}x | {rep} |")
    lines += ["", "## Decode (`generate()` greedy, ms per new token; patched and unpatched "
              "timed in turn, median over the rounds)", "",
              "| arch | mode | batch | KV tokens | unpatched | patched | unpatched / patched | "
              "rounds | greedy tokens agree |", "| --- | --- | --- | --- | --- | --- | --- | --- "
              "| --- |"]
    for r in rows:
        if r["kind"] == "decode":
            lines.append(f"| {r['arch']} | {r['mode']} | {r['batch']} | {r['kv']} | "
                         f"{r['unpatched_ms_per_token']:.2f} | {r['patched_ms_per_token']:.2f} | "
                         f"{r['speedup']:.3f}x | {len(r['rounds']['patched'])} | "
                         f"{r['greedy_token_agreement']:.0%} |")
    errors = [r for r in rows if r["kind"] == "error" or "patch_error" in r or "error" in r]
    if errors:
        lines += ["", "## Errors", ""] + [f"- {r['arch']} {r['kind']}: "
                                          f"{(r.get('error') or r.get('patch_error'))[:300]}"
                                          for r in errors]
    return "\n".join(lines) + "\n"


def _argv(args: dict[str, Any]) -> list[str]:
    skip = {"out", "packs", "device", "hw"}
    out = []
    for k, val in args.items():
        if k in skip or val in (None, False):
            continue
        flag = "--" + k.replace("_", "-")
        out += [flag] if val is True else [flag, ",".join(map(str, val))
                                           if isinstance(val, list) else str(val)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hf_inplace",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--archs", default="llama,qwen2,mistral,gemma,qwen3")
    ap.add_argument("--size", default="realistic")
    ap.add_argument("--top", type=int, default=3, help="groups ported per architecture")
    ap.add_argument("--max-variants", type=int, default=4)
    ap.add_argument("--packs", default="runs/hf-inplace/packs")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--kv", type=int, default=1024, help="prompt tokens before decoding")
    ap.add_argument("--new", type=int, default=17, help="tokens decoded per timing")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--rounds", type=int, default=5,
                    help="decode: patched and unpatched timed in turn this many times")
    ap.add_argument("--graphs", action="store_true",
                    help="also decode under CUDA graphs (static cache, reduce-overhead) at the "
                         "first batch size")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only to try the script")
    ap.add_argument("--hw", default=None, help="hardware model to port for (default: detected)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--summarize", action="store_true",
                    help="only write --out's SUMMARY.md from its rows.jsonl and meta.json")
    args = ap.parse_args(argv)
    if args.summarize:
        (Path(args.out) / "SUMMARY.md").write_text(summarize(Path(args.out)))
        print(Path(args.out) / "SUMMARY.md")
        return 0
    args.batches = [int(b) for b in args.batches.split(",")]
    import torch

    import hwmodels
    from harness import env_info

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no GPU visible; bench.hf_inplace measures on one (--device cpu with "
              "--size toy only tries the script end to end, its times mean nothing)",
              file=sys.stderr)
        return 2
    hw = hwmodels.get(args.hw) if args.hw else hwmodels.detect().model
    packs, out = Path(args.packs), Path(args.out)
    work = packs.parent
    for d in (packs, out):
        d.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
            "hw_model": hw.name,
            "date": dt.date.today().isoformat(), "versions": env_info.versions(),
            "git_rev": os.environ.get("GIT_REV", ""), "args": vars(args), "method": __doc__}
    try:
        import transformers
        meta["versions"]["transformers"] = transformers.__version__
    except ImportError:
        pass
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    rows: list[dict[str, Any]] = []

    def emit(r: dict[str, Any]) -> None:
        # each row on disk as it comes: a run cut off at its time limit keeps what it measured
        print(json.dumps(r, default=str), flush=True)
        rows.append(r)
        with (out / "rows.jsonl").open("w") as f:
            f.writelines(json.dumps(x, default=str) + "\n" for x in rows)

    for arch in args.archs.split(","):
        try:
            run_arch(arch, args, packs, work, hw, emit)
        except Exception as exc:  # noqa: BLE001 - one architecture's failure is a row
            emit({"arch": arch, "kind": "error", "error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
