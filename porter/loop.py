"""The loop that drives the team for one target (DESIGN.md, "Data flow of porter port"):

    plan      Planner  -> tuning_plan.json          the shapes on the roofline, what to try first
    search    Search   -> candidates.json           per (shape, dtype) unit, best first, capped
    for each unit:
      write   Kernel Writer -> KernelSource         one per candidate
      judge   Benchmark -> BenchRow per kernel      compile, check, time or project; the ledger
                                                    keeps the fastest that passed, reverts the rest
      debug   Debugger -> Diagnosis per rejection   a fix where a rule knows one, verified at the
                                                    compile tier
      profile Profiler -> UnitProfile of the kept   resources, roofline, counters when measured
    artifacts per target: the six files above plus kernel.py / kernel.metal, bench_results.csv,
    debug_report.json (+ kernel_fixed.py), profile_report.json; each recorded in the ledger, and
    every role call (request and answer) in roles.jsonl.

On the device, configs kept at earlier units go first and later units get fewer candidates
when the target runs past its time budget (`porter.budget`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from porter import budget
from porter.ledger import config_key
from porter.ledger import source_hash
from porter.packs.format import shape_bucket
from porter.planner import dtype_name
from porter.results import BucketChoice
from porter.results import TargetResult
from porter.roles import artifacts as art
from porter.roles.base import DebugRequest
from porter.roles.base import JudgeRequest
from porter.roles.base import PlanRequest
from porter.roles.base import ProfileRequest
from porter.roles.base import RecordedCalls
from porter.roles.base import SearchRequest
from porter.roles.base import TargetContext
from porter.roles.base import WriteRequest
from porter.target_artifacts import save_artifact
from porter.target_artifacts import write_target_artifacts
from porter.verdicts import cfg_text
from porter.verdicts import failure_summary

if TYPE_CHECKING:
    from porter.roles.base import Team
    from porter.session import PortSession

# Debugger fixes verified per target (each a cross-compile). Fixes are checked at the compile
# tier and reported; they do not compete for the pack, so a port keeps the configs it picked.
MAX_FIXES_PER_TARGET = 4


@dataclass(frozen=True)
class OwnOp:
    """The op generated again from the reference traced at one bucket's own sizes, where the
    run's op has a size pinned that the bucket does not have (KernelBench 62: a model looked up
    by input shape pins x's dims at every size). It serves that shape only."""

    op: Any
    shape: tuple[int, ...]


def run_target(session: PortSession, team: Team, name: str) -> TargetResult:
    """Port `session`'s op to one target with `team`; returns the kept kernel per unit."""
    run_op = session.gen_op
    try:
        return _run_target(session, team, name)
    finally:  # a bucket's own op never outlives its unit
        session.gen_op, session.own_shape = run_op, None


