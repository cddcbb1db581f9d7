"""Run the porter's interpreted-tier check on every KernelBench problem file in a folder.

    python -m bench.kernelbench_dir DIR --out RESULTS.md [--jobs N] [--timeout S]
    python -m bench.kernelbench_dir DIR --out RESULTS.md --port h100,mi300x

Each ``DIR/*.py`` is judged in its own subprocess (one crash or hang costs one row, never the
run) exactly as ``porter check FILE`` does on a CPU: the file is loaded as-is, its sizes are
reduced for the Triton interpreter, porter.codegen generates the kernel, and the harness runs
its five stages. With ``--port TARGETS`` each file goes through ``porter port FILE --targets
TARGETS`` instead (search, cross-compile for each target, the same judge; a pack per file under
``packs/`` beside the output), and the row records the tier each target reached. One JSON line
per file is appended to ``RESULTS.jsonl`` (next to the output) as soon as it is known, so an
interrupted run continues where it stopped: files already in the jsonl are skipped. The
markdown table is rewritten from the jsonl after every file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# Family by KernelBench's own names (only for the table's grouping; the verdict never uses it).
FAMILIES: tuple[tuple[str, str], ...] = (
    (r"softmax|logsoftmax", "softmax"),
    (r"relu|sigmoid|tanh|swish|gelu|selu|softplus|softsign|elu|hardtanh|hardsigmoid", "activation"),
    (r"norm", "norm"),
    (r"argmax|argmin", "reduction (index)"),
    (r"sum_reduction|mean_reduction|max_reduction|min_reduction|product_reduction", "reduction"),
    (r"loss", "loss"),
    (r"cumsum|cumprod", "scan"),
    (r"pool", "pooling"),
    (r"conv", "convolution"),
    (r"attention", "attention"),
    (r"matmul|matrix|multiplication|gemm", "matmul"),
)
MEMORY_BOUND = {"softmax", "activation", "norm", "reduction", "reduction (index)", "loss"}
STAGE_ORDER = ("smoke", "sweep", "adversarial", "determinism", "odd_sizes")


def kb_family(path: Path) -> str:
    """A KernelBench problem's kind, from its file name (``23_Softmax.py`` -> ``softmax``)."""
    stem = path.stem.lower()
    if "scalar" in stem:  # 5_Matrix_scalar_multiplication is an elementwise scale
        return "activation"
    for pattern, fam in FAMILIES:
        if re.search(pattern, stem):
            return fam
    return "other"


def sort_key(path: Path) -> tuple[int, str]:
    m = re.match(r"(\d+)_", path.name)
    return (int(m.group(1)) if m else 10**6, path.name)


# ---------------------------------------------------------------------------------------------
# The child: one file, one JSON object on stdout's last line.
# ---------------------------------------------------------------------------------------------


def check_one(path: Path) -> dict[str, Any]:
    """Judge one file the way `porter check FILE` does on a CPU; never raises."""
    os.environ["TRITON_INTERPRET"] = "1"  # before any @triton.jit module is imported
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    import torch

    from harness.check import check as harness_check
    from porter.commands.common import generated_candidate
    from porter.commands.common import generated_module
    from porter.errors import PorterError
    from porter.specs import load_spec

    row: dict[str, Any] = {"file": path.name, "kind": kb_family(path)}
    stage = "load"
    try:
        spec = load_spec(str(path))
        row["sizes"] = "; ".join(spec.describe_shape(s) for s in spec.interpret_shapes)
        stage = "codegen"
        op, module = generated_module(spec, interpret=True)
        row["template"] = f"{op.family} ({', '.join(op.fusion.ops) or 'no ops'})"
        stage = "check"
        report = harness_check(spec.problem(interpret=True), generated_candidate(module),
                               device="cpu", interpret=True, dtypes=spec.dtypes)
    except PorterError as exc:
        row["template"] = row.get("template") or f"not covered: {_one_line(exc)}"
        row.update(verdict="fail", failed_at=stage, reason=_one_line(exc))
        return row
    except Exception as exc:  # noqa: BLE001 - a traceback is itself the finding: record it
        row["template"] = row.get("template") or "not covered (crash)"
        row.update(verdict="crash", failed_at=stage,
                   reason=f"{type(exc).__name__}: {_one_line(exc)}")
        return row
    del torch
    row["stages"] = [s.name for s in report.stages if s.passed]
    failed = report.failed
    if report.passed:
        row.update(verdict="pass", failed_at=None, reason="")
    else:
        row.update(verdict="fail", failed_at=failed.name if failed else "not run",
                   reason=_one_line(failed.message) if failed else "stages not run")
    return row


def port_one(path: Path, targets: list[str], packs: Path) -> dict[str, Any]:
    """`porter port FILE --targets ...` on a CPU; the tier per target. Never raises."""
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from porter.errors import PorterError
    from porter.port import port

    row: dict[str, Any] = {"file": path.name, "kind": kb_family(path), "targets": targets}
    try:
        result = port(path, targets, packs, run_dir=packs.parent / "runs" / path.stem,
                      store_path=packs.parent / "results.sqlite")
    except PorterError as exc:
        row.update(verdict="fail", failed_at="port", reason=_one_line(exc), template="not covered")
        return row
    except Exception as exc:  # noqa: BLE001 - a traceback is itself the finding: record it
        row.update(verdict="crash", failed_at="port",
                   reason=f"{type(exc).__name__}: {_one_line(exc)}", template="?")
        return row
    tiers = {t.target: t.tier for t in result.targets}
    row["tiers"] = tiers
    row["template"] = result.fusion.get("text", "?") if isinstance(result.fusion, dict) else "?"
    reached = all(t in ("interpreted", "measured") for t in tiers.values())
    row.update(verdict="pass" if reached else "fail", failed_at=None if reached else "tier",
               reason="" if reached else ", ".join(f"{k}: {v}" for k, v in tiers.items()))
    return row


