"""What bench/long_rows.py, bench/column_reductions.py, bench/align_ab.py and
bench/matmul_knobs.py share: their command line (--out, --cases, --reps) and picking the cases
it names, the local GPU and its hardware model, checking a generated module's configs before
timing them (each run once, its first rows compared against a float64 reference; a config that
raises or is wrong becomes a result row, not a crash), and the run record (a meta line, then
each case's rows appended to a jsonl as soon as the case is done)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch


def max_rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest absolute error over the reference's largest magnitude (inf if not finite)."""
    g = got.double()
    if not torch.isfinite(g).all():
        return float("inf")
    return float((g - want).abs().max() / want.abs().max().clamp_min(1e-30))


def check_config(mod: Any, inputs: tuple[Any, ...], cfg: dict[str, Any], want: torch.Tensor,
                 check_rows: int, tol: float, device: str, case: str, provider: str
                 ) -> tuple[dict[str, Any], Callable[..., Any] | None]:
    """Run `mod.launch(*inputs, config=cfg)` once and compare its first `check_rows` rows with
    `want`. Returns the result row and, when the config is right, a callable that launches it."""
    row: dict[str, Any] = {"case": case, "provider": provider, "config": cfg}
    try:
        got = mod.launch(*inputs, config=cfg)
        if device == "cuda":
            torch.cuda.synchronize()
        err = max_rel_err(got[:check_rows], want)
        del got
    except Exception as exc:  # noqa: BLE001 - a config that fails is a result
        return {**row, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}, None
    if err > tol:
        return {**row, "error": f"max rel err {err:.3g} > {tol}"}, None
    return {**row, "max_rel_err": err}, lambda *a: mod.launch(*a, config=cfg)


def run_cases(path: Path, det: Any, hw: Any, reps: int, cases: Sequence[Any],
              run: Callable[[Any], list[dict[str, Any]]],
              show: Callable[[list[dict[str, Any]]], None]) -> None:
    """Append a meta line (device, versions, code, copy bandwidth) to the jsonl at `path`, then
    each case's rows from `run(case)`, flushed and shown per case."""
    from harness import env_info

    repo = Path(__file__).resolve().parents[1]
    meta = {"meta": True, "device": det.device_name, "hw_model": hw.name,
            "versions": env_info.versions(),
            "git_rev": os.environ.get("PORTER_GIT_REV") or env_info.git_rev(repo),
            "copy_gbps": hw.measured_value("copy_bandwidth_gbps"), "reps": reps}
    print(json.dumps(meta), flush=True)
    with path.open("a") as sink:
        sink.write(json.dumps(meta) + "\n")
        for case in cases:
            rows = run(case)
            for r in rows:
                sink.write(json.dumps(r, default=str) + "\n")
            sink.flush()
            show(rows)


def case_parser(prog: str, doc: str, cases: Sequence[Any], reps: int) -> argparse.ArgumentParser:
    """The shared command line of `python -m bench.<prog>`: --out (the results folder), --cases
    (names among `cases`) and --reps (timed repetitions, default `reps`); the script adds its
    own options. The description is `doc`'s first paragraph."""
    ap = argparse.ArgumentParser(prog=f"python -m bench.{prog}", description=doc.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", default="", help="comma-separated case names (default: all): "
                    + ", ".join(c.name for c in cases))
    ap.add_argument("--reps", type=int, default=reps)
    return ap


def select_cases(cases: Sequence[Any], names: str, prog: str) -> list[Any]:
    """The cases named in the comma-separated `names` (all of them where it is empty); an
    unknown name stops the run, naming the known ones."""
    if not names:
        return list(cases)
    wanted = set(names.split(","))
    unknown = wanted - {c.name for c in cases}
    if unknown:
        raise SystemExit(f"{prog}: unknown case(s) {sorted(unknown)}; known: "
                         + ", ".join(c.name for c in cases))
    return [c for c in cases if c.name in wanted]


def local_gpu(prog: str) -> Any:
    """`hwmodels.detect()` for the local GPU: raises harness.timing.TimingUnavailable where
    there is none, stops the run where its device has no hardware model (the % of copy
    bandwidth needs one)."""
    import hwmodels
    from harness.timing import require_gpu

    require_gpu()
    det = hwmodels.detect()
    if det.model is None:
        raise SystemExit(f"{prog}: the local GPU matches no hardware model in "
                         f"hwmodels/devices/: {det.reason}")
    return det


def case_rows(rows: Sequence[dict[str, Any]]) -> tuple[str, list[dict[str, Any]],
                                                         list[dict[str, Any]]] | None:
    """(case name, the timed rows, the failed configs' rows) of one case's rows, as the scripts'
    tables print them; None where the case has neither."""
    final = [r for r in rows if r.get("final")]
    errors = [r for r in rows if "error" in r]
    if not final and not errors:
        return None
    return (final or errors)[0]["case"], final, errors

