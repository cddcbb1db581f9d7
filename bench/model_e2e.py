"""End to end on the local GPU: eager vs torch.compile vs the porter's kernels patched in (vs both).

    python -m bench.model_e2e                        # realistic example model, port top 3, time
    python -m bench.model_e2e --packs DIR            # use packs made earlier (no porting)
    python -m bench.model_e2e --dry-run --out-dir /tmp/x   # CPU, toy sizes: the flow, no times

What it does, in one process (the porting step in a child process, `porter port-profile`):
1. builds `examples/llama_block/model.py` at `--size` (default realistic: hidden 4096, MLP 11008,
   32 heads, 2 layers, batch 4 x 2048 tokens, bf16) on the GPU;
2. profiles it (`porter.model.profile.profile_model`: device time per fused group) and ranks
   the groups by Amdahl's law on the device's hardware model;
3. ports the top `--top` groups on this GPU (measured tier, the default budget) unless `--packs`
   is given, then ranks again with the packs' measured times;
4. patches them in (`porter.patch`), which times each replacement against torch.compile of the
   same group and declines a slower one, and checks the whole model's output;
5. times, interleaved with the LLC flushed before every repetition (`harness.timing.compare`),
   medians of `--reps`: the model's forward eager / torch.compile / patched / patched +
   torch.compile, and each replaced region eager / torch.compile / ours;
6. writes `<out-dir>/<device>-model-e2e.md`: device, versions, the prediction
   1 / (1 - f + f / s) beside the measured end-to-end gain, region by region and end to end.

Without a GPU it says so in one line and exits 2; `--dry-run` runs steps 1-4 at toy sizes on the
CPU under the Triton interpreter (interpreted tier, 1 candidate) and writes the report without
timings, for tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MODEL = REPO / "examples" / "llama_block" / "model.py"


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.model_e2e",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default=None, help="example model size (default realistic; "
                    "toy with --dry-run)")
    ap.add_argument("--top", type=int, default=3, help="groups to port (default 3)")
    ap.add_argument("--packs", default=None, help="packs folder made earlier: skip porting")
    ap.add_argument("--work-dir", default=None, help="specs, port runs and packs "
                    "(default runs/model-e2e-<size>); a second run reuses its packs")
    ap.add_argument("--out-dir", default=str(REPO / "results"), help="where the report goes")
    ap.add_argument("--reps", type=int, default=30, help="timed repetitions per provider")
    ap.add_argument("--port-only", action="store_true",
                    help="profile and port, then stop (a second run reuses the packs): splits "
                    "the work for machines that limit one command's time")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU, toy sizes, interpreted tier: the flow without timings")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.dry_run:
        # kernels run under the interpreter in this process: set before triton is imported
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("error: bench.model_e2e times on a GPU and torch sees none here; "
              "--dry-run runs the flow at toy sizes on the CPU", file=sys.stderr)
        return 2
    size = args.size or ("toy" if args.dry_run else "realistic")
    device = "cpu" if args.dry_run else "cuda"
    work = Path(args.work_dir or REPO / "runs" / f"model-e2e-{size}")
    work.mkdir(parents=True, exist_ok=True)

    import hwmodels
    from porter.model.load import load_model
    from porter.model.profile import profile_model
    from porter.model.report import format_profile
    from porter.model.report import save_profile

    if args.dry_run:
        hw = hwmodels.get("h100")
    else:
        det = hwmodels.detect()
        if det.model is None:
            print(f"error: no hardware model for this GPU ({det.reason})", file=sys.stderr)
            return 2
        hw = det.model
    torch.manual_seed(0)
    model, inputs, source = load_model(MODEL, size=size, device=device)
    print(f"model: {MODEL.relative_to(REPO)} size {size} on {device} ({hw.name}); "
          f"input {list(inputs[0].shape)} {inputs[0].dtype}", flush=True)
    prof = profile_model(model, inputs, source=source, hw_name=hw.name)
    print(format_profile(prof), flush=True)
    prof_path = save_profile(prof, work / "profile.json")

    packs = Path(args.packs) if args.packs else work / "packs"
    if args.packs is None:
        # A second run (after --port-only) ports what the first chose, even where a close
        # ranking came out in another order this time.
        chosen = work / "chosen.json"
        wanted = [g["pack_name"] for g in prof["groups"][:args.top]]
        if chosen.is_file():
            before = json.loads(chosen.read_text())
            if before.get("top") == args.top:
                wanted = before["packs"]
        chosen.write_text(json.dumps({"top": args.top, "packs": wanted}) + "\n")
        have = [n for n in wanted if (packs / n / "manifest.yaml").is_file()]
        if have != wanted:
            rc = _port(prof_path, args.top, hw.name, packs, work / "port", dry_run=args.dry_run)
            if rc not in (0, 1):
                print(f"error: porting failed (exit {rc}); see {work / 'port'}", file=sys.stderr)
                return 2
        else:
            print(f"packs: reusing {', '.join(have)} in {packs}")
    if args.port_only:
        print(f"packs: {packs} (--port-only: stopping before the patch and the timings)")
        return 0
    if not args.dry_run:
        prof = profile_model(model, inputs, source=source, hw_name=hw.name, packs=packs)
        save_profile(prof, work / "profile-with-packs.json")

    import porter

    with torch.no_grad():
        result = porter.patch(model, packs, example_inputs=inputs, check=False, hw_name=hw.name)
    print(result.report(), flush=True)
    timings = None if args.dry_run else _time_all(model, result, inputs, prof, hw, args.reps)
    report = _report(prof, result, timings, hw, size, packs, args)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = f"{hw.name}-model-e2e{'-dry-run' if args.dry_run else ''}.md"
    (out / name).write_text(report)
    print(f"report: {out / name}")
    if result.check is not None and not result.check.passed:
        print("error: the patched model's output differs from the unpatched model's",
              file=sys.stderr)
        return 1
    return 0


def _port(prof_path: Path, top: int, target: str, packs: Path, run_dir: Path, *,
          dry_run: bool) -> int:
    """`porter port-profile` in a child process (the CPU tier cross-compiles, which a process
    running kernels under the interpreter cannot)."""
    cmd = [sys.executable, "-m", "porter.cli", "port-profile", str(prof_path), "--top", str(top),
           "--targets", target, "--out", str(packs), "--run-dir", str(run_dir)]
    if dry_run:
        cmd += ["--max-variants", "1", "--max-checks", "2"]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    print("porting: " + " ".join(cmd[1:]), flush=True)
    return subprocess.run(cmd, env=env, cwd=REPO).returncode


def _time_all(model: Any, result: Any, inputs: tuple[Any, ...], prof: dict[str, Any], hw: Any,
              reps: int) -> dict[str, Any]:
    """Whole-model and per-region medians (ms) of eager / compiled / ours (/ ours + compiled)."""
    import torch

    from harness import timing
    from porter.patching import group_function

    x = inputs[0]

    def make_args() -> tuple[Any, ...]:
        return (torch.randn(x.shape, device=x.device).to(x.dtype),)

    def no_grad(fn: Any) -> Any:
        def run(*a: Any) -> Any:
            with torch.no_grad():
                return fn(*a)
        return run

    providers = {
        "eager": no_grad(model),
        "compile": no_grad(torch.compile(model)),
        "ours": no_grad(result.model),
        "ours+compile": no_grad(torch.compile(result.model)),
    }
    print("timing the whole model (the first calls compile)...", flush=True)
    whole = timing.compare(providers, make_args, hw=hw, reps=reps, warmup=3)
    regions = []
    by_name = {g["pack_name"]: g for g in prof["groups"]}
    for r in result.replacements:
        g = by_name.get(r.pack_name)
        if g is None or r.status == "no pack":
            continue
        op = _op_of(result, r.pack_name)
        ref = group_function(g["code"])
        metas = g["instances"][0]["inputs"]

        def make_region(metas: list[dict[str, Any]] = metas) -> tuple[Any, ...]:
            return tuple(torch.randn(m["shape"], device=x.device).to(getattr(torch, m["dtype"]))
                         for m in metas)

        prov = {"eager": no_grad(ref), "compile": no_grad(torch.compile(ref))}
        if op is not None:
            prov["ours"] = no_grad(op)
        c = timing.compare(prov, make_region, hw=hw, reps=reps, warmup=5)
        regions.append({"pack_name": r.pack_name, "status": r.status, "places": r.places,
                        "share": g["share"], "s_pred": g["speedup"], "s_label": g["ours_label"],
                        "ms": {k: t.median_ms for k, t in c.timings.items()}})
    return {"whole": {k: t.median_ms for k, t in whole.timings.items()},
            "whole_spread": {k: (t.p20_ms, t.p80_ms) for k, t in whole.timings.items()},
            "regions": regions}


def _op_of(result: Any, pack_name: str) -> Any:
    """The custom op registered for this pack (also for a declined one: timed for the table)."""
    return result.ops.get(pack_name)


def _report(prof: dict[str, Any], result: Any, timings: dict[str, Any] | None, hw: Any,
            size: str, packs: Path, args: argparse.Namespace) -> str:
    from harness import env_info
    from porter.model.rank import combined_gain

    v = {k: val for k, val in env_info.versions().items() if val is not None}
    lines = [f"# Example model end to end on {prof['device']} ({hw.name})", "",
             f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; `python -m bench.model_e2e"
             f"{' --dry-run' if args.dry_run else ''}` (code {env_info.git_rev(REPO) or '?'}); "
             + ", ".join(f"{k} {val}" for k, val in v.items()), "",
             f"Model: `examples/llama_block/model.py` size {size}, input "
             f"{prof['inputs'][0]['shape']} {prof['inputs'][0]['dtype']}, forward only.", ""]
    if args.dry_run:
        lines += ["**Dry run on a CPU**: the kernels ran under the Triton interpreter; nothing is "
                  "timed (a CPU cannot judge GPU kernels). Shares are projected for "
                  f"{hw.name}.", ""]
    lines += ["## Ranking (porter profile)", "", f"Basis: {prof.get('basis', '')}.", "",
              "| group | places | share f | est. s | predicted end to end |",
              "|---|---|---|---|---|"]
    for g in prof["groups"]:
        lines.append(f"| {g['pack_name']} | {len(g['instances'])} | {100 * g['share']:.1f}% | "
                     f"{g['speedup']:.2f}x ({g['ours_label']}) | {g['gain']:.3f}x |")
    for e in prof.get("not_portable", []):
        lines.append(f"| {e['op']} (not taken: {e['reason']}) | {e['count']} | "
                     f"{100 * e['share']:.1f}% | - | - |")
    lines += ["", "## Patch", "", "```", result.report(), "```", ""]
    replaced = {r.pack_name for r in result.replaced}
    chosen = [g for g in prof["groups"] if g["pack_name"] in replaced]
    predicted = combined_gain(chosen) if chosen else 1.0
    if timings is None:
        lines += [f"Predicted end to end for the replaced groups: {predicted:.3f}x over eager "
                  "(not measured: dry run).", ""]
        return "\n".join(lines) + "\n"
    w = timings["whole"]
    lines += ["## End to end (forward, median ms, LLC flushed each repetition)", "",
              "| eager | torch.compile | ours | ours + torch.compile |", "|---|---|---|---|",
              f"| {w['eager']:.3f} | {w['compile']:.3f} | {w['ours']:.3f} | "
              f"{w['ours+compile']:.3f} |", ""]
    measured = w["eager"] / w["ours"]
    # the same Amdahl sum with each region's measured speedup, to split the gap between the
    # prediction's s and its f
    with_meas = [dict(g, speedup=r["ms"]["eager"] / r["ms"]["ours"])
                 for g in chosen for r in timings["regions"]
                 if r["pack_name"] == g["pack_name"] and "ours" in r["ms"]]
    lines += [f"- predicted (Amdahl, profile's f and estimated s): **{predicted:.3f}x** over eager",
              f"- measured: **{measured:.3f}x** over eager "
              f"({100 * (measured / predicted - 1):+.1f}% vs the prediction)"]
    if with_meas:
        lines.append(f"- Amdahl with the measured region speedups: {combined_gain(with_meas):.3f}x")
    verdict = "not slower" if w["ours+compile"] <= w["compile"] * 1.01 else "SLOWER"
    lines += [f"- ours + torch.compile vs torch.compile alone: "
              f"{w['compile'] / w['ours+compile']:.3f}x ({verdict}, 1% noise allowed)", "",
              "## Region by region (median ms at the first place each group runs)", "",
              "| group | status | places | eager | torch.compile | ours | s measured | s predicted "
              "| ours vs compile |", "|---|---|---|---|---|---|---|---|---|"]
    for r in timings["regions"]:
        ms = r["ms"]
        ours = ms.get("ours")
        if ours is None:
            ours_txt = s_meas = vs_compile = "-"
        else:
            ours_txt = f"{ours:.4f}"
            s_meas = f"{ms['eager'] / ours:.2f}x"
            vs_compile = f"{ms['compile'] / ours:.2f}x"
        lines.append(f"| {r['pack_name']} | {r['status']} | {r['places']} | {ms['eager']:.4f} | "
                     f"{ms['compile']:.4f} | {ours_txt} | {s_meas} | {r['s_pred']:.2f}x "
                     f"({r['s_label']}) | {vs_compile} |")
    spread = timings["whole_spread"]
    lines += ["", "p20-p80 of the whole-model times: " + ", ".join(
        f"{k} {a:.3f}-{b:.3f}" for k, (a, b) in spread.items()), ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
