"""`porter port`: from an op spec to a verified, per-target specialized kernel pack.

`port()` loads the spec, generates the op (`generate_op`), opens the run (`porter.session`:
ledger, results store, budget), runs the team of six roles over every target
(`porter.loop.run_target`: plan, search, write, judge, debug, profile, keep or revert) and
writes the pack (`porter.packs.writer.write_pack`). Per target the run folder gets tuning_plan.json,
candidates.json, kernel.py / kernel.metal, bench_results.csv, debug_report.json (+
kernel_fixed.py when the Debugger fixed something), profile_report.json and roles.jsonl.

On a CPU the projection is cheap and the interpreter is not, so candidates are checked in
projected order and a candidate that cannot beat the one already kept is not interpreted at all
(recorded as reverted with that reason). Every check and number also goes to the results store.

On the device the search is budgeted (`porter.budget.resolve_budget`): the first
DEVICE_MAX_VARIANTS candidates per (bucket, dtype), configs kept at earlier units first, fewer
when the target runs past its time budget; every candidate is screened at SCREEN_REPS and the
FINALISTS fastest timed again at DEVICE_REPS (`porter.judge.device`). `exhaustive=True` judges
the whole space. A resumed run (same run dir) continues the ledger: judged candidates are not
redone, budget-skipped ones are, and the interpreted checks already spent count against
max_checks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from porter.budget import CPU_MAX_CHECKS  # noqa: F401 - the port's budget, importable from here
from porter.budget import CPU_MAX_VARIANTS  # noqa: F401
from porter.budget import DEADLINE_MAX_S  # noqa: F401
from porter.budget import DEVICE_DEADLINE_S  # noqa: F401
from porter.budget import DEVICE_MAX_VARIANTS  # noqa: F401
from porter.budget import DEVICE_MIN_VARIANTS  # noqa: F401
from porter.budget import DEVICE_TIME_BUDGET_S  # noqa: F401
from porter.budget import device_deadline_s
from porter.budget import resolve_budget
from porter.budget import scaled_deadline_s  # noqa: F401
from porter.errors import PortError
from porter.judge.device import DEVICE_HUNG_EXIT  # noqa: F401
from porter.judge.device import deadline  # noqa: F401
from porter.loop import run_target
from porter.packs import leading
from porter.results import BucketChoice  # noqa: F401 - what port() returns, importable from here
from porter.results import PortResult
from porter.results import TargetResult  # noqa: F401
from porter.session import PortSession
from porter.session import Progress
from porter.session import input_kinds
from porter.user_code import preflight
from porter.verdicts import brief_reason  # noqa: F401
from porter.verdicts import reject_kind  # noqa: F401

if TYPE_CHECKING:
    from porter.roles.base import Team

log = logging.getLogger(__name__)

DEFAULT_RUNS_DIR = Path("runs")


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def generate_op(reference: Callable[..., Any], example: tuple[Any, ...], name: str) -> Any:
    """Template code generation (porter.codegen); the seam tests replace with a stand-in."""
    from porter import codegen

    return codegen.generate(reference, example, name=name)


def _session(spec: Any, run_dir: Path, *, store_path: Path, resume: bool,
             max_variants: int | None, max_checks: int | None, progress: Progress,
             units: list[tuple[tuple[int, ...], Any]] | None, exhaustive: bool,
             time_budget_s: float | None, deadline_s: float | None,
             verbose: bool) -> PortSession:
    """The run's shared state: the op generated once, the local GPU detected, the budget."""
    import torch

    import hwmodels

    gen = torch.Generator().manual_seed(0)
    example = tuple(spec.make_inputs(tuple(spec.smoke_shape), spec.dtypes[0],
                                     torch.device("cpu"), gen))
    gen_op = generate_op(spec.reference, example, spec.name)
    det = hwmodels.detect()
    local = det.model.name if det.model is not None and torch.cuda.is_available() else None
    variants, checks, budget_s = resolve_budget(
        on_gpu=local is not None, max_variants=max_variants, max_checks=max_checks,
        exhaustive=exhaustive, time_budget_s=time_budget_s)
    session = PortSession(spec, gen_op, run_dir, store_path=store_path, resume=resume,
                          progress=progress, local=local, max_variants=variants,
                          max_checks=checks, time_budget_s=budget_s, units=units,
                          deadline_s=deadline_s, verbose=verbose, generate=generate_op)
    session.signature = input_kinds(example)
    session.leading_dims = leading.probe(spec.reference, example)
    session.detect_reason = det.reason
    return session