def _run_target(session: PortSession, team: Team, name: str) -> TargetResult:
    import torch

    import hwmodels
    import targets

    hw = hwmodels.get(name)
    backend = targets.for_device(hw)
    tdir = session.run_dir / hw.name
    ctx = TargetContext(spec=session.spec, problem=session.problem, hw=hw, backend=backend,
                        gen_op=session.gen_op, run_dir=session.run_dir, target_dir=tdir,
                        measured_here=session.local == hw.name, session=session)
    caps, call, say = ctx.capabilities(), RecordedCalls(ctx), session.progress
    pairs = session.unit_pairs()
    shapes = list(dict.fromkeys(s for s, _ in pairs))
    ctx.plan = plan = call(team.planner, "plan", PlanRequest(
        op=session.spec.name, target=hw.name, family=ctx.family, shapes=tuple(shapes),
        dtypes=tuple(dict.fromkeys(dtype_name(d) for _, d in pairs))))
    save_artifact(ctx, team.planner, plan.write(tdir / art.TUNING_PLAN))
    say(f"[{hw.name}] {backend.name} {hw.build.arch}: plan -> {tdir / art.TUNING_PLAN}")
    notes: list[str] = []
    if not caps.compiles_here:
        lang = caps.language.capitalize()
        notes.append(f"{lang}: no {lang} compiler runs on this machine; " + (
            "checked on the CPU executor (tier emulated)" if caps.cpu_check == "emulator"
            else "source emitted only"))
    if not ctx.measured_here:
        notes.append("times projected (not measured): the target GPU is not on this machine")
    languages = getattr(session.gen_op, "languages", (caps.language,))
    if caps.language not in languages:
        # the op has no form in this backend's language (matmul_rowwise on Metal): the target
        # gets no kernel, says why, and the others are ported as usual
        why = (f"no {caps.language.capitalize()} form of the {ctx.family} family (it is "
               f"emitted as {', '.join(languages)}): no kernel for {hw.name}")
        say(f"[{hw.name}] {why}")
        return TargetResult(
            target=hw.name, vendor=hw.vendor, backend=backend.name, arch=hw.build.arch,
            hw_model_hash=hwmodels.model_hash(hw), tolerance=_tolerance_text(ctx),
            choices=(), notes=tuple(notes), failures=(why,))

    # the units: one per (shape bucket, dtype); a shape sharing a bucket is tuned once
    units: list[tuple[tuple[int, ...], Any, str, str]] = []
    seen: dict[tuple[str, str], tuple[int, ...]] = {}
    pinned: dict[str, str] = {}  # bucket -> why the generated kernel cannot serve its shape
    own: dict[str, OwnOp] = {}  # bucket -> its op traced at its own sizes (a pinned bucket)
    run_op = session.gen_op
    for shape in shapes:
        meta = session.problem.make_inputs(shape, pairs[0][1], torch.device("meta"),
                                           torch.Generator().manual_seed(0))
        first = next((t for t in meta if isinstance(t, torch.Tensor)), None)
        bucket = shape_bucket(first.shape if first is not None else shape)
        fresh = bucket not in own and bucket not in pinned  # its first shape is its unit's
        if fresh and (why := pinned_size(run_op, meta)) is not None:
            op, why_not = traced_at(session, meta)
            if op is None:
                pinned[bucket] = f"{why}; traced at this shape instead: {why_not}"
            else:
                own[bucket] = OwnOp(op, tuple(shape))
                notes.append(f"{bucket}: {why}; its op was generated again from the reference "
                             "traced at this shape, which it alone serves: checked and timed "
                             "on the device only")
        for dtype in [d for s, d in pairs if s == shape]:
            dname = dtype_name(dtype)
            if (bucket, dname) in seen:
                notes.append(f"shape {shape} shares bucket {bucket} with "
                             f"{seen[(bucket, dname)]}; tuned once")
                continue
            seen[(bucket, dname)] = shape
            units.append((shape, dtype, dname, bucket))

    def search(shape: tuple[int, ...], dname: str, bucket: str,
               winners: tuple[dict[str, Any], ...] = ()) -> art.UnitCandidates:
        return call(team.search, "candidates", SearchRequest(
            target=hw.name, shape=shape, dtype=dname, bucket=bucket,
            plan=plan.for_shape(shape, dname), max_variants=session.max_variants,
            winners=winners))

    found: dict[tuple[str, str], art.UnitCandidates] = {}
    for s, _, d, b in units:
        _use_op(ctx, run_op, own.get(b))
        found[(b, d)] = search(s, d, b)
    _use_op(ctx, run_op, None)
    n_cands = sum(len([c for c in u.candidates if c.origin != "existing"]) for u in found.values())
    n_valid = n_cands + sum(u.capped for u in found.values())
    save_artifact(ctx, team.search, art.Candidates(hw.name, tuple(found.values())).write(
        tdir / art.CANDIDATES))
    if ctx.measured_here:
        floor = max((x.floor_ms for x in plan.shapes), default=0.0)
        session.target_deadline_s = budget.device_deadline_s(
            session.deadline_s, budget.scaled_deadline_s(floor, len(session.judge_shapes())))
    more = f"; --exhaustive for all {n_valid}" if n_cands < n_valid else ""
    say(f"[{hw.name}] {len(units)} shape/dtype units, {n_cands} of {n_valid} valid candidates "
        f"({'measured on this GPU' if ctx.measured_here else 'projected'}{more})")

    choices: list[BucketChoice] = []
    failures: list[str] = []
    written: list[art.KernelSource] = []
    diagnoses: list[art.Diagnosis] = []
    fixed: list[art.KernelSource] = []
    profiles: list[art.UnitProfile] = []
    winners: list[dict[str, Any]] = []  # configs kept at earlier units, dtype left out
    started = time.perf_counter()
    session.judged_in_target = 0
    for index, (shape, _dtype, dname, bucket) in enumerate(units, 1):
        _use_op(ctx, run_op, own.get(bucket))
        unit = found[(bucket, dname)]
        if ctx.measured_here and winners:
            unit = found[(bucket, dname)] = search(shape, dname, bucket, tuple(winners))
        generated = tuple(c for c in unit.candidates if c.origin != "existing")
        if ctx.measured_here:
            generated = budget.within_time_budget(generated, index, len(units), started,
                                                  session.judged_in_target,
                                                  session.time_budget_s)
        if bucket in pinned:
            # the generated launcher would refuse every candidate at this shape
            generated = ()
            notes.append(f"{bucket}: no generated kernel: {pinned[bucket]}")
        cands = generated + tuple(c for c in unit.candidates if c.origin == "existing")
        if not cands and bucket in pinned:
            failures.append(f"{bucket}/{dname}: {pinned[bucket]}")
            say(f"[{hw.name}] {index}/{len(units)} {bucket}/{dname}: no kernel: "
                f"{pinned[bucket]}")
            continue
        kernels = tuple(call(team.writer, "write", WriteRequest(
            target=hw.name, config=c.config, bucket=bucket, dtype=dname,
            origin="existing" if c.origin == "existing" else "generated")) for c in cands)
        written.extend(kernels)
        session.already_judged = 0
        rows = call(team.benchmark, "judge", JudgeRequest(
            target=hw.name, bucket=bucket, dtype=dname, shape=shape, kernels=kernels))
        by_config = {config_key(k.config): k for k in kernels}
        for row in rows:
            if row.verdict == "rejected" and row.config in by_config:
                diag = call(team.debugger, "diagnose", DebugRequest(
                    target=hw.name, shape=shape, row=row, kernel=by_config[row.config],
                    details=_details(session, row)))
                if diag.fix_config is not None and len(fixed) < MAX_FIXES_PER_TARGET:
                    diag, kernel = _verify_fix(ctx, team, call, diag, shape)
                    if kernel is not None:
                        fixed.append(kernel)
                diagnoses.append(diag)
        choice = _choice(session, hw.name, shape, dname, bucket, kernels, team, call)
        if choice is not None:
            choices.append(choice)
            winners.append({k: v for k, v in choice.config.items() if k != "dtype"})
            kept = session.ledger.kept(hw.name, bucket, dname)
            profiles.append(call(team.profiler, "profile", ProfileRequest(
                target=hw.name, bucket=bucket, dtype=dname, shape=shape, config=choice.config,
                tier=choice.tier, numbers=dict(choice.numbers),
                details=dict(kept.details) if kept is not None else {})))
            t = choice.numbers.get("time_ms")
            outcome = f"kept {cfg_text(choice.config)}, {choice.tier}" + (
                f", {t * 1e3:.1f} us {choice.numbers.get('label', '')}" if t is not None else "")
        else:
            why = failure_summary(session.ledger, hw.name, bucket, dname)
            failures.append(f"{bucket}/{dname}: {why}")
            notes.append(f"{bucket}/{dname}: no candidate passed: {why}")  # why, per class
            outcome = f"no kernel: {why}"
        elapsed = time.perf_counter() - started
        left = elapsed / index * (len(units) - index)
        again = f"; {session.already_judged} already judged" if session.already_judged else ""
        say(f"[{hw.name}] {index}/{len(units)} {bucket}/{dname}, {len(cands)} candidates{again}: "
            f"{outcome} ({elapsed:.0f} s, ~{left:.0f} s left)")
    _use_op(ctx, run_op, None)

    write_target_artifacts(ctx, team, choices, written, diagnoses, fixed, profiles)
    session.ledger.write_csv(session.run_dir / art.BENCH_RESULTS)
    return TargetResult(
        target=hw.name, vendor=hw.vendor, backend=backend.name, arch=hw.build.arch,
        hw_model_hash=hwmodels.model_hash(hw), tolerance=ctx.tolerance or _tolerance_text(ctx),
        choices=tuple(choices), notes=tuple(dict.fromkeys(notes)), failures=tuple(failures))


