"""The measured tier on the local GPU: each candidate checked at its bucket's shape, those far
slower than the fastest or eager dropped (`drop_slow`), the rest timed side by side, the fastest
through every stage of the judge, the kept one timed beside eager PyTorch
and held to the speed of light. A candidate whose device runs pass their deadline is taken to
be hung: the ledger records it rejected and the process ends (a CUDA kernel cannot be stopped
from the host), so the same command resumes without it."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import Any

from porter.budget import DEVICE_DEADLINE_S
from porter.errors import PortError
from porter.judge.common import Pending
from porter.judge.common import device_check_key
from porter.judge.common import record_verdict
from porter.judge.interpreted import RefittingCandidate
from porter.packs import bound
from porter.planner import dtype_name
from porter.verdicts import cfg_text
from targets.tiers import Tier

if TYPE_CHECKING:
    import torch

    from hwmodels.model import HardwareModel
    from porter.session import PortSession
    from targets.base import TargetBackend

# A bucket runs the reference op instead of the kernel only when eager is clearly faster: kernel
# slower at the median by more than 3% (and in at least 80% of paired repetitions).
PREFER_REFERENCE_BELOW = 0.97

# Repetitions of the on-device timing (candidates side by side, then the winner beside eager).
# At 20, configs 4% apart at a 15 us shape swapped places between runs (bench/NOTES.md item 18);
# a repetition costs about a quarter millisecond (head start and LLC flush included).
DEVICE_REPS = 50
# A first screen of every candidate at SCREEN_REPS, then the FINALISTS fastest again at
# DEVICE_REPS side by side: full repetitions only where the ranking is close enough to matter.
SCREEN_REPS = 10
FINALISTS = 3

# A candidate whose one call takes this many times the fastest candidate's or eager PyTorch's is
# not timed side by side: it cannot be kept, and its repetitions can cost minutes (KernelBench
# 35_GroupNorm, inputs of 7.5 GB: four candidates' timing ran past 150 s on an H100).
SLOW_FACTOR = 8.0

# Kernel forms (porter.packs.unseen.kernel_form) of which, beside the kept kernel, each bucket
# times the config the module's own rule gives for that form (`form_speedups`): the loader's
# evidence at shapes no bucket was ported for, where the rule picks another form than the
# buckets' kept ones (layernorm's looped kernel at 20,000 wide; split_coop past 32,768).
EVIDENCE_FORMS = ("one-block", "looped", "split_coop")
# Repetitions of each form's config beside eager: evidence for an estimate that needs a 10%
# margin per octave, not a ranking of close candidates.
FORM_REPS = 20
# Set to 0 to skip the forms' timing (a port then writes no `form_speedups`).
FORM_EVIDENCE_ENV = "PORTER_FORM_EVIDENCE"

DEVICE_HUNG_EXIT = 3
_exit = os._exit  # no cleanup: the main thread is stuck in CUDA; tests replace it


@contextlib.contextmanager
def deadline(seconds: float, on_expire: Callable[[], None]) -> Iterator[None]:
    """Run the block; if it is still running after `seconds`, call `on_expire` from a watchdog
    thread (the blocked thread waits in CUDA with the GIL released, so the watchdog runs)."""
    timer = threading.Timer(seconds, on_expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def one_call_ms(fn: Callable[..., Any], args: tuple[Any, ...], calls: int = 1) -> float:
    """The fastest of `calls` single calls of `fn(*args)`, by CUDA events (warm: compiled)."""
    import torch

    best = float("inf")
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.no_grad():
            fn(*args)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def drop_slow(session: PortSession, hw: HardwareModel, bucket: str, dname: str,
              shape: tuple[int, ...], passing: list[tuple[Pending, Any]],
              args: tuple[Any, ...]) -> list[tuple[Pending, Any]]:
    """`passing` without the candidates whose one call takes over SLOW_FACTOR times the
    fastest candidate's or eager's, each the faster of two calls (a first call here can still
    compile: cross-entropy's took 200-870 ms against ~0.1 ms warm on the H100); each dropped
    one gets a verdict that says so."""
    times = [one_call_ms(cand, args, calls=2) for _, cand in passing]
    eager = one_call_ms(session.problem.reference, args, calls=2)
    floor = min(*times, eager)
    kept = []
    for (p, cand), ms in zip(passing, times, strict=True):
        if ms <= SLOW_FACTOR * floor:
            kept.append((p, cand))
            continue
        record_verdict(session, hw, bucket, dname, shape, p, passed=False,
                       why=f"one call took {ms:.4g} ms, over {SLOW_FACTOR:g}x the fastest of the "
                           f"candidates and eager PyTorch ({floor:.4g} ms): not timed further")
    return kept


def form_configs(probe: Any, hw: HardwareModel, inputs: tuple[Any, ...], kept_form: str | None,
                 dname: str) -> list[tuple[str, dict[str, Any]]]:
    """(form, config) for each of EVIDENCE_FORMS but the kept kernel's whose config the module's
    rule gives at these inputs on `hw`, derived as the pack's loader derives one at a shape no
    bucket was ported for (`probe`: the module, its rules swapped while they are asked, so
    nothing may launch from it meanwhile)."""
    from porter.packs.unseen import derive_config

    configs = []
    for form in EVIDENCE_FORMS:
        if form == kept_form:
            continue
        config, _how = derive_config(probe, hw, inputs, form=form)
        if config is not None:
            configs.append((form, {**config, "dtype": dname}))
    return configs


def form_speedups(session: PortSession, hw: HardwareModel, at_shape: Any, dtype: torch.dtype,
                  source: str, kept_config: dict[str, Any],
                  make_args: Callable[[], tuple[Any, ...]]) -> dict[str, dict[str, Any]]:
    """Each other kernel form's config (`form_configs`), checked at the bucket's shape
    (`at_shape`: the problem with its smoke shape there; the smoke stage) and timed beside
    eager: {form: {"config", "speedup_vs_eager" (eager time / its time, median of paired
    repetitions), "time_ms"}}. A config that fails its check or
    crashes is left out, with a line saying so. Where the rule picks another form than the
    buckets' kept ones at a shape no bucket was ported for, these are the loader's evidence of
    that config's speed (porter/packs/unseen.py); a form's fastest search candidate was not
    (bench/NOTES.md item 60: one untuned candidate had run 0.32x eager)."""
    import torch

    from harness import check
    from harness.timing import compare
    from porter.packs.unseen import kernel_form

    if os.environ.get(FORM_EVIDENCE_ENV, "1") == "0":
        return {}
    dname = dtype_name(dtype)
    shape = tuple(at_shape.smoke_shape)
    # the rules read only shapes, strides and dtypes: meta tensors (KernelBench 35's are 7.5 GB)
    meta = tuple(at_shape.make_inputs(shape, dtype, torch.device("meta"),
                                      torch.Generator().manual_seed(0)))
    # derive_config swaps the module's rules while it asks them: nothing else runs meanwhile
    module = session.module(source, interpret=False)
    found: dict[str, dict[str, Any]] = {}
    for form, config in form_configs(module, hw, meta, kernel_form(kept_config), dname):
        cand = RefittingCandidate(module, session.gen_op, hw, config)
        what = f"{hw.name} {shape} {dname}: the {form} form's rule config {cfg_text(config)}"

        def on_hang(what: str = what) -> None:
            print(f"porter port: {what} did not finish in {session.target_deadline_s:.0f} s: "
                  f"taken to be hung. Stopping; rerun with {FORM_EVIDENCE_ENV}=0 to port "
                  "without timing the other forms' configs.", file=sys.stderr, flush=True)
            _exit(DEVICE_HUNG_EXIT)

        try:
            with deadline(session.target_deadline_s, on_hang):
                quick = check(at_shape, cand, device="cuda", interpret=False, hw=hw,
                              stages=["smoke"], dtypes=[dtype])
                ok = quick.passed and not cand.refitted
                cmp = compare({"kernel": lambda *a, _c=cand: _c(*a),
                               "eager": session.problem.reference},
                              make_args, hw=hw, reps=FORM_REPS, graph=False) if ok else None
        except Exception as exc:  # noqa: BLE001 - no evidence from a config that crashes
            print(f"porter port: {what} crashed ({type(exc).__name__}: {exc}); no evidence of "
                  "that form here", file=sys.stderr, flush=True)
            continue
        if cmp is None:
            why = ("it ran another config at this shape" if quick.passed
                   else quick.failed.message if quick.failed else "failed")
            print(f"porter port: {what} failed its check ({why}); no evidence of that form "
                  "here", file=sys.stderr, flush=True)
            continue
        found[form] = {"config": {k: v for k, v in config.items() if k != "dtype"},
                       "speedup_vs_eager": round(cmp.ratio("eager", "kernel")[0], 4),
                       "time_ms": cmp.timings["kernel"].median_ms}
    return found


def device_bucket(session: PortSession, hw: HardwareModel, backend: TargetBackend,
                  shape: tuple[int, ...], dtype: torch.dtype, bucket: str,
                  pending: list[Pending]) -> str:
    """Measured tier on the local GPU for one (bucket, dtype).

    Every candidate is first checked at the bucket's own shape (one trial, poisoned output,
    fp32 reference: the smoke stage) and, if right, timed alone. The fastest then goes
    through all five stages (shared between buckets when the kernel body, config and dtype
    are the same) before it is kept; if it fails, the next fastest is tried. The kept one is
    timed beside eager to record the speedup, and the speed-of-light gate applies.
    """
    import dataclasses

    import torch

    from harness import check
    from harness.roofline import analyze
    from harness.timing import compare

    dname = dtype_name(dtype)
    dev = torch.device("cuda")

    def make_args() -> tuple[Any, ...]:
        return tuple(session.problem.make_inputs(shape, dtype, dev, torch.Generator(dev)))

    limit = session.target_deadline_s

    def on_hang(p: Pending, what: str) -> Callable[[], None]:
        return lambda: hung(session, hw, bucket, dname, shape, p, what, limit)

    at_shape = dataclasses.replace(session.problem, smoke_shape=tuple(shape))
    # every stage at the bucket's shape, where the unit's op was traced there and serves only it
    full = session.problem if session.own_shape is None else dataclasses.replace(
        at_shape, sweep_shapes=(tuple(shape),), odd_shapes=(tuple(shape),))
    only = "" if session.own_shape is None else (
        f" (at {tuple(shape)} only: its op was traced there)")
    passing: list[tuple[Pending, Any]] = []
    for p in pending:
        module = session.module(p.source, interpret=False)
        cand = RefittingCandidate(module, session.gen_op, hw, p.cand.config)
        try:
            with deadline(limit, on_hang(p, f"its first run at {shape}")):
                quick = check(at_shape, cand, device="cuda", interpret=False, hw=hw,
                              stages=["smoke"], dtypes=[dtype])
        except ValueError as exc:
            # harness.check's ProblemError (a ValueError): the spec's own code failed
            raise PortError(f"{session.spec.path}: the spec's own code failed while its kernel "
                            f"was judged on the device: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - a kernel that crashes is a verdict
            record_verdict(session, hw, bucket, dname, shape, p, passed=False,
                        why=f"crashed at {shape}: {type(exc).__name__}: {exc}")
            continue
        if not quick.passed:
            failed = quick.failed
            record_verdict(session, hw, bucket, dname, shape, p, passed=False,
                        why=f"{failed.name}: {failed.message}" if failed else "failed")
            continue
        if cand.refitted:
            # At its own bucket's shape a candidate must run its own config: the pack records
            # p.cand.config and its loader launches it, so a timing of a refitted config would
            # be evidence about another kernel than the one the pack ships.
            record_verdict(session, hw, bucket, dname, shape, p, passed=False,
                           why=f"its config does not fit its own bucket's shape {shape}: the "
                               "judge would time another config than the one the pack records")
            continue
        passing.append((p, cand))
    # (finalist? 0 : 1, median ms): a screened-out candidate never outranks a finalist, whose
    # full-repetition median can differ from its screen's
    timed: list[tuple[tuple[int, float], Pending, Any]] = []

    def time_side_by_side(group: list[tuple[Pending, Any]], reps: int) -> dict[int, Any]:
        # Candidates timed interleaved in one comparison (same inputs, same machine drift);
        # events with the host head start and a flushed LLC every repetition.
        cmp = compare({str(i): (lambda *a, _c=c: _c(*a)) for i, (_, c) in enumerate(group)},
                      make_args, hw=hw, reps=reps, warmup=3, graph=False)
        return {id(p): cmp.timings[str(i)] for i, (p, _) in enumerate(group)}

    if passing:
        passing = drop_slow(session, hw, bucket, dname, shape, passing, make_args())
    if passing:
        screened = len(passing) > FINALISTS
        timings = time_side_by_side(passing, SCREEN_REPS if screened else DEVICE_REPS)
        finalists = {id(p) for p, _ in passing}
        if screened:
            # the screen ranks them; the FINALISTS fastest are timed again at full reps
            ranked = sorted(passing, key=lambda pc: timings[id(pc[0])].median_ms)
            timings.update(time_side_by_side(ranked[:FINALISTS], DEVICE_REPS))
            finalists = {id(p) for p, _ in ranked[:FINALISTS]}
        for p, cand in passing:
            t = timings[id(p)]
            p.numbers = {**p.numbers, "projected_ms": p.numbers.get("time_ms"),
                         "time_ms": t.median_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms,
                         "label": "measured", "reps": t.reps}
            timed.append(((0 if id(p) in finalists else 1, t.median_ms), p, cand))
    timed.sort(key=lambda item: item[0])
    tol = ""
    winner: tuple[Pending, Any] | None = None
    for _, p, cand in timed:
        if winner is not None:
            break
        ckey = device_check_key(p, dname)
        if ckey not in session.checks:
            try:
                with deadline(limit, on_hang(p, "its check at the judge's shapes")):
                    report = check(full, cand, device="cuda", interpret=False, hw=hw,
                                   dtypes=[dtype])
            except ValueError as exc:
                # harness.check's ProblemError (a ValueError): the spec's own code failed
                raise PortError(f"{session.spec.path}: the spec's own code failed while its "
                                f"kernel was judged on the device: {exc}") from exc
            msg = (f"passed all stages on the device{only}" if report.passed else
                   f"{report.failed.name}: {report.failed.message}" if report.failed
                   else "failed")
            session.checks[ckey] = (report.passed, msg, report.tolerances)
            session.checks_run += 1
        else:
            session.checks_shared += 1
        passed, msg, tol = session.checks[ckey]
        p.details["check"] = {"key": ckey, "interpreted": False, "passed": passed,
                              "message": msg, "tolerances": tol}
        session.record(hw, backend.name, Tier.MEASURED if passed else Tier.COMPILED, passed,
                     p.cand.config, shape, dname, message=msg)
        if not passed:
            record_verdict(session, hw, bucket, dname, shape, p, passed=False, why=msg)
            continue
        winner = (p, cand)
    if winner is None:
        return tol
    p, cand = winner
    cmp = compare({"kernel": lambda *a: cand(*a), "eager": session.problem.reference},
                  make_args, hw=hw, reps=DEVICE_REPS, graph=False)
    t = cmp.timings["kernel"]
    nbytes = p.numbers.get("bytes_moved") or 0
    flops = p.numbers.get("flops") or 0
    # matmul_epilogue and matmul_rowwise: the matmul's FLOPs run on the matrix units
    family = str(getattr(session.gen_op, "family", ""))
    unit = "matrix" if family.startswith("matmul_") else "simt"
    roof = analyze(nbytes, flops, t.median_ms, hw, dtype, math=unit)
    vs_eager = cmp.ratio("eager", "kernel")  # eager time / kernel time, per-rep pairs
    p.numbers.update({"time_ms": t.median_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms,
                      "pct_of_peak": roof.pct_peak, "floor_ms": roof.floor_ms,
                      "speedup_vs_eager": vs_eager[0],
                      "speedup_vs_eager_p20_p80": [vs_eager[1], vs_eager[2]]})
    # the second time: what a Python caller sees calling the kernel back to back, as the pack's
    # loader calls it, beside eager's; the decision below takes the time that binds
    p.numbers.update(bound.call_times(cand, session.problem.reference, make_args()))
    forms = form_speedups(session, hw, at_shape, dtype, p.source, p.cand.config, make_args)
    if forms:
        p.numbers["form_speedups"] = forms
    eager_us = cmp.timings["eager"].median_ms * 1e3
    binds = max(t.median_ms * 1e3, p.numbers["call_us"])
    eager_binds = max(eager_us, p.numbers["eager_call_us"])
    p.numbers["binding_speedup_vs_eager"] = round(eager_binds / binds, 4)
    if vs_eager[2] < 1.0 and vs_eager[0] < PREFER_REFERENCE_BELOW:
        # Eager PyTorch was faster in (at least) 80% of the paired repetitions, and by more
        # than noise at the median: the pack says so and its loader runs the reference for
        # this bucket on this device.
        p.numbers["prefer_reference"] = (
            f"eager PyTorch is faster here: kernel {t.median_ms * 1e3:.1f} us vs eager "
            f"{eager_us:.1f} us of device time (ratio p80 {vs_eager[2]:.2f})")
    elif binds > eager_binds / PREFER_REFERENCE_BELOW:
        # the device time favours the kernel, but a caller waits for the call (its Python and
        # launch), and eager's call returns sooner
        p.numbers["prefer_reference"] = (
            f"eager PyTorch is faster for a caller here: kernel {binds:.1f} us vs eager "
            f"{eager_binds:.1f} us per call back to back (device {t.median_ms * 1e3:.1f} vs "
            f"{eager_us:.1f} us)")
    if roof.exceeds_speed_of_light:
        record_verdict(session, hw, bucket, dname, shape, p, passed=False, why=roof.message)
        return tol
    p.tier = Tier.MEASURED
    session.record(hw, backend.name, Tier.MEASURED, True, p.cand.config, shape, dname,
                 metrics={"median_ms": t.median_ms, "pct_peak": roof.pct_peak,
                          "speedup_vs_eager": p.numbers["speedup_vs_eager"]},
                 spread={"p20_ms": t.p20_ms, "p80_ms": t.p80_ms}, message=roof.message)
    record_verdict(session, hw, bucket, dname, shape, p, passed=True)
    for _, other, _c in timed:
        if other is not p and "check" not in other.details:
            # timed and right at its shape, but slower than the kept one: reverted
            record_verdict(session, hw, bucket, dname, shape, other, passed=True,
                        why="checked at its shape (smoke) and timed; slower than the kept")
    return tol


def hung(session: PortSession, hw: HardwareModel, bucket: str, dname: str,
         shape: tuple[int, ...], p: Pending, what: str,
         limit: float = DEVICE_DEADLINE_S) -> None:
    """A candidate's device run passed its deadline (called from the watchdog thread):
    record it rejected, say so, and end the process (the hung kernel holds the GPU)."""
    why = (f"{what} did not finish in {limit:.0f} s: taken to be hung "
           "(a CUDA kernel cannot be stopped from the host)")
    record_verdict(session, hw, bucket, dname, shape, p, passed=False, why=why)
    print(f"porter port: {hw.name} {bucket}/{dname} {cfg_text(p.cand.config)}: {why}. Stopping; "
          f"the ledger ({session.ledger.path}) has it rejected, so the same command resumes "
          "without it.", file=sys.stderr, flush=True)
    _exit(DEVICE_HUNG_EXIT)