def port(
    spec_path: str | os.PathLike[str],
    targets: list[str],
    out_dir: str | os.PathLike[str] | None,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    resume: bool = True,
    max_variants: int | None = None,
    max_checks: int | None = None,
    store_path: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    units: list[tuple[tuple[int, ...], Any]] | None = None,
    exhaustive: bool = False,
    time_budget_s: float | None = None,
    deadline_s: float | None = None,
    verbose: bool = False,
    replace_pack: bool = False,
    team: Team | None = None,
    allow_generated: bool = True,
) -> PortResult:
    """Port one op to every target and write its pack.

    Args:
        spec_path: an op spec module or a KernelBench problem file.
        targets: hardware-model names or aliases ("a100", "h100", "mi300x", "m4", ...).
        out_dir: packs folder; the pack goes to `<out_dir>/<op>/`. None: no pack is written.
        run_dir: the run directory; default `runs/<new id>`. An existing one is continued.
        resume: skip candidates the run's ledger already judged (False starts a new ledger).
        max_variants: candidates per (target, bucket, dtype), in the search's order; default 3
            on a CPU, DEVICE_MAX_VARIANTS (8) on the GPU. A resumed run that passes None
            takes the value its run started with (config.json).
        max_checks: interpreted checks per run (shared ones are free); default 6 on a CPU. The
            checks an interrupted run already spent count (read back from its ledger).
        store_path: results store; default `runs/results.sqlite` (next to the run dirs).
        progress: called with one short line per step (the CLI prints them).
        units: (shape, torch dtype) pairs to tune instead of every spec shape x dtype (the
            benchmark suite tunes bf16 everywhere and fp16/fp32 on a few shapes).
        exhaustive: search every valid candidate (no cap, no time budget).
        time_budget_s: seconds per target on the device, trimming later units' candidates when
            behind; default DEVICE_TIME_BUDGET_S when neither max_variants nor exhaustive is
            given (never on a CPU).
        deadline_s: seconds a candidate's device runs may take before it is taken to be hung;
            default PORTER_DEVICE_DEADLINE_S, else scaled with the work (`scaled_deadline_s`).
        verbose: pass one line per candidate to `progress` (else one per shape/dtype unit).
        replace_pack: replace an existing pack of the op wholesale instead of merging into it
            (`porter.packs.writer.write_pack`'s `replace`; named so it does not hide
            dataclasses.replace).
        team: who plays each role (`porter.roles.Team`); default the offline rules team.
        allow_generated: False: where the spec names a kernel, only that kernel is a candidate
            (the generated one is not tried, so it never stands in; `porter.user_report`).

    Returns:
        A `PortResult` (its `pack_path` is set when a pack was written: with the targets that
        got a kernel; none when no target did). `PortResult.missing` lists the targets with no
        kernel, each with `failures` saying why.

    Raises:
        PortError / SpecError / UnsupportedOpError (all `PorterError`): bad input, with a
        message naming the file.
    """
    import hwmodels
    from harness import env_info
    from porter.packs.writer import check_out_dir
    from porter.packs.writer import write_pack
    from porter.roles import rules_team
    from porter.specs import load_spec

    say = progress or (lambda line: log.info("%s", line))
    spec_path = Path(spec_path)
    unknown = []
    for t in targets:
        try:
            hwmodels.get(t)
        except hwmodels.UnknownDeviceError as exc:
            unknown.append(f"{t!r} ({exc})")
    if unknown:
        known = ", ".join(m.name for m in hwmodels.all_models())
        raise PortError(f"unknown target(s) {', '.join(unknown)}; known: {known}")
    if not targets:
        raise PortError("no targets given; e.g. --targets h100,mi300x")
    # a bad --deadline or PORTER_DEVICE_DEADLINE_S fails here, not at the first GPU run
    device_deadline_s(deadline_s)
    if out_dir is not None:
        check_out_dir(out_dir)  # before any work, not after it
    # the user's code first in a child: a crash or hang there is one line, not this process's
    preflight(spec_path, [hwmodels.get(t).name for t in targets])
    with _captured_warnings(None) as early:  # loading runs the spec's reference once
        spec = load_spec(spec_path)

    rd = Path(run_dir) if run_dir is not None else DEFAULT_RUNS_DIR / new_run_id()
    rd.mkdir(parents=True, exist_ok=True)
    store = Path(store_path) if store_path is not None else rd.parent / "results.sqlite"
    if resume and (rd / "config.json").is_file():
        # a resumed run keeps the caps it started with unless told otherwise, so it ends with
        # the pack the uninterrupted run would have written
        try:
            before = json.loads((rd / "config.json").read_text())
        except ValueError:
            before = {}
        if max_variants is None and not exhaustive and isinstance(before.get("max_variants"), int):
            max_variants = before["max_variants"]
        if max_checks is None and isinstance(before.get("max_checks"), int):
            max_checks = before["max_checks"]
    config = {"spec": str(spec_path), "targets": list(targets), "out": str(out_dir),
              "resume": resume, "max_variants": max_variants, "max_checks": max_checks,
              "exhaustive": exhaustive, "time_budget_s": time_budget_s, "deadline_s": deadline_s,
              "store": str(store)}
    (rd / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    with _captured_warnings(rd / "warnings.txt", early) as caught:
        session = _session(spec, rd, store_path=store, resume=resume, max_variants=max_variants,
                           max_checks=max_checks, progress=say, units=units,
                           exhaustive=exhaustive, time_budget_s=time_budget_s,
                           deadline_s=deadline_s, verbose=verbose)
        session.allow_generated = allow_generated  # read by the Search role
        if session.local:
            where = f"measuring on {session.local}"
        else:
            where = f"no GPU here: {session.detect_reason}"
        say(f"{spec.name}: family {getattr(session.gen_op, 'family', '?')}; {where}")
        say(session.budget_text())
        team = team or rules_team()
        results = []
        seen = set()
        for t in targets:
            name = hwmodels.get(t).name
            if name in seen:
                continue
            seen.add(name)
            results.append(run_target(session, team, name))
    fusion = getattr(session.gen_op, "fusion", None)
    fusion_d = {"text": getattr(fusion, "text", str(fusion or "")),
                "bytes_saved": getattr(fusion, "bytes_saved", None)}
    result = PortResult(
        op=spec.name, spec_path=spec_path, run_dir=rd, targets=tuple(results),
        versions={k: v for k, v in env_info.versions().items() if v is not None},
        fusion=fusion_d, signature=session.signature, leading_dims=session.leading_dims,
        # A spec module defines `reference` itself: the loader imports it from reference.py
        # directly (its TRITON_KERNEL path would not resolve inside the pack). A KernelBench file
        # is self-contained and goes through load_spec, which lifts the Model's parameters.
        reference_function="reference" if getattr(spec, "source_kind", "spec") == "spec" else None,
        checks_run=session.checks_run, checks_shared=session.checks_shared,
        budget=session.budget_text(), warnings_file=rd / "warnings.txt" if caught else None,
    )
    if out_dir is not None:
        # Only the targets that got a kernel go into the pack: a target with none must not
        # replace what a pack already holds for it with nothing. No target: no pack written.
        packed = replace(result, targets=tuple(t for t in results if t.choices))
        if packed.targets:
            written = write_pack(packed, out_dir, replace=replace_pack)
            for note in written.notes:
                say(f"pack: {note}")
            result = replace(result, pack_path=written.path)
    return result


@contextlib.contextmanager
def _captured_warnings(path: Path | None, earlier: list[str] | None = None,
                       ) -> Iterator[list[str]]:
    """Collect the Python warnings (torch, numpy, Triton) raised inside the block instead of
    printing them; on exit write them and `earlier`'s, once each, to `path` (only when there
    were any; None: keep them in the yielded list). What matters about a candidate is in its
    verdict; these are for whoever debugs the port."""
    import warnings

    caught: list[str] = list(earlier or [])
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("default")
        try:
            yield caught
        finally:
            lines = [f"{w.filename}:{w.lineno}: {w.category.__name__}: {w.message}"
                     for w in records]
            caught[:] = dict.fromkeys([*caught, *lines])
            if caught and path is not None:
                path.write_text("\n".join(caught) + "\n")