def pinned_size(gen_op: Any, inputs: tuple[Any, ...]) -> str | None:
    """Why the generated kernel cannot serve `inputs`, or None: an input size its trace fixed
    (a guard of the reference's on the example's value) that these inputs do not have. Its
    launcher would refuse every config there ("out (112, 64, 512, 512), expected (112, 8,
    512, 512)": KernelBench 34/35, whose channels were pinned to the interpreter's 8)."""
    import sympy
    import torch

    graph = getattr(gen_op, "graph", None)
    for i, (node, t) in enumerate(zip(getattr(graph, "inputs", ()), inputs, strict=False)):
        if node is None or not isinstance(t, torch.Tensor) or len(node.shape) != t.dim():
            continue
        for d, size in enumerate(node.shape):
            if isinstance(size, (int, sympy.Integer)) and int(size) != int(t.shape[d]):
                return (f"the kernel traced at the example sizes has input {i}'s dim {d} fixed "
                        f"at {int(size)} (the trace specialized it); this shape has "
                        f"{int(t.shape[d])}")
    return None


def traced_at(session: PortSession, inputs: tuple[Any, ...]) -> tuple[Any, str]:
    """(op, "") generated from the reference traced at `inputs`' sizes (meta tensors: the
    trace allocates nothing), or (None, why not): the trace failed, or pinned a size still."""
    from porter import codegen

    generate = session.generate or (lambda ref, ex, name: codegen.generate(ref, ex, name=name))
    try:
        op = generate(session.spec.reference, tuple(inputs), session.spec.name)
    except Exception as exc:  # noqa: BLE001 - UnsupportedOpError, or the reference on meta
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    if (why := pinned_size(op, inputs)) is not None:
        return None, why
    return op, ""


