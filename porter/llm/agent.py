"""The agent loop: Claude plans, writes, debugs and tunes; the harness judges; the ledger keeps.

For each target (in turn):

    plan    Planner -> tuning_plan.json (roofline floors computed; where the headroom is: model)
    round   `parallel` candidates at once, each:
              write   Kernel Writer -> a module (or Metal source)
              judge   the harness in isolated children (interpreter check + cross-compile)
              debug   on failure: Debugger -> diagnosis + fixed module -> judge (up to
                      `FIXES` times); kernel_fixed.py when a fix passed
            ledger: keep or revert each verdict (a cheat is rejected and says so)
    profile Profiler -> profile_report.json (registers, spills, shared memory, occupancy,
            roofline floor; time when measured)
    search  Search -> variants of the best, judged the same way (only where variants can be
            told apart: a time measured on the device)
    stop    token budget | device-time budget | share of the roofline reached | `patience`
            rounds without improvement | `max_rounds` | nothing left to compare variants by

The run summary (`<run>/llm/summary.json`, porter.llm.run) says per target why the loop
stopped and, for the run, what it cost: tokens in and out, cache writes and reads, an estimate
in USD, and the device seconds spent judging.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path
from typing import Any

from porter.errors import PorterError
from porter.ledger import Ledger
from porter.ledger import source_hash
from porter.llm.client import BudgetExhausted
from porter.llm.client import LLMClient
from porter.llm.config import LLMConfig
from porter.llm.inputs import dtype_name
from porter.llm.inputs import op_context
from porter.llm.judge import Verdict
from porter.llm.judge import judge
from porter.llm.prompts import language_of
from porter.llm.record import ReplayError
from porter.llm.roles import ClaudeDebugger
from porter.llm.roles import ClaudePlanner
from porter.llm.roles import ClaudeProfiler
from porter.llm.roles import ClaudeSearch
from porter.llm.roles import ClaudeWriter
from porter.llm.roles import Session
from porter.llm.roles import feedback
from porter.llm.tools import ReplyError
from porter.roles import artifacts as art
from porter.roles.base import DebugRequest
from porter.roles.base import PlanRequest
from porter.roles.base import ProfileRequest
from porter.roles.base import SearchRequest
from porter.roles.base import TargetContext
from porter.roles.base import WriteRequest
from porter.roles.base import record_exchange

log = logging.getLogger(__name__)

FIXES = 2  # Debugger rounds per candidate
ORIGIN = "llm"
NUMBER_KEYS = ("time_ms", "p20_ms", "p80_ms", "label", "pct_of_peak", "floor_ms", "bound")


def local_device() -> str | None:
    """The hardware model of this machine's GPU, when torch can use it; else None."""
    import torch

    import hwmodels

    if not torch.cuda.is_available():
        return None
    det = hwmodels.detect()
    return det.model.name if det.model is not None else None


@dataclass
class Attempt:
    """One candidate through write -> judge -> debug: every source judged, in order."""

    cid: str
    sources: list[tuple[str, Verdict, str]] = field(default_factory=list)  # (id, verdict, src)
    diagnoses: list[art.Diagnosis] = field(default_factory=list)
    written: art.KernelSource | None = None
    error: str = ""
    why: str = "written"  # what the candidate is (the Search's change and why, for a variant)


@dataclass
class TargetOutcome:
    target: str
    kept: tuple[str, Verdict, str] | None  # (id, verdict, source) of the kept kernel
    stop_reason: str
    rounds: int
    device_s: float
    candidates: int


