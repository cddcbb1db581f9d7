"""The suite fanned out over every GPU of one host, recorded (issue 32).

    python -m bench.fanout_gpus --out DIR [--ops swiglu,rotary] [--reps 20]

Three runs of the same suite ops (`bench.suite`, one op per Dask task, `porter.fanout`):

1. **one**: one worker, so one GPU: the baseline wall time and rows;
2. **all**: one worker per GPU (dask-cuda's `LocalCUDACluster` when installed, else one pinned
   process per GPU);
3. **killed**: as 2, but the first task to start SIGKILLs its own worker a few seconds in, with
   the suite's child process running (a marker file makes that happen once). Dask's scheduler
   re-runs that task on a worker that is alive; nothing else is re-run.

Writes DIR/{one,all,killed}/ (each the suite's merged rows, meta and per-op parts) and
DIR/fanout.md: device, versions, wall times, which worker (GPU) ran each op and for how long, the
killed attempt, and whether runs 2 and 3 hold the same rows as run 1 (same op, provider, shape
and dtype; medians differ run to run, the content must not). Needs two or more GPUs and the
`fleet` extra; says so in one line otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
KILL_AFTER_S = 8.0  # how far into its op the killed worker gets


def kill_once_task(op: str, out_dir: str, reps: int, *, marker: str) -> dict[str, Any]:
    """The suite task, except that the first call anywhere kills its own worker mid-task."""
    from porter import fanout

    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return fanout.suite_op_task(op, out_dir, reps)
    info = fanout.worker_info()
    with os.fdopen(fd, "w") as f:
        json.dump({"op": op, "killed_worker_pid": os.getpid(), "at": time.time(), **info}, f)
    part = Path(out_dir) / "parts" / op
    # The real work starts (so the kill lands mid-op, with a CUDA child running) ...
    subprocess.Popen([sys.executable, "-m", "bench.suite", "--ops", op, "--out", str(part),
                      "--reps", str(reps)], cwd=REPO, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, preexec_fn=fanout._die_with_parent)
    time.sleep(KILL_AFTER_S)
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the worker dies under it
    raise AssertionError("unreachable")


def rows_key(rows: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    return {(r["op"], r["provider"], str(r["shape"]), r["dtype"]) for r in rows}


def read_rows(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in (folder / "rows.jsonl").read_text().splitlines() if ln]


def run(out: Path, ops: list[str], reps: int) -> dict[str, Any]:
    import torch

    from porter import fanout

    gpus = torch.cuda.device_count()
    if gpus < 2:
        raise SystemExit(f"bench.fanout_gpus: needs 2 or more GPUs; this machine has {gpus}")
    # Workers import this module and `bench.suite` by name, from the checkout.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    runs: dict[str, Any] = {}
    plans = [("one", {"n_workers": 1}, fanout.suite_op_task),
             ("all", {}, fanout.suite_op_task),
             ("killed", {}, functools.partial(kill_once_task, marker=str(out / "killed.marker")))]
    for name, kw, task in plans:
        folder = out / name
        print(f"[{name}] {', '.join(ops)} on {kw.get('n_workers', gpus)} worker(s) ...",
              flush=True)
        t0 = time.perf_counter()
        report = fanout.run_suite(folder, ops, reps=reps, task=task, **kw)
        wall = time.perf_counter() - t0
        tasks = json.loads((folder / "fanout.json").read_text())["tasks"]
        runs[name] = {"wall_s": wall, "tasks": tasks, "workers": len(report.workers),
                      "rows": len(read_rows(folder))}
        print(f"[{name}] {wall:.0f} s, {runs[name]['rows']} rows; "
              + "; ".join(f"{t['op']} on GPU {t['cuda_visible_devices']} {t['seconds']:.0f} s"
                          for t in tasks), flush=True)
    base = rows_key(read_rows(out / "one"))
    for name in ("all", "killed"):
        got = rows_key(read_rows(out / name))
        runs[name]["same_rows_as_one"] = got == base
        runs[name]["missing"] = sorted(map(str, base - got))
        runs[name]["extra"] = sorted(map(str, got - base))
    marker = out / "killed.marker"
    runs["killed"]["kill"] = json.loads(marker.read_text()) if marker.exists() else None
    return runs


def report(out: Path, ops: list[str], reps: int, runs: dict[str, Any]) -> str:
    import torch
    import triton

    names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
    lines = [
        "# The suite over Dask, one worker per GPU",
        "",
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"`python -m bench.fanout_gpus --out DIR --ops {','.join(ops)} --reps {reps}`; "
        f"{torch.cuda.device_count()} x {', '.join(names)}; python {platform.python_version()}, "
        f"torch {torch.__version__}, triton {triton.__version__}.",
        "",
        "| run | workers | wall s | rows | same rows as `one` | tasks (op: GPU, s) |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("one", "all", "killed"):
        r = runs[name]
        same = "-" if name == "one" else ("yes" if r["same_rows_as_one"] else
                                          f"no: missing {r['missing']}, extra {r['extra']}")
        tasks = "; ".join(f"{t['op']}: {t['cuda_visible_devices']}, {t['seconds']:.0f}"
                          for t in r["tasks"])
        lines.append(f"| {name} | {r['workers']} | {r['wall_s']:.0f} | {r['rows']} | {same} | "
                     f"{tasks} |")
    kill = runs["killed"].get("kill")
    gain = runs["one"]["wall_s"] / runs["all"]["wall_s"]
    lines += ["", f"Wall time on all GPUs vs one: {gain:.2f}x."]
    if kill:
        redo = next((t for t in runs["killed"]["tasks"] if t["op"] == kill["op"]), None)
        lines.append(
            f"Killed: the worker (pid {kill['killed_worker_pid']}, GPU "
            f"{kill.get('cuda_visible_devices')}) running `{kill['op']}` was SIGKILLed "
            f"{KILL_AFTER_S:.0f} s into it; Dask ran `{kill['op']}` again on GPU "
            f"{redo['cuda_visible_devices'] if redo else '?'} and the other ops once.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="results folder (created)")
    ap.add_argument("--ops", default="swiglu,rotary", help="comma-separated suite ops")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions per provider")
    args = ap.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o]
    args.out.mkdir(parents=True, exist_ok=True)
    runs = run(args.out, ops, args.reps)
    text = report(args.out, ops, args.reps, runs)
    (args.out / "fanout.md").write_text(text)
    (args.out / "fanout_runs.json").write_text(json.dumps(runs, indent=2))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