def _use_op(ctx: TargetContext, run_op: Any, own: OwnOp | None) -> None:
    """The op the roles and the judge work with for the next unit: the run's, or the bucket's
    own (the judge then checks it at that shape only: `PortSession.own_shape`)."""
    ctx.gen_op = ctx.session.gen_op = run_op if own is None else own.op
    ctx.session.own_shape = None if own is None else own.shape


def _details(session: PortSession, row: art.BenchRow) -> dict[str, Any]:
    """What the judge recorded about a row's candidate (compiled kernels, check)."""
    for e in session.ledger:
        if (e.target, e.bucket, e.dtype, config_key(e.config), e.source_hash[:16]) == (
                row.target, row.bucket, row.dtype, row.config, row.source_hash):
            return {k: v for k, v in e.details.items() if not k.startswith("_")}
    return {}


def _verify_fix(ctx: TargetContext, team: Team, call: RecordedCalls, diag: art.Diagnosis,
                shape: tuple[int, ...]) -> tuple[art.Diagnosis, art.KernelSource | None]:
    """The Debugger's fix written and compiled for the target: fixed when it fits now."""
    from dataclasses import replace

    from porter.judge.compile_tier import fits

    assert diag.fix_config is not None
    kernel = call(team.writer, "write", WriteRequest(
        target=ctx.target, config=diag.fix_config, bucket=diag.bucket, dtype=diag.dtype))
    ok, why = fits(ctx.session, ctx.hw, ctx.backend, diag.fix_config, kernel.source, shape,
                   diag.dtype)
    diag = replace(diag, fixed=ok, fix_verdict=why)
    if not ok:
        return diag, None
    return diag, replace(kernel, origin="fixed",
                         note=f"{diag.fix_change}; fixes: {' '.join(diag.failure.split())}")


def _choice(session: PortSession, target: str, shape: tuple[int, ...], dname: str, bucket: str,
            kernels: tuple[art.KernelSource, ...], team: Team, call: RecordedCalls,
            ) -> BucketChoice | None:
    """The kept kernel of one unit as the pack will hold it (its source written again)."""
    import logging

    kept = session.ledger.kept(target, bucket, dname)
    if kept is None:
        return None
    kernel = next((k for k in kernels if config_key(k.config) == config_key(kept.config)), None)
    if kernel is None:  # kept in an earlier invocation of a resumed run
        origin = "existing" if kept.config.get("origin") == "existing" else "generated"
        kernel = call(team.writer, "write", WriteRequest(
            target=target, config=kept.config, origin=origin, bucket=bucket, dtype=dname))
    if source_hash(kernel.source) != kept.source_hash:
        logging.getLogger(__name__).warning(
            "%s %s/%s: regenerated source differs from the judged one; the pack gets the "
            "regenerated one", target, bucket, dname)
    # flat numbers, and each other kernel form's rule config timed here (the loader's evidence
    # at shapes no bucket was ported for: porter/judge/device.form_speedups)
    numbers = {k: v for k, v in kept.numbers.items()
               if not isinstance(v, dict) or k == "form_speedups"}
    return BucketChoice(bucket=bucket, dtype=dname, shape=tuple(shape), config=kept.config,
                        source=kernel.source, tier=kept.tier, numbers=numbers,
                        origin="existing" if kernel.origin == "existing" else "generated")


def _tolerance_text(ctx: TargetContext) -> str:
    from harness.tolerance import tolerance

    return "; ".join(f"{dtype_name(d)}: {tolerance(d, ctx.hw).describe()}"
                     for d in ctx.spec.dtypes)
