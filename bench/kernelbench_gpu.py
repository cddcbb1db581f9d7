"""KernelBench on the GPU at the files' own sizes: port each covered problem file on this device,
then time the pack beside the file's own `Model` in eager PyTorch and under torch.compile.

    python -m bench.kernelbench_gpu KB_DIR --levels 1,2 --out DIR [--files 23_Softmax.py,...]
        [--time-budget-s S] [--max-variants N] [--reps N] [--timeout S]
        [--kb-commit SHA | --kb-commit-file FILE] [--list] [--coverage FILE] [--jobs N]

KB_DIR holds KernelBench's ``level1/`` and ``level2/`` folders, unmodified (for example an
upstream checkout's ``KernelBench/`` folder, or a copy of it inside an ignored folder of this
checkout: only the files are read, never git).

1. **Coverage** (CPU, no GPU; in parallel, ``--jobs``): a file is covered when its `OpSpec` loads
   and porter.codegen builds the generated op from its reference, exactly as `porter port` does
   first. Each file is tried in its own subprocess; the answers go to ``DIR/coverage.jsonl``
   (reused by a rerun). ``--list`` prints the covered files, and for the rest why not, and stops.
2. **Port** (GPU): each covered file goes through `porter.port.port(FILE, [this device])` at the
   file's own sizes and dtype (its ``get_inputs``: fp32), measured tier, with a short search
   (``--max-variants`` candidates; a file is one shape x one dtype, one unit of the port, so the
   port's own per-target time budget never trims it). The pack goes to ``DIR/packs/levelN/``,
   the run (ledger, per-target artifacts) to ``DIR/runs/levelN/<file>``.
3. **Time** (GPU, same process): the pack as loaded by `porter.load_pack`, the file's own
   ``Model(*get_init_inputs())`` (built under the porter's parameter seed, so it holds the same
   weights as the pack's inputs) called on the GPU, and ``torch.compile`` of that model, all
   interleaved on the same inputs (``get_inputs()`` drawn on the GPU: fresh non-zero random data,
   no multi-GB host copy) with `harness.bench_op` (CUDA events, the LLC flushed every
   repetition, median of ``--reps``).

One subprocess per file with a wall-clock limit (``--timeout``; the child's whole process group
is killed): a crash or a hang costs one row, never the run. ``--gpu-jobs`` children run at once,
but only one uses the GPU at a time: each does its CPU-only start (imports, loading the file,
building its model on the CPU) and then waits for ``DIR/.gpu.lock`` (an flock, released when
the child ends however it ends) before it ports and times, so no timing ever shares the GPU.
One JSON line per file is appended to
``DIR/results.jsonl`` as soon as it is known; a rerun skips the files already there, so a run cut
off (``--time-budget-s``: no new file starts after that many seconds; or a lost machine)
continues where it stopped. The defaults are sized for about eight minutes of an H100 for
levels 1 and 2 (see DEFAULT_* below for the estimate); whatever the budget leaves is listed in
the summary, and the same command runs it. ``DIR/SUMMARY.md`` and
``DIR/results.json`` (device, torch/triton/CUDA/driver versions, the KernelBench revision, date,
method, per-level geometric means) are rewritten after every file.

Percentages: memory-bound files (their bytes over the measured copy bandwidth take longer than
their FLOPs over the matmul ceiling) are given as % of the device's measured copy bandwidth;
compute-bound ones as % of the matmul ceiling for the dtype: the measured one where
hwmodels/devices/<device>.yaml has it (``matmul_<dtype>_tflops``), else the datasheet's dense rate
(fp32: the SIMT rate; the porter's fp32 matmul is exact fp32, not tf32). Each row says which.
Bytes are what must move (inputs, parameters, outputs), FLOPs those of the matmuls and
convolutions (torch's FLOP counter on the meta device).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.kernelbench_dir import kb_family
from bench.kernelbench_dir import sort_key

REPO = Path(__file__).resolve().parents[1]

# The budget. A covered file is one shape x one dtype (one unit of the port). Estimate of one
# file on an H100 (torch 2.11, triton 3.6), from porter/budget.py's measurements (a candidate
# costs about a second on the device: cross-compile, first launch, smoke check at the real size,
# timing; softmax's 3 units in 15 s at 8 candidates) and the suite's: ~4 s to start a process,
# import torch/triton and load the file (overlapped with the previous file's GPU work, see
# --gpu-jobs), then on the GPU ~2 s to trace the reference and build the generated op, 4
# candidates ~4-5 s, the winner's five-stage check and its time beside eager ~2 s,
# torch.compile's first call ~3-6 s (Inductor, cold cache) and the interleaved timing ~1-2 s:
# about 12-15 s of GPU per file, more for the files of 6-8 GiB (their inputs are drawn and
# checked at full size, against a float64 reference twice their size). The 77 files covered on
# 2026-11-26 (45 of level 1, 32 of level 2) are then 15-20 minutes: more than one command on
# the device may run (10 minutes), so the run starts no file after DEFAULT_TIME_BUDGET_S (~8
# minutes: about 35-40 files) and the same command continues it. Coverage is decided once, in
# parallel on the CPU cores (~1-2 minutes on 16 cores), and reused.
DEFAULT_MAX_VARIANTS = 4
DEFAULT_TIME_BUDGET_S = 480.0
DEFAULT_GPU_JOBS = 2  # the next file's CPU-only start overlaps this one's GPU work
DEFAULT_REPS = 30
DEFAULT_TIMEOUT_S = 300.0
LEVELS = ("1", "2")
DEVICE = "cuda"  # where the timed inputs live (the tests run the child's flow on "cpu")
BIG_BYTES = 64 * 2**20  # the issue's 85%-of-copy target applies to working sets >= 64 MB


# ---------------------------------------------------------------------------------------------
# Children: one file each, one JSON object on stdout's last line.
# ---------------------------------------------------------------------------------------------


def cover_one(path: Path) -> dict[str, Any]:
    """Does porter.codegen cover this file? Load it and build the generated op, on the CPU."""
    import torch

    from porter.errors import PorterError
    from porter.port import generate_op
    from porter.specs import load_spec

    row: dict[str, Any] = {"file": path.name, "level": level_of(path), "kind": kb_family(path)}
    stage = "load"
    try:
        spec = load_spec(str(path))
        row["sizes"] = spec.describe_shape(spec.shapes[0])
        stage = "codegen"
        gen = torch.Generator().manual_seed(0)
        example = tuple(spec.make_inputs(tuple(spec.smoke_shape), spec.dtypes[0],
                                         torch.device("cpu"), gen))
        op = generate_op(spec.reference, example, spec.name)
    except PorterError as exc:
        row.update(covered=False, reason=f"{stage}: {one_line(exc)}")
        return row
    except Exception as exc:  # noqa: BLE001 - a traceback is itself the finding: record it
        row.update(covered=False, reason=f"{stage} crashed: {type(exc).__name__}: {one_line(exc)}")
        return row
    fusion = getattr(getattr(op, "fusion", None), "text", "")
    row.update(covered=True, reason="", family=getattr(op, "family", "?"), fusion=fusion)
    return row


def measure_one(path: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Port one file on this GPU at its own sizes, then time the pack, eager and compile."""
    import copy
    import gc

    import torch

    from harness.bench_op import bench_op
    from porter.errors import PorterError
    from porter.packs.loader import load_pack
    from porter.port import port
    from porter.specs import load_spec
    from porter.specs.kernelbench import kernelbench_problem

    row: dict[str, Any] = {"file": path.name, "level": level_of(path), "kind": kb_family(path)}
    hw, why = local_gpu()
    if hw is None:
        row.update(verdict="error", reason=f"no usable GPU here: {why}")
        return row
    spec = load_spec(str(path))
    kb = kernelbench_problem(spec)
    shape, dtype = tuple(spec.shapes[0]), spec.dtypes[0]
    row["sizes"] = spec.describe_shape(shape)
    row["dtype"] = str(dtype).replace("torch.", "")
    row["bytes"], row["flops"] = costs(spec, shape, dtype)

    # The file's own Model, with the weights the pack's inputs carry (same seed, same order),
    # built on the CPU before the GPU is taken.
    model = copy.deepcopy(kb.model(shape)).eval()
    row["gpu_wait_s"] = gpu_lock(out)
    level = f"level{row['level']}"
    t0 = time.perf_counter()
    try:
        result = port(path, [hw.name], out / "packs" / level,
                      run_dir=out / "runs" / level / path.stem,
                      store_path=out / "results.sqlite", max_variants=args.max_variants,
                      replace_pack=True,
                      progress=lambda line: print("   ", line, file=sys.stderr, flush=True))
    except PorterError as exc:
        row.update(verdict="port failed", reason=one_line(exc),
                   port_s=round(time.perf_counter() - t0, 1))
        return row
    row["port_s"] = round(time.perf_counter() - t0, 1)
    tr = result.targets[0]
    row["tier"] = tr.tier
    row["failures"] = list(tr.failures)  # per candidate class, from the port's verdict line
    row["notes"] = [n for n in tr.notes if "no candidate passed" not in n]
    if tr.choices:
        c = tr.choices[0]
        row["config"] = c.config
        row["port_numbers"] = {k: v for k, v in c.numbers.items()
                               if k in ("time_ms", "speedup_vs_eager", "pct_of_peak",
                                        "prefer_reference")}
    gc.collect()  # the port's tensors (checks at full size) go before the timing's
    torch.cuda.empty_cache()

    t1 = time.perf_counter()
    dev = torch.device(DEVICE)
    problem = spec.problem()
    probe = problem.make_inputs(shape, dtype, dev, torch.Generator(dev).manual_seed(0))
    n_in = kb.n_inputs  # make_inputs returns (*get_inputs(), *parameters)
    row["inputs_nonzero"] = all(bool(t.count_nonzero().item() > 0) for t in probe[:n_in]
                                if isinstance(t, torch.Tensor) and t.is_floating_point())
    providers: dict[str, Any] = {}
    if result.pack_path is not None:
        packed = load_pack(result.pack_path)
        choice = packed.choose(*probe)
        row["pack_runs"] = ("kernel" if choice.runs_kernel else
                            f"reference ({choice.reference_why or choice.reason})")
        providers["pack"] = lambda *a: packed(*a)
    else:
        row["pack_runs"] = "no pack (no kernel passed)"
    del probe
    model = model.to(dev)
    compiled = torch.compile(model)
    providers["eager"] = lambda *a: model(*a[:n_in])
    providers["compile"] = lambda *a: compiled(*a[:n_in])
    rows = bench_op(problem, providers, hw=hw, shapes=[shape], dtypes=[dtype], reps=args.reps,
                    baselines=["eager", "compile"], out_contract={p: False for p in providers})
    row["bench_s"] = round(time.perf_counter() - t1, 1)
    ceiling = ceilings(hw, dtype)
    row["bound"], row["ceiling"] = bound_of(row["bytes"], row["flops"], ceiling)
    row["ms"], row["pct"], row["speedup"], row["errors"] = {}, {}, {}, {}
    for r in rows:
        if r.error is not None:
            row["errors"][r.provider] = one_line(r.error)
            continue
        row["ms"][r.provider] = r.median_ms
        row["pct"][r.provider] = pct_of_ceiling(row["bytes"], row["flops"], r.median_ms, ceiling,
                                                row["bound"])
        if r.provider == "pack":
            row["speedup"] = {b: list(v) for b, v in r.speedup.items()}
        if r.sol_exceeded or r.async_suspect:
            row["errors"][r.provider] = "timing flagged: " + "; ".join(r.notes)
    row["verdict"] = "timed" if "pack" in row["ms"] else (
        "no kernel" if result.pack_path is None else "pack failed")
    return row