def _one_line(exc: Any) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 240 else text[:237] + "..."


# ---------------------------------------------------------------------------------------------
# The parent: subprocesses, the jsonl, the table.
# ---------------------------------------------------------------------------------------------


def run_file(path: Path, timeout: float, port_args: list[str] | None = None) -> dict[str, Any]:
    """One file in a fresh interpreter, with a wall-clock limit."""
    start = time.monotonic()
    cmd = [sys.executable, "-m", "bench.kernelbench_dir", "--one", str(path), *(port_args or [])]
    paths = [str(REPO), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, paths)))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                              env=env)
    except subprocess.TimeoutExpired:
        row = {"file": path.name, "kind": kb_family(path), "verdict": "timeout", "failed_at": "?",
               "reason": f"no result within {timeout:.0f}s", "template": "?"}
    else:
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode == 0 and lines:
            row = json.loads(lines[-1])
        else:
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            row = {"file": path.name, "kind": kb_family(path), "verdict": "crash", "failed_at": "?",
                   "reason": f"exit {proc.returncode}: {_one_line(tail)}", "template": "?"}
    row["seconds"] = round(time.monotonic() - start, 1)
    return row


def load_done(jsonl: Path) -> dict[str, dict[str, Any]]:
    done: dict[str, dict[str, Any]] = {}
    if jsonl.exists():
        for line in jsonl.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["file"]] = row
    return done


def verdict_text(row: dict[str, Any]) -> str:
    if row["verdict"] == "pass" and "tiers" in row:
        return "PASS (" + ", ".join(f"{k}: {v}" for k, v in row["tiers"].items()) + ")"
    if row["verdict"] == "pass":
        return "PASS (all 5 stages)"
    return f"FAIL at {row.get('failed_at')}: {row.get('reason', '')}"


def write_table(rows: list[dict[str, Any]], out: Path) -> None:
    """The markdown table plus per-kind counts (the header around it is the caller's)."""
    rows = sorted(rows, key=lambda r: sort_key(Path(r["file"])))
    mem = [r for r in rows if r["kind"] in MEMORY_BOUND]
    # Rows from --port carry the tier each target reached; the others ran the five-stage check.
    ported = any("tiers" in r for r in rows)
    passed = ("port with every target at the interpreted tier or above" if ported
              else "pass all five stages")
    lines = [
        f"{len(rows)} files, {len(mem)} memory-bound; "
        f"{sum(r['verdict'] == 'pass' for r in rows)} {passed} "
        f"({sum(r['verdict'] == 'pass' for r in mem)} of the memory-bound).",
        "",
        "| kind | files | pass |",
        "|---|---|---|",
    ]
    kinds = sorted({r["kind"] for r in rows}, key=lambda k: (k not in MEMORY_BOUND, k))
    for k in kinds:
        sel = [r for r in rows if r["kind"] == k]
        lines.append(f"| {k}{'' if k in MEMORY_BOUND else ' (out of scope)'} | {len(sel)} | "
                     f"{sum(r['verdict'] == 'pass' for r in sel)} |")
    lines += ["", "| file | kind | template (porter.codegen) | verdict | reduced sizes | s |",
              "|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["file"], r["kind"], r.get("template", "?"), verdict_text(r), r.get("sizes", "-"),
                 f"{r.get('seconds', 0):.1f}"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the process exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", type=Path, help="folder of KernelBench problem files")
    ap.add_argument("--out", type=Path, help="markdown table to write (jsonl kept beside it)")
    ap.add_argument("--jobs", type=int, default=1, help="files checked at once (default 1)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per file (default 600)")
    ap.add_argument("--port", metavar="TARGETS",
                    help="run `porter port` for these targets (comma-separated) instead of "
                         "the check")
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # the child's mode
    ap.add_argument("--packs", type=Path, help=argparse.SUPPRESS)  # the child's packs folder
    args = ap.parse_args(argv)
    if args.one is not None:
        import logging

        logging.basicConfig(level=logging.WARNING)
        if args.port:
            row = port_one(args.one, args.port.split(","), args.packs)
        else:
            row = check_one(args.one)
        print(json.dumps(row), flush=True)
        return 0
    if args.dir is None or args.out is None:
        ap.error("DIR and --out are required")
    if not args.dir.is_dir():
        print(f"error: {args.dir}: not a folder", file=sys.stderr)
        return 2
    files = sorted(args.dir.glob("*.py"), key=sort_key)
    names = {f.name for f in files}
    jsonl = args.out.with_suffix(".jsonl")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    done = load_done(jsonl)
    todo = [f for f in files if f.name not in done]
    print(f"{len(files)} files, {len(files) - len(todo)} already in {jsonl}, {len(todo)} to check",
          file=sys.stderr)
    rows = dict(done)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        port_args = (["--port", args.port, "--packs", str(args.out.parent.resolve() / "packs")]
                     if args.port else None)
        futures = {pool.submit(run_file, f, args.timeout, port_args): f for f in todo}
        for i, fut in enumerate(as_completed(futures), 1):
            row = fut.result()
            with jsonl.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            rows[row["file"]] = row
            write_table([r for name, r in rows.items() if name in names], args.out)
            print(f"[{i}/{len(todo)}] {row['file']}: {verdict_text(row)[:120]} "
                  f"({row['seconds']:.1f}s)", file=sys.stderr, flush=True)
    write_table([r for name, r in rows.items() if name in names], args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
