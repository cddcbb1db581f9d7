"""Hugging Face models patched in place on the local GPU: prefill and decode, beside eager,
torch.compile and Liger-Kernel, with the profile's prediction beside the measurement.

    python -m bench.hf_inplace --archs llama,gemma --out results/<device>-<date>-hf-inplace

Per architecture (built from its config at `--size`, random weights, bf16, on the GPU):
1. `profile_model(..., in_place=True)`: the groups the in-place patch can replace, timed on
   the device; the `--top` best are ported for this GPU (`porter port-profile`, measured tier,
   `--max-variants`) unless their packs are already in `--packs`; profiled again with the packs'
   measured times, for the prediction 1 / (1 - sum f + sum f / s) over the replaced groups;
2. prefill, `model(ids, use_cache=False)` back to back from Python, time per call until the
   GPU is done (CUDA events around `--reps` calls, median of 5 such runs): eager, torch.compile,
   patched (`porter.patch(..., inplace=True)`: judged against torch.compile per group, output
   checked, the untouched kernels profiled before and after), patched + torch.compile, and
   Liger-Kernel's `apply_liger_kernel_to_<arch>` last (it patches classes for the process);
3. decode: `generate()` greedy at batch 1 and 16 after a `--kv`-token prompt; time per new
   token = (time for `--new` tokens - time for 1) / (`--new` - 1), unpatched and patched, and
   whether the greedy tokens agree (bf16: they may part after a near tie).
Writes rows.jsonl, meta.json and SUMMARY.md under `--out`.
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


def _ms_per_call(fn: Any, reps: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) / reps)
    return statistics.median(runs)


def _decode_ms(lm: Any, ids: Any, new: int) -> tuple[float, Any]:
    import torch

    def gen(n: int) -> Any:
        return lm.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           pad_token_id=0)

    with torch.no_grad():
        gen(2)
        times = {}
        for n in (1, new):
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = gen(n)
            torch.cuda.synchronize()
            times[n] = (time.perf_counter() - t) * 1e3
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


def run_arch(arch: str, args: argparse.Namespace, packs: Path, work: Path,
             hw: Any) -> list[dict[str, Any]]:
    import torch

    import porter
    from porter.model.load import build_hf
    from porter.model.profile import profile_model
    from porter.model.rank import combined_gain

    rows: list[dict[str, Any]] = []
    torch.manual_seed(0)
    wrapper, (ids,), source = build_hf(arch, size=args.size, device="cuda")
    lm = wrapper.lm
    prof = profile_model(wrapper, (ids,), source=source, hw_name=hw.name, in_place=True)
    _port(prof, args.top, packs, work, hw.name, args.max_variants)
    prof = profile_model(wrapper, (ids,), source=source, hw_name=hw.name, in_place=True,
                         packs=str(packs))

    def prefill(m: Any) -> Any:
        return lambda: m(ids, use_cache=False)

    def row(kind: str, **kw: Any) -> None:
        r = {"arch": arch, "kind": kind, "shape": list(ids.shape), **kw}
        print(json.dumps(r), flush=True)
        rows.append(r)

    with torch.no_grad():
        t = {"eager": _ms_per_call(prefill(lm), args.reps)}
        torch._dynamo.reset()
        t["compile"] = _ms_per_call(prefill(torch.compile(lm)), args.reps)
    first = result = porter.patch(lm, packs, example_inputs=(ids,), inplace=True)
    print(result.report(), flush=True)
    replaced = [r.pack_name for r in result.replaced]
    groups = [g for g in prof["groups"] if g["pack_name"] in replaced]
    predicted = combined_gain(groups) if groups else 1.0
    with torch.no_grad():
        t["patched"] = _ms_per_call(prefill(lm), args.reps)
        torch._dynamo.reset()
        t["patched_compile"] = _ms_per_call(prefill(torch.compile(lm)), args.reps)
        for b in args.batches:
            prompt = torch.randint(0, 1000, (b, args.kv), device="cuda",
                                   generator=torch.Generator("cuda").manual_seed(b))
            # the same prompt for both: the unpatched tokens with the patch taken off
            ms, tok = _decode_ms(lm, prompt, args.new)
            result.unpatch()
            base_ms, base_tok = _decode_ms(lm, prompt, args.new)
            result = porter.patch(lm, packs, example_inputs=(ids,), inplace=True, judge=False)
            agree = float((tok[:, args.kv:] == base_tok[:, args.kv:]).float().mean())
            row("decode", batch=b, kv=args.kv, unpatched_ms_per_token=base_ms,
                patched_ms_per_token=ms, speedup=base_ms / ms, greedy_token_agreement=agree)
    result.unpatch()
    row("prefill", ms=t, speedup_patched_vs_eager=t["eager"] / t["patched"],
        speedup_patched_compile_vs_compile=t["compile"] / t["patched_compile"],
        predicted_vs_eager=predicted,
        replaced=[{"pack": r.pack_name, "places": r.places, "reason": r.reason, "ran": r.ran}
                  for r in first.replacements],
        untouched=first.untouched.describe() if first.untouched else None,
        check=first.check.tolerance if first.check else None)
    liger = _liger(arch, lm)
    if liger is not None:
        with torch.no_grad():
            ms = _ms_per_call(prefill(lm), args.reps)
        row("prefill_liger", ms=ms, speedup_vs_eager=t["eager"] / ms, how=liger)
    return rows


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
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    import torch

    import hwmodels
    from harness import env_info

    if not torch.cuda.is_available():
        print("error: bench.hf_inplace needs a GPU", file=sys.stderr)
        return 2
    hw = hwmodels.detect().model
    packs, out = Path(args.packs), Path(args.out)
    work = packs.parent
    for d in (packs, out):
        d.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(), "hw_model": hw.name,
            "date": dt.date.today().isoformat(), "versions": env_info.versions(),
            "git_rev": os.environ.get("GIT_REV", ""), "args": vars(args), "method": __doc__}
    try:
        import transformers
        meta["versions"]["transformers"] = transformers.__version__
    except ImportError:
        pass
    (out / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
    rows: list[dict[str, Any]] = []
    for arch in args.archs.split(","):
        try:
            rows += run_arch(arch, args, packs, work, hw)
        except Exception as exc:  # noqa: BLE001 - one architecture's failure is a row
            rows.append({"arch": arch, "kind": "error", "error": f"{type(exc).__name__}: {exc}"})
            print(rows[-1], flush=True)
        with (out / "rows.jsonl").open("w") as f:
            f.writelines(json.dumps(r, default=str) + "\n" for r in rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