_LOCK: Any = None  # the open lock file: held until the process ends


def gpu_lock(out: Path) -> float:
    """Wait until no other child uses the GPU, then hold it until this process ends; the
    seconds waited."""
    import fcntl

    global _LOCK
    start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    _LOCK = (out / ".gpu.lock").open("a")
    fcntl.flock(_LOCK.fileno(), fcntl.LOCK_EX)
    return round(time.monotonic() - start, 1)


def local_gpu() -> tuple[Any, str]:
    """(the local GPU's hardware model, "") or (None, why there is none)."""
    import torch

    import hwmodels

    det = hwmodels.detect()
    if det.model is None or not torch.cuda.is_available():
        return None, det.reason or "torch sees no CUDA device"
    return det.model, ""


def costs(spec: Any, shape: tuple[int, ...], dtype: Any) -> tuple[int, int]:
    """(bytes that must move, FLOPs of matmuls/convolutions), on the meta device."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from harness.roofline import derive_bytes

    inputs = tuple(spec.make_inputs(shape, dtype, torch.device("meta"),
                                    torch.Generator().manual_seed(0)))
    try:
        with FlopCounterMode(display=False) as counter:
            outputs = spec.reference(*inputs)
        flops = int(counter.get_total_flops())
    except Exception:  # noqa: BLE001 - an op without a meta kernel: bytes of inputs x 2
        first = next(t for t in inputs if isinstance(t, torch.Tensor))
        outputs, flops = torch.empty_like(first), 0
    return int(derive_bytes(inputs, outputs)), flops


def ceilings(hw: Any, dtype: Any) -> dict[str, Any]:
    """The copy bandwidth and matmul rate this device is held to, and where each came from."""
    from harness.roofline import dtype_key

    key = dtype_key(dtype)
    copy_gbps = hw.measured_value("copy_bandwidth_gbps")
    copy_src = "measured copy bandwidth"
    if copy_gbps is None:
        copy_gbps, copy_src = hw.peak_bandwidth_gbps, "datasheet bandwidth"
    mm = hw.measured_value(f"matmul_{key}_tflops")
    mm_src = f"measured {key} matmul"
    if mm is None:
        mm, mm_src = hw.peak_tflops(key), f"datasheet {key} dense rate"
    return {"copy_gbps": copy_gbps, "copy_source": copy_src, "matmul_tflops": mm,
            "matmul_source": mm_src}


def bound_of(nbytes: int, flops: int, c: dict[str, Any]) -> tuple[str, str]:
    mem_ms = nbytes / (c["copy_gbps"] * 1e9) * 1e3
    cmp_ms = flops / (c["matmul_tflops"] * 1e12) * 1e3 if flops and c["matmul_tflops"] else 0.0
    if cmp_ms > mem_ms:
        return "compute", f"{c['matmul_source']} {c['matmul_tflops']:g} TFLOP/s"
    return "memory", f"{c['copy_source']} {c['copy_gbps']:g} GB/s"


def pct_of_ceiling(nbytes: int, flops: int, ms: float, c: dict[str, Any], bound: str) -> float:
    if bound == "compute":
        return flops / (ms * 1e-3) / 1e12 / c["matmul_tflops"] * 100.0
    return nbytes / (ms * 1e-3) / 1e9 / c["copy_gbps"] * 100.0


# ---------------------------------------------------------------------------------------------
# The parent: files, subprocesses, the jsonl, the summary.
# ---------------------------------------------------------------------------------------------


def level_of(path: Path) -> str:
    m = re.fullmatch(r"level(\d+)", path.parent.name)
    return m.group(1) if m else "?"


def one_line(exc: Any) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


def problem_files(kb_dir: Path, levels: list[str], names: list[str] | None) -> list[Path]:
    """The problem files of these levels, in KernelBench's order; `names` filters by file name
    or stem (``23_Softmax.py``, ``23_Softmax``, or ``level1/23_Softmax.py``)."""
    files: list[Path] = []
    for lv in levels:
        folder = kb_dir / f"level{lv}"
        if not folder.is_dir():
            raise SystemExit(f"error: {folder}: no such folder (KB_DIR must hold level{lv}/)")
        files += sorted(folder.glob("*.py"), key=sort_key)
    if names:
        wanted = set(names)
        files = [f for f in files if {f.name, f.stem, f"{f.parent.name}/{f.name}"} & wanted]
        if not files:
            raise SystemExit(f"error: --files {','.join(names)}: none of these is in {kb_dir}")
    return files


def key_of(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def run_child(argv: list[str], timeout: float, env: dict[str, str], log: Path
              ) -> tuple[int | None, str, str]:
    """A child in its own process group (its compile workers die with it), its stderr kept in
    `log`; (exit code or None on timeout, stdout, stderr's last line)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as err:
        proc = subprocess.Popen([sys.executable, "-m", "bench.kernelbench_gpu", *argv], cwd=REPO,
                                env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True)
        _CHILDREN.add(proc)
        try:
            out, _ = proc.communicate(timeout=timeout)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            rc = None
        finally:
            _CHILDREN.discard(proc)
    tail = (log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            or ["(no output)"])[-1]
    return rc, out, tail


_CHILDREN: set[subprocess.Popen[str]] = set()  # children in flight, each in its own group
_STOP = threading.Event()


def _end_children(signum: int, frame: Any) -> None:
    """The run is stopped (SIGTERM, Ctrl-C): its children go too, with their process groups
    (they run in sessions of their own, so a signal to the parent alone would leave them
    holding the GPU). What is in results.jsonl stays; the same command continues."""
    _STOP.set()  # no new child starts
    for proc in list(_CHILDREN):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    raise SystemExit(128 + signum)


def child_env(gpu: bool) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    env.pop("TRITON_INTERPRET", None)  # the GPU children run real kernels
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # coverage is decided on the CPU: the GPU stays idle
    return env


def last_json(out: str) -> dict[str, Any] | None:
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def read_jsonl(path: Path) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a torn last line: that file runs again
                rows[row["key"]] = row
    return rows


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def coverage(files: list[Path], out: Path, jobs: int, timeout: float,
             reuse: Path | None = None) -> dict[str, dict[str, Any]]:
    """Coverage of every file, from `reuse`/``out/coverage.jsonl`` where known, else decided now."""
    path = out / "coverage.jsonl"
    known = read_jsonl(reuse) if reuse is not None else {}
    known.update(read_jsonl(path))
    todo = [f for f in files if key_of(f) not in known]
    if todo:
        print(f"coverage: {len(files) - len(todo)} known, {len(todo)} to decide on the CPU "
              f"({jobs} at a time)", file=sys.stderr, flush=True)

    def one(f: Path) -> dict[str, Any]:
        rc, so, tail = run_child(["--cover-one", str(f)], timeout, child_env(gpu=False),
                                 out / "logs" / "coverage" / f"{f.parent.name}_{f.stem}.log")
        row = last_json(so) if rc == 0 else None
        if row is None:
            why = f"no answer within {timeout:.0f} s" if rc is None else f"exit {rc}: {tail}"
            row = {"file": f.name, "level": level_of(f), "kind": kb_family(f), "covered": False,
                   "reason": f"coverage check crashed: {one_line(why)}"}
        row["key"] = key_of(f)
        return row

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for row in pool.map(one, todo):
            append_jsonl(path, row)
            known[row["key"]] = row
    return {key_of(f): known[key_of(f)] for f in files}


def measure(path: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One file in a fresh interpreter on the GPU, with a wall-clock limit."""
    start = time.monotonic()
    argv = ["--one", str(path), "--out", str(out), "--max-variants", str(args.max_variants),
            "--reps", str(args.reps)]
    row: dict[str, Any] | None = None
    for attempt in (1, 2):
        # the limit counts a wait for the GPU behind the other files in flight
        limit = args.timeout * max(1, args.gpu_jobs)
        rc, so, tail = run_child(argv, limit, child_env(gpu=True),
                                 out / "logs" / f"{path.parent.name}_{path.stem}.{attempt}.log")
        row = last_json(so) if rc == 0 else None
        if row is not None:
            break
        if rc == 3 and attempt == 1:
            # porter's DEVICE_HUNG_EXIT: a candidate hung; the ledger has it rejected and the
            # same port resumes without it
            print(f"   {path.name}: a candidate hung ({one_line(tail)}); resuming the port once",
                  file=sys.stderr, flush=True)
            continue
        why = (f"no result within {limit:.0f} s" if rc is None
               else f"exit {rc}: {one_line(tail)}")
        row = {"file": path.name, "level": level_of(path), "kind": kb_family(path),
               "verdict": "timeout" if rc is None else "crash", "reason": why}
        break
    assert row is not None
    row["key"] = key_of(path)
    row["seconds"] = round(time.monotonic() - start, 1)
    return row


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _f(x: Any, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def summarize(rows: list[dict[str, Any]], cover: dict[str, dict[str, Any]], meta: dict[str, Any]
              ) -> tuple[str, dict[str, Any]]:
    """SUMMARY.md's text and the per-level aggregates (for results.json)."""
    v = meta["versions"]
    lines = [
        f"# KernelBench on {meta['device']} at the files' own sizes",
        "",
        f"Date {meta['date']}. Device {meta['device']} (hardware model `{meta['hw_model']}`); "
        f"torch {v.get('torch')}, triton {v.get('triton')}, CUDA {v.get('cuda')}, driver "
        f"{v.get('driver')}; porter at `{meta['git_rev']}`. KernelBench: {meta['kb_repo']} at "
        f"`{meta['kb_commit']}`, files unmodified.",
        "",
        f"Method: {meta['method']}",
        "",
        f"Command: `{meta['command']}`",
        "",
    ]
    aggregates: dict[str, Any] = {}
    for lv in sorted({r["level"] for r in rows} | {c["level"] for c in cover.values()}):
        sel = sorted([r for r in rows if r["level"] == lv], key=lambda r: sort_key(Path(r["file"])))
        cov = [c for c in cover.values() if c["level"] == lv]
        timed = [r for r in sel if r.get("verdict") == "timed"]
        vs_e = [r["speedup"]["eager"][0] for r in timed if "eager" in r.get("speedup", {})]
        vs_c = [r["speedup"]["compile"][0] for r in timed if "compile" in r.get("speedup", {})]
        kern = [r for r in timed if r.get("pack_runs") == "kernel"]
        agg = {"files": len(cov), "covered": sum(c["covered"] for c in cov), "run": len(sel),
               "timed": len(timed), "pack_runs_kernel": len(kern),
               "measured_tier": sum(r.get("tier") == "measured" for r in sel),
               "geomean_vs_eager": geomean(vs_e), "geomean_vs_compile": geomean(vs_c),
               ">=1x_eager": sum(x >= 1.0 for x in vs_e),
               ">=1x_compile": sum(x >= 1.0 for x in vs_c)}
        big = [r for r in timed if r.get("bound") == "memory" and r.get("bytes", 0) >= BIG_BYTES]
        agg["memory_bound_>=64MB"] = len(big)
        agg["of_those_>=85%_copy"] = sum((r["pct"].get("pack") or 0) >= 85 for r in big)
        aggregates[lv] = agg
        lines += [
            f"## Level {lv}",
            "",
            f"{agg['files']} files; {agg['covered']} covered by the generator (the rest, and why, "
            f"in coverage.jsonl); {agg['run']} run here, {agg['measured_tier']} reached the "
            f"measured tier, {agg['timed']} timed with a pack ({agg['pack_runs_kernel']} running "
            f"the kernel, the rest the reference by the pack's own choice).",
            "",
            f"- geometric mean speedup over eager: {_f(agg['geomean_vs_eager'], '.2f')}x over "
            f"{len(vs_e)} files; >= 1.0x on {agg['>=1x_eager']}",
            f"- geometric mean speedup over torch.compile: {_f(agg['geomean_vs_compile'], '.2f')}x "
            f"over {len(vs_c)} files; >= 1.0x on {agg['>=1x_compile']}",
            f"- memory-bound files of >= 64 MB: {len(big)}; at >= 85% of copy bandwidth: "
            f"{agg['of_those_>=85%_copy']}",
            "",
            "| file | tier | pack runs | pack ms | eager ms | compile ms | x eager | x compile "
            "| % of ceiling (pack / eager / compile) | ceiling | MB | port s | note |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        left = sorted((c["file"] for c in cov if c["covered"] and c["file"] not in
                       {r["file"] for r in sel}), key=lambda n: sort_key(Path(n)))
        for r in sel:
            ms, pct, sp = r.get("ms", {}), r.get("pct", {}), r.get("speedup", {})
            note = r.get("reason") or "; ".join(r.get("failures", []))
            if r.get("errors"):
                errs = [f"{k}: {e}" for k, e in r["errors"].items()]
                note = "; ".join([note] * bool(note) + errs)
            if r.get("inputs_nonzero") is False:
                note += " (an input is all zeros)"
            cells = [r["file"], r.get("tier", r.get("verdict", "?")), r.get("pack_runs", "-"),
                     _f(ms.get("pack")), _f(ms.get("eager")), _f(ms.get("compile")),
                     _f((sp.get("eager") or [None])[0], ".2f"),
                     _f((sp.get("compile") or [None])[0], ".2f"),
                     " / ".join(_f(pct.get(p), ".0f") for p in ("pack", "eager", "compile")),
                     r.get("ceiling", "-"),
                     _f(r["bytes"] / 2**20 if r.get("bytes") else None, ".0f"),
                     _f(r.get("port_s"), ".0f"), note[:400]]
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
        slow = [r["file"] for r in timed if r["speedup"].get("compile", [9.0])[0] < 1.0]
        if slow:
            lines += ["", f"Below 1.0x torch.compile: {', '.join(slow)}."]
        if left:
            lines += ["", f"Covered but not run yet (the time budget; the same command runs "
                          f"them): {', '.join(left)}."]
        out = sorted((c for c in cov if not c["covered"]), key=lambda c: sort_key(Path(c["file"])))
        if out:
            lines += ["", f"Not covered by the generator ({len(out)}):", ""]
            lines += [f"- {c['file']}: {c['reason'][:160]}" for c in out]
        lines.append("")
    return "\n".join(lines) + "\n", aggregates


def write_reports(out: Path, rows: dict[str, dict[str, Any]], cover: dict[str, dict[str, Any]],
                  meta: dict[str, Any]) -> str:
    mine = [r for k, r in rows.items() if k in cover]
    text, aggregates = summarize(mine, cover, meta)
    (out / "SUMMARY.md").write_text(text, encoding="utf-8")
    (out / "results.json").write_text(json.dumps(
        {"meta": meta, "levels": aggregates, "rows": mine,
         "not_covered": [c for c in cover.values() if not c["covered"]]}, indent=1),
        encoding="utf-8")
    return text


def kb_commit(args: argparse.Namespace) -> str:
    if args.kb_commit:
        return args.kb_commit
    if args.kb_commit_file:
        return args.kb_commit_file.read_text(encoding="utf-8").strip()
    return "unknown (pass --kb-commit or --kb-commit-file)"


def run_meta(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    import torch

    import hwmodels
    from harness import env_info

    det = hwmodels.detect()
    if det.model is None or not torch.cuda.is_available():
        raise SystemExit(f"error: timing needs a GPU; none usable here ({det.reason}); "
                         "--list works without one")
    return {
        "device": det.device_name, "hw_model": det.model.name,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": env_info.versions(),
        "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(REPO),
        "kb_repo": args.kb_repo, "kb_commit": kb_commit(args),
        "command": "python -m bench.kernelbench_gpu " + " ".join(argv),
        "method": (
            f"each covered file ported with porter.port.port(FILE, [{det.model.name}]) at its own "
            f"sizes and dtype (measured tier, at most {args.max_variants} candidates); then "
            "harness.bench_op: the pack (porter.load_pack), the "
            "file's Model(*get_init_inputs()) (eval mode, as the porter ingests it) in eager "
            "and under torch.compile (default mode), "
            "interleaved in one process on the same get_inputs() drawn on the GPU, CUDA events "
            "with a device-side head start, the LLC flushed every repetition, median of "
            f"{args.reps} reps; speedup = baseline median / pack median (paired per repetition); "
            "one subprocess per file"),
        "search": {"max_variants": args.max_variants, "reps": args.reps,
                   "timeout_s": args.timeout},
        "porter_env": {k: v for k, v in sorted(os.environ.items())
                       if k.startswith("PORTER_") and k != "PORTER_GIT_REV"},
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kb_dir", nargs="?", type=Path, help="folder holding level1/ and level2/")
    ap.add_argument("--levels", default="1,2", help="comma-separated levels (default 1,2)")
    ap.add_argument("--out", type=Path, help="results folder (created; a rerun continues it)")
    ap.add_argument("--files", help="comma-separated file names or stems to run (default all)")
    ap.add_argument("--list", action="store_true",
                    help="print the covered files and why the others are not, then stop (no GPU)")
    ap.add_argument("--coverage", type=Path,
                    help="a coverage.jsonl of an earlier --list, reused instead of deciding again")
    ap.add_argument("--jobs", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)),
                    help="coverage checks at once (CPU; default: cores - 2, at most 12)")
    ap.add_argument("--gpu-jobs", type=int, default=DEFAULT_GPU_JOBS,
                    help="files in flight at once; one at a time on the GPU (default "
                         f"{DEFAULT_GPU_JOBS})")
    ap.add_argument("--max-variants", type=int, default=DEFAULT_MAX_VARIANTS,
                    help=f"port candidates per file (default {DEFAULT_MAX_VARIANTS})")
    ap.add_argument("--time-budget-s", type=float, default=DEFAULT_TIME_BUDGET_S,
                    help="start no new file after this many seconds of the run; the same command "
                         f"continues it (default {DEFAULT_TIME_BUDGET_S:g})"),
    ap.add_argument("--reps", type=int, default=DEFAULT_REPS,
                    help=f"timed repetitions per provider (default {DEFAULT_REPS})")
    ap.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                    help="seconds per file before its child is killed (default "
                         f"{DEFAULT_TIMEOUT_S:g})")
    ap.add_argument("--kb-repo", default="ScalingIntelligence/KernelBench",
                    help="the KernelBench repository the files come from (for the record)")
    ap.add_argument("--kb-commit", help="its commit (git -C <checkout> rev-parse HEAD)")
    ap.add_argument("--kb-commit-file", type=Path, help="a file holding that commit")
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # the GPU child's mode
    ap.add_argument("--cover-one", type=Path, help=argparse.SUPPRESS)  # the coverage child's
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.cover_one is not None or args.one is not None:
        import logging

        logging.basicConfig(level=logging.WARNING)
        if args.cover_one is not None:
            row = cover_one(args.cover_one)
        else:
            row = measure_one(args.one, args.out, args)
        print(json.dumps(row, default=str), flush=True)
        return 0
    if args.kb_dir is None or args.out is None:
        print("error: KB_DIR and --out are required", file=sys.stderr)
        return 2
    levels = [lv.strip() for lv in args.levels.split(",") if lv.strip()]
    names = [n.strip() for n in args.files.split(",")] if args.files else None
    files = problem_files(args.kb_dir.resolve(), levels, names)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _end_children)
    signal.signal(signal.SIGINT, _end_children)
    t0 = time.monotonic()
    cover = coverage(files, out, args.jobs, min(args.timeout, 300.0), args.coverage)
    covered = [f for f in files if cover[key_of(f)]["covered"]]
    print(f"coverage: {len(covered)} of {len(files)} files covered "
          f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    if args.list:
        for f in files:
            c = cover[key_of(f)]
            what = f"covered: {c.get('family')} ({c.get('fusion')})" if c["covered"] else \
                f"not covered: {c['reason']}"
            print(f"{key_of(f)}: {what}")
        return 0

    meta = run_meta(args, argv)
    results = out / "results.jsonl"
    rows = read_jsonl(results)
    todo = [f for f in covered if key_of(f) not in rows]
    print(f"{len(covered)} covered files, {len(covered) - len(todo)} already in {results}, "
          f"{len(todo)} to run", file=sys.stderr, flush=True)
    write_reports(out, rows, cover, meta)
    lock = threading.Lock()
    started = iter(range(1, len(todo) + 1))

    def one(f: Path) -> None:
        with lock:
            i = next(started)
            if _STOP.is_set():
                return
            if time.monotonic() - t0 > args.time_budget_s:
                print(f"[{i}/{len(todo)}] {key_of(f)}: not started (--time-budget-s "
                      f"{args.time_budget_s:g} s spent); the same command runs it",
                      file=sys.stderr, flush=True)
                return
        print(f"[{i}/{len(todo)}] {key_of(f)}", file=sys.stderr, flush=True)
        row = measure(f, out, args)
        sp = row.get("speedup", {})
        if _STOP.is_set():
            return  # killed by the stop, not a verdict on the file
        with lock:
            append_jsonl(results, row)
            rows[row["key"]] = row
            write_reports(out, rows, cover, meta)
        print(f"[{i}/{len(todo)}] {key_of(f)}: {row.get('verdict')} tier {row.get('tier', '-')}, "
              f"x eager {_f((sp.get('eager') or [None])[0], '.2f')}, x compile "
              f"{_f((sp.get('compile') or [None])[0], '.2f')} ({row['seconds']:.0f} s, "
              f"{row.get('gpu_wait_s', 0):.0f} s waiting for the GPU)"
              + (f": {row.get('reason') or '; '.join(row.get('failures', []))}"[:300]
                 if row.get("verdict") != "timed" else ""), file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=max(1, args.gpu_jobs)) as pool:
        list(pool.map(one, todo))
    print(write_reports(out, rows, cover, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