class Agent:
    """Runs the loop for one spec over several targets; see the module docstring."""

    def __init__(self, spec: Any, run_dir: Path, client: LLMClient, config: LLMConfig,
                 progress: Callable[[str], None] | None = None) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.client = client
        self.config = config
        self.say = progress or (lambda line: None)
        self.session = Session(client, op_context(spec))
        self.planner = ClaudePlanner(self.session)
        self.writer = ClaudeWriter(self.session)
        self.debugger = ClaudeDebugger(self.session)
        self.search = ClaudeSearch(self.session)
        self.profiler = ClaudeProfiler(self.session)
        self.ledger = Ledger(self.run_dir / "ledger.jsonl")
        self.device_s = 0.0
        self.local = local_device()

    # -- one target -------------------------------------------------------------------------
    def context(self, name: str) -> TargetContext:
        import hwmodels
        from targets import for_device

        hw = hwmodels.get(name)
        target_dir = self.run_dir / hw.name
        target_dir.mkdir(parents=True, exist_ok=True)
        return TargetContext(spec=self.spec, problem=self.spec.problem(interpret=True), hw=hw,
                             backend=for_device(hw), gen_op=None, run_dir=self.run_dir,
                             target_dir=target_dir, measured_here=self.local == hw.name)

    def _exchange(self, ctx: TargetContext, role: Any, request: Any, response: Any,
                  t0: float) -> None:
        record_exchange(ctx.target_dir / "roles.jsonl", role, ctx.target, request, response,
                        time.monotonic() - t0,
                        extra={"model": self.config.model, "exchanges": "llm/exchanges.jsonl"})

    def run_target(self, name: str) -> TargetOutcome:
        ctx = self.context(name)
        hw, lang = ctx.hw, language_of(ctx.hw)
        shape = tuple(self.spec.shapes[0])
        dname = dtype_name(self.spec.dtypes[0])
        from porter.packs.format import shape_bucket

        bucket = shape_bucket(shape)
        t0 = time.monotonic()
        preq = PlanRequest(op=self.spec.name, target=hw.name, family="llm",
                           shapes=tuple(tuple(s) for s in self.spec.shapes),
                           dtypes=tuple(dtype_name(d) for d in self.spec.dtypes))
        try:
            plan = self.planner.plan(ctx, preq)
        except ReplyError as exc:
            plan = art.TuningPlan(target=hw.name, op=self.spec.name, shapes=())
            self.say(f"[{hw.name}] planner: {exc}; writing without a plan")
        self._save(ctx, self.planner, plan.write(ctx.target_dir / art.TUNING_PLAN))
        self._exchange(ctx, self.planner, preq, plan, t0)
        strategy = (self.session.state(hw.name).plan or {}).get("strategy", "-")
        self.say(f"[{hw.name}] plan: {strategy}")

        kept: tuple[str, Verdict, str] | None = None
        units: list[art.ProposedConfig] = []
        diagnoses: list[art.Diagnosis] = []
        stale, rounds, judged = 0, 0, 0
        reason = ""
        while True:
            rounds += 1
            improved = False
            try:
                if kept is None:
                    attempts = self._round_write(ctx, rounds, bucket, dname)
                else:
                    attempts = self._round_search(ctx, bucket, dname, shape)
            except BudgetExhausted as exc:
                reason = str(exc)
                break
            for att in attempts:
                units.append(art.ProposedConfig(config={"origin": ORIGIN, "id": att.cid},
                                                origin="space", why=att.error or att.why))
                for sid, verdict, source in att.sources:
                    judged += 1
                    entry = self._ledger(hw, bucket, dname, shape, sid, verdict, source)
                    if entry.verdict == "kept":
                        kept, improved = (sid, verdict, source), True
                        self._write_kernel(ctx, lang, sid, source, bucket, dname)
                        self.session.state(hw.name).best = {
                            "source": source, "verdict": "kept",
                            "numbers": {k: v for k, v in verdict.numbers.items()
                                        if k in NUMBER_KEYS}}
                    if sid.endswith("-fix") and verdict.passed:
                        self._write_fixed(ctx, lang, sid, source, att)
                diagnoses.extend(att.diagnoses)  # after _write_fixed marked the fixed ones
                if att.error and not att.sources:
                    self.say(f"[{hw.name}] {att.cid}: {att.error}")
            if improved and kept is not None:
                self._profile(ctx, kept, bucket, dname, shape)
            stale = 0 if improved else stale + 1
            reason = self._stop(ctx, kept, stale, rounds)
            if reason:
                break
        self._write_round_artifacts(ctx, units, diagnoses, bucket, dname, shape)
        self.say(f"[{hw.name}] stopped: {reason}")
        return TargetOutcome(hw.name, kept, reason, rounds, self.device_s, judged)

    def _stop(self, ctx: TargetContext, kept: Any, stale: int, rounds: int) -> str:
        if self.client.usage.total_tokens >= self.config.token_budget:
            return (f"token budget spent ({self.client.usage.total_tokens} of "
                    f"{self.config.token_budget})")
        if self.device_s >= self.config.device_budget_s:
            return (f"device-time budget spent ({self.device_s:.0f} of "
                    f"{self.config.device_budget_s:g} s)")
        if kept is not None:
            pct = kept[1].numbers.get("pct_of_peak")
            if pct is not None and pct / 100 >= self.config.stop_at_roofline:
                return (f"reached {pct:.0f}% of the roofline (stop at "
                        f"{self.config.stop_at_roofline:.0%})")
            if not ctx.measured_here:
                return (f"a kernel passed at the {kept[1].tier} tier; variants cannot be told "
                        f"apart without timing on a {ctx.target} (none on this machine)")
        if stale >= self.config.patience:
            return f"{stale} rounds without improvement (patience {self.config.patience})"
        if rounds >= self.config.max_rounds:
            return f"{rounds} rounds (max_rounds)"
        return ""

    # -- rounds -----------------------------------------------------------------------------
    def _round_write(self, ctx: TargetContext, rnd: int, bucket: str, dname: str) -> list[Attempt]:
        n = self.config.parallel
        reqs = [WriteRequest(target=ctx.target, config={"origin": ORIGIN, "id": f"r{rnd}c{k}",
                                                        "candidate": k, "of": n},
                             origin="generated", bucket=bucket, dtype=dname)
                for k in range(1, n + 1)]
        with ThreadPoolExecutor(max_workers=n) as pool:
            return list(pool.map(lambda r: self._attempt(ctx, r), reqs))

    def _attempt(self, ctx: TargetContext, req: WriteRequest) -> Attempt:
        att = Attempt(cid=str(req.config["id"]))
        t0 = time.monotonic()
        try:
            ks = self.writer.write(ctx, req)
        except PorterError as exc:
            if isinstance(exc, (BudgetExhausted, ReplayError)):
                raise
            att.error = f"writer: {exc}"
            return att
        self._exchange(ctx, self.writer, req, ks, t0)
        att.written = ks
        sid, source = att.cid, ks.source
        for fix in range(FIXES + 1):
            verdict = self._judge(ctx, source, sid)
            att.sources.append((sid, verdict, source))
            if not verdict.passed:
                self.session.state(ctx.target).last_failure = feedback(verdict.to_json(), source)
            if verdict.passed or fix == FIXES:
                break
            t0 = time.monotonic()
            row = art.BenchRow(target=ctx.target, bucket=req.bucket, dtype=req.dtype,
                               config=json.dumps({"origin": ORIGIN, "id": sid}),
                               source_hash=source_hash(source)[:16], tier=verdict.tier,
                               verdict="rejected", reason=_why(verdict))
            dreq = DebugRequest(target=ctx.target, shape=tuple(verdict.shape or ()), row=row,
                                kernel=art.KernelSource(target=ctx.target, language=ks.language,
                                                        source=source,
                                                        config={"origin": ORIGIN, "id": sid}),
                                details={"verdict": verdict.to_json()})
            try:
                diag = self.debugger.diagnose(ctx, dreq)
            except PorterError as exc:
                if isinstance(exc, (BudgetExhausted, ReplayError)):
                    raise
                att.error = f"debugger: {exc}"
                break
            self._exchange(ctx, self.debugger, dreq, diag, t0)
            att.diagnoses.append(diag)
            sid = str(diag.fix_config["id"]) if diag.fix_config else f"{sid}-fix"
            source = self.session.state(ctx.target).sources[sid]
        return att

    def _round_search(self, ctx: TargetContext, bucket: str, dname: str,
                      shape: tuple[int, ...]) -> list[Attempt]:
        req = SearchRequest(target=ctx.target, shape=shape, dtype=dname, bucket=bucket)
        t0 = time.monotonic()
        cands = self.search.candidates(ctx, req)
        self._exchange(ctx, self.search, req, cands, t0)
        st = self.session.state(ctx.target)
        ids = [str(c.config["id"]) for c in cands.candidates]
        with ThreadPoolExecutor(max_workers=self.config.parallel) as pool:
            verdicts = list(pool.map(lambda i: self._judge(ctx, st.sources[i], i), ids))
        return [Attempt(cid=i, sources=[(i, v, st.sources[i])], why=c.why)
                for i, v, c in zip(ids, verdicts, cands.candidates, strict=True)]

    def _judge(self, ctx: TargetContext, source: str, sid: str) -> Verdict:
        verdict = judge(self.spec.path, source, ctx.hw, self.run_dir / "llm" / "candidates",
                        language=language_of(ctx.hw), on_device=ctx.measured_here)
        self.device_s += verdict.seconds
        word = "passed" if verdict.passed else f"failed {verdict.stage} ({verdict.reason})"
        if verdict.numbers.get("time_ms"):
            word += (f", {verdict.numbers['time_ms'] * 1e3:.1f} us "
                     f"({verdict.numbers['pct_of_peak']:.0f}% of the speed of light)")
        self.say(f"[{ctx.target}] {sid}: {word} in {verdict.seconds:.1f} s")
        return verdict

    # -- bookkeeping ------------------------------------------------------------------------
    def _ledger(self, hw: Any, bucket: str, dname: str, shape: tuple[int, ...], sid: str,
                verdict: Verdict, source: str) -> Any:
        details = {"judge": {k: v for k, v in verdict.to_json().items() if k != "launches"},
                   "origin": ORIGIN, "candidate": sid}
        return self.ledger.judge(target=hw.name, bucket=bucket, dtype=dname,
                                 config={"origin": ORIGIN, "id": sid},
                                 src_hash=source_hash(source), tier=verdict.tier,
                                 passed=verdict.passed, reason_failed=_why(verdict),
                                 numbers={k: v for k, v in verdict.numbers.items()
                                          if k in NUMBER_KEYS},
                                 shape=shape, details=details)

    def _write_kernel(self, ctx: TargetContext, lang: str, sid: str, source: str, bucket: str,
                      dname: str) -> None:
        ks = art.KernelSource(target=ctx.target, language=lang, source=source,
                              config={"origin": ORIGIN, "id": sid}, origin="generated",
                              bucket=bucket, dtype=dname, note=f"written by {self.config.model}")
        path = ks.write_file(ctx.target_dir / ks.filename)
        self._save(ctx, self.writer, path)

    def _write_fixed(self, ctx: TargetContext, lang: str, sid: str, source: str,
                     att: Attempt) -> None:
        failed = next((v for i, v, _ in att.sources if f"{i}-fix" == sid), None)
        note = (f"fixes {failed.stage} ({failed.reason}): {failed.message.splitlines()[0][:200]}"
                if failed else "a Debugger fix")
        art.KernelSource(target=ctx.target, language=lang, source=source,
                         config={"origin": ORIGIN, "id": sid}, origin="fixed",
                         note=note).write_file(ctx.target_dir / art.KERNEL_FIXED)
        self._save(ctx, self.debugger, ctx.target_dir / art.KERNEL_FIXED)
        for i, d in enumerate(att.diagnoses):
            if d.fix_config and d.fix_config.get("id") == sid:
                att.diagnoses[i] = replace(d, fixed=True, fix_verdict="passed the judge")

    def _profile(self, ctx: TargetContext, kept: tuple[str, Verdict, str], bucket: str,
                 dname: str, shape: tuple[int, ...]) -> None:
        sid, verdict, _ = kept
        plan = art.TuningPlan.from_json((ctx.target_dir / art.TUNING_PLAN).read_text())
        sp = plan.for_shape(shape, dname)
        numbers = {"label": "not timed", "floor_ms": sp.floor_ms if sp else 0.0,
                   "bytes_moved": sp.bytes_moved if sp else 0, "bound": sp.bound if sp else "",
                   **{k: v for k, v in verdict.numbers.items() if k in NUMBER_KEYS}}
        req = ProfileRequest(target=ctx.target, bucket=bucket, dtype=dname, shape=shape,
                             config={"origin": ORIGIN, "id": sid}, tier=verdict.tier,
                             numbers=numbers, details={"kernels": verdict.resources})
        t0 = time.monotonic()
        unit = self.profiler.profile(ctx, req)
        self._exchange(ctx, self.profiler, req, unit, t0)
        self._save(ctx, self.profiler, art.ProfileReport(target=ctx.target, units=(unit,)).write(
            ctx.target_dir / art.PROFILE_REPORT))

    def _write_round_artifacts(self, ctx: TargetContext, units: list[art.ProposedConfig],
                               diagnoses: list[art.Diagnosis], bucket: str, dname: str,
                               shape: tuple[int, ...]) -> None:
        self._save(ctx, self.search, art.Candidates(target=ctx.target, units=(art.UnitCandidates(
            shape=shape, dtype=dname, bucket=bucket, candidates=tuple(units),
            space_size=len(units)),)).write(ctx.target_dir / art.CANDIDATES))
        self._save(ctx, self.debugger, art.DebugReport(
            target=ctx.target, diagnoses=tuple(diagnoses)).write(ctx.target_dir / art.DEBUG_REPORT))
        rows = [art.BenchRow(target=e.target, bucket=e.bucket, dtype=e.dtype,
                             config=json.dumps(e.config, sort_keys=True),
                             source_hash=e.source_hash[:16],
                             tier=e.tier, verdict=e.verdict, reason=e.reason)
                for e in self.ledger if e.target == ctx.target]
        self._save(ctx, _HARNESS, art.write_bench_csv(rows, ctx.target_dir / art.BENCH_RESULTS))
        if not (ctx.target_dir / art.PROFILE_REPORT).exists():
            self._save(ctx, self.profiler, art.ProfileReport(target=ctx.target).write(
                ctx.target_dir / art.PROFILE_REPORT))

    def _save(self, ctx: TargetContext, role: Any, path: Path) -> None:
        """Record in the ledger that `role` wrote `path` (its sha256)."""
        self.ledger.artifact(target=ctx.target, role=role.name,
                             implementation=role.implementation, path=path)


class _Harness:
    """The Benchmark role here: the harness in isolated children (porter.llm.judge)."""

    name = "benchmark"
    implementation = "harness"


_HARNESS = _Harness()


def _why(verdict: Verdict) -> str:
    """The ledger's reason for a rejection; a guard's catch says it was a cheat."""
    if verdict.passed:
        return ""
    text = f"{verdict.stage} ({verdict.reason}): {verdict.message}"
    if verdict.cheat:
        return (f"rejected as a cheat by the judge's {verdict.caught_by or 'guard'} guard: "
                f"{text}")
    return text
