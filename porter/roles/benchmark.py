"""The offline Benchmark role: is each kernel of one (bucket, dtype) correct, and how fast? The
harness is its judge; the ledger keeps the fastest that passed, reverts the rest and rejects
what failed, each with why.

Per kernel: the compile tier (`porter.judge.compile_tier`: rejected when it does not fit), the
projected time; then, by what the backend can do here:
- the target is the local GPU: the measured tier (`porter.judge.device`);
- the backend's candidates are checked on a CPU (`Capabilities.cpu_check`): fastest-projected
  first, and a candidate whose projection cannot beat the kept one is not checked at all
  (reverted, saying so); "interpreter" runs `porter.judge.interpreted`; another check (an MSL
  executor's "emulator") registers itself in CPU_CHECKS;
- neither: the emitted (or compiled) tier is all there is; every kernel that fits is recorded
  as passing that tier, the fastest projected kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

from porter.judge import compile_tier
from porter.judge.common import Existing
from porter.judge.common import Pending
from porter.judge.common import record_verdict
from porter.ledger import candidate_key
from porter.ledger import config_key
from porter.ledger import source_hash
from porter.roles.artifacts import BenchRow
from porter.roles.base import RULES
from porter.user_kernel import must_check
from porter.verdicts import brief_reason
from porter.verdicts import cfg_text
from targets.tiers import Tier
from targets.tiers import tier_rank

if TYPE_CHECKING:
    from porter.ledger import LedgerEntry
    from porter.roles.base import JudgeRequest
    from porter.roles.base import TargetContext

# Capabilities.cpu_check -> the check that takes a candidate to its tier on a CPU:
# (session, hw, backend, shape, dtype, bucket, pending) -> tolerance text ("" when none ran)
CPU_CHECKS: dict[str, Callable[..., str]] = {}


def _interpreter(*args: Any) -> str:
    from porter.judge.interpreted import interpreted_eval

    return interpreted_eval(*args)


def _emulator(*args: Any) -> str:
    from porter.emulated import emulated_eval

    return emulated_eval(*args)


CPU_CHECKS["interpreter"] = _interpreter
CPU_CHECKS["emulator"] = _emulator  # the Metal backend's, where a C++ compiler is present


def bench_row(e: LedgerEntry) -> BenchRow:
    """A ledger entry as a row of bench_results.csv."""
    n = e.numbers
    return BenchRow(target=e.target, bucket=e.bucket, dtype=e.dtype, config=config_key(e.config),
                    source_hash=e.source_hash[:16], tier=e.tier, verdict=e.verdict,
                    time_ms=n.get("time_ms"), p20_ms=n.get("p20_ms"), p80_ms=n.get("p80_ms"),
                    label=n.get("label", ""), pct_of_peak=n.get("pct_of_peak"), reason=e.reason)


def candidate_of(config: dict[str, Any], origin: str) -> Any:
    """The search's `Candidate` for a config: its variant is the config itself, or the marker
    of the spec's existing kernel with the launcher knobs the config sets."""
    from porter.roles.writer import existing_knobs
    from porter.search import Candidate

    if origin == "existing":
        return Candidate(config=dict(config), variant=Existing(existing_knobs(config)),
                         origin="existing")
    return Candidate(config=dict(config), variant=dict(config), origin=origin)


class HarnessBenchmark:
    name = "benchmark"
    implementation = RULES

    def judge(self, ctx: TargetContext, request: JudgeRequest) -> tuple[BenchRow, ...]:
        from targets.dtypes import torch_dtype

        session, hw, backend = ctx.session, ctx.hw, ctx.backend
        caps = ctx.capabilities()
        shape, bucket, dname = tuple(request.shape), request.bucket, request.dtype
        dtype = torch_dtype(dname)
        keys: list[str] = []
        pending: list[Pending] = []
        for kernel in request.kernels:
            cand = candidate_of(kernel.config, kernel.origin)
            src_hash = source_hash(kernel.source)
            key = candidate_key(hw.name, src_hash, cand.config, bucket, dname)
            keys.append(key)
            if session.ledger.done(key):
                e = session.ledger.get(key)
                assert e is not None
                session.already_judged += 1
                session.detail(f"  [{hw.name}] {bucket}/{dname} {cfg_text(cand.config)}: "
                               f"already judged ({e.verdict}), skipped")
                continue
            ok, details, reason = compile_tier.compile_candidate(
                session, hw, backend, cand, kernel.source, shape, dtype)
            tier = Tier.COMPILED if caps.compiles_here else Tier.EMITTED
            if not ok:
                session.ledger.judge(target=hw.name, bucket=bucket, dtype=dname,
                                     config=cand.config, src_hash=src_hash, tier=Tier.EMITTED,
                                     passed=False, reason_failed=reason, shape=shape,
                                     details=details)
                session.judged_in_target += 1
                session.detail(f"  [{hw.name}] {bucket}/{dname} {cfg_text(cand.config)}: "
                               f"rejected: {brief_reason(reason)}")
                continue
            numbers = compile_tier.project_numbers(session, hw, shape, dtype, cand, details)
            pending.append(Pending(cand, kernel.source, src_hash, key, numbers, details, tier))
        tol = self._judge_pending(ctx, shape, dtype, bucket, pending)
        ctx.tolerance = ctx.tolerance or tol  # the first check's policy names the target's
        return tuple(bench_row(e) for e in (session.ledger.get(k) for k in keys)
                     if e is not None)

    def _judge_pending(self, ctx: TargetContext, shape: tuple[int, ...], dtype: Any,
                       bucket: str, pending: list[Pending]) -> str:
        """The tiers past compile, by what the target can do here; the tolerance text."""
        session, hw, backend = ctx.session, ctx.hw, ctx.backend
        dname = _name(dtype)
        check = CPU_CHECKS.get(ctx.capabilities().cpu_check or "")
        if ctx.measured_here:
            from porter.judge.device import device_bucket

            return device_bucket(session, hw, backend, shape, dtype, bucket, pending)
        if session.own_shape is not None:
            # this bucket's op was traced at its own (GPU-sized) shape and serves only that; a
            # CPU check runs at the spec's reduced sizes, so its tier here is the compile tier
            for p in pending:
                record_verdict(session, hw, bucket, dname, shape, p, passed=True,
                               why=f"{p.tier}; correctness not checked here: its op was traced "
                                   f"at this bucket's own shape {session.own_shape} and serves "
                                   "only that, which the CPU check does not run; the device "
                                   "checks and times it")
            return ""
        if check is None:
            for p in pending:
                why = (f"{p.tier} ({ctx.capabilities().language} source; no compiler ran)"
                       if p.tier == Tier.EMITTED else f"{p.tier}; no check runs here")
                record_verdict(session, hw, bucket, dname, shape, p, passed=True, why=why)
            return ""
        # fastest-projected first; one that cannot beat the kept is not checked
        tol = ""
        # on a tie the user's kernel (the port's subject) goes first and is kept
        pending.sort(key=lambda p: (p.numbers.get("time_ms", float("inf")),
                                    p.cand.config.get("origin") != "existing"))
        for p in pending:
            kept = session.ledger.kept(hw.name, bucket, dname)
            if (kept is not None and tier_rank(kept.tier) >= tier_rank(Tier.INTERPRETED)
                    and kept.time_ms is not None
                    and p.numbers.get("time_ms", float("inf")) >= kept.time_ms
                    and not must_check(session, hw.name, bucket, dname, p.cand.config)):
                record_verdict(session, hw, bucket, dname, shape, p, passed=True,
                               why=f"projected {p.numbers['time_ms']:.4g} ms cannot beat the "
                                   f"kept {kept.time_ms:.4g} ms; correctness not run")
                continue
            tol = check(session, hw, backend, shape, dtype, bucket, p) or tol
        return tol


def _name(dtype: Any) -> str:
    from porter.planner import dtype_name

    return dtype_name(dtype)
