"""How much a port searches: candidates per unit, interpreted checks per run, the time budget per
target on the device, and the deadline of one candidate's device runs.

The Search role orders candidates; this module decides how many of them the loop judges.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any

from porter.errors import PortError

if TYPE_CHECKING:
    from porter.search import Candidate

log = logging.getLogger(__name__)

# On a machine without the target GPU every check runs in the Triton interpreter (seconds to
# tens of seconds each); these caps keep `porter port` on a CPU within a few minutes. The full
# search runs on the device, where checks take milliseconds.
CPU_MAX_VARIANTS = 3
CPU_MAX_CHECKS = 6
# On the device a candidate costs about a second (cross-compile, first launch compiles it again,
# the smoke check, timing); the full space is ~130 variants per shape and dtype for a row-wise op
# (about 25 minutes for rmsnorm on an H100). The default keeps the search's first 8 per (bucket,
# dtype), which is the cap bench/suite.py has ported every example op with (matmul at 12), and a
# time budget per target that trims the later units' caps when the port runs behind (never
# below DEVICE_MIN_VARIANTS), so one op reaches one GPU in about two minutes. `exhaustive=True`
# (`--exhaustive`) searches everything; an explicit max_variants is used as given.
# Measured on an H100 (torch 2.11, triton 3.6, 2026-11-26, bench/port_budget.py): rmsnorm's 27
# shape x dtype units in 90 s (81 s of search); at bf16, softmax (3 shapes) kept the same
# kernels as the exhaustive search (15 s vs 92 s) and rmsnorm (4 shapes) kernels within 0.5% of
# it (9 s vs 138 s); matmul_bias_gelu's 12 units took 195 s (its first unit alone 70 s).
DEVICE_MAX_VARIANTS = 8
DEVICE_MIN_VARIANTS = 2
DEVICE_TIME_BUDGET_S = 120.0
# A candidate's runs on the device (its first launch compiles it) must finish within this;
# one that does not is taken to be hung: a CUDA kernel cannot be stopped from the host, so the
# run records it rejected and exits with DEVICE_HUNG_EXIT, and the same command resumes
# without it. Seen with the warp-specialized matmul on host TMA descriptors (bench/NOTES.md
# item 26), which hung `porter port` with it.
# The default scales with the work: DEADLINE_BASE_S (set-up and the first compile), plus
# DEADLINE_PER_SHAPE_S per shape the judge launches at (each can be a new specialization to
# compile), plus DEADLINE_PER_FLOOR times the largest shape's roofline floor (the judge runs the
# kernel and its reference tens of times per stage), at most DEADLINE_MAX_S. `--deadline`
# (port(deadline_s=...)) and then PORTER_DEVICE_DEADLINE_S override it (kernels that truly run
# longer; the GPU test of the watchdog, which should not wait minutes).
DEVICE_DEADLINE_S = 300.0  # what device_deadline_s() returns when nothing scales it
DEADLINE_BASE_S = 120.0
DEADLINE_PER_SHAPE_S = 10.0
DEADLINE_PER_FLOOR = 20_000
DEADLINE_MAX_S = 1800.0


def scaled_deadline_s(max_floor_ms: float, judge_shapes: int) -> float:
    """The default deadline of a candidate's device runs for this much work.

    Args:
        max_floor_ms: the roofline floor of the largest shape the judge runs, in ms.
        judge_shapes: how many distinct shapes the judge launches the kernel at.

    Returns:
        Seconds: DEADLINE_BASE_S + DEADLINE_PER_SHAPE_S per shape + DEADLINE_PER_FLOOR x the
        floor, at most DEADLINE_MAX_S.
    """
    seconds = (DEADLINE_BASE_S + DEADLINE_PER_SHAPE_S * max(0, judge_shapes)
               + DEADLINE_PER_FLOOR * max(0.0, max_floor_ms) / 1e3)
    return min(DEADLINE_MAX_S, seconds)


def device_deadline_s(explicit: float | None = None, default: float = DEVICE_DEADLINE_S) -> float:
    """The deadline of a candidate's device runs: `explicit` (`--deadline`), else
    PORTER_DEVICE_DEADLINE_S, else `default` (the port passes `scaled_deadline_s`).

    Raises:
        PortError: `explicit` or the variable is not a positive, finite number of seconds.
    """
    if explicit is not None:
        if not 0 < explicit < float("inf"):
            raise PortError(f"--deadline {explicit!r}: expected a positive, finite number of "
                            "seconds")
        return float(explicit)
    text = os.environ.get("PORTER_DEVICE_DEADLINE_S")
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise PortError(f"PORTER_DEVICE_DEADLINE_S={text!r}: expected a positive, finite "
                        "number of seconds")
    return value


def resolve_budget(*, on_gpu: bool, max_variants: int | None, max_checks: int | None,
                   exhaustive: bool, time_budget_s: float | None,
                   ) -> tuple[int | None, int | None, float | None]:
    """The search budget a port runs with: (max_variants, max_checks, time_budget_s).

    On a CPU: CPU_MAX_VARIANTS and CPU_MAX_CHECKS, no time budget (a CPU port's picks must not
    depend on how fast the machine is). On the GPU: DEVICE_MAX_VARIANTS and
    DEVICE_TIME_BUDGET_S per target. Given values win; an explicit max_variants gets no time
    budget unless one is given too (a stated cap is never cut silently); exhaustive means no
    cap and no time budget.
    """
    if exhaustive:
        return None, max_checks if max_checks is not None else (
            None if on_gpu else CPU_MAX_CHECKS), None
    variants = max_variants if max_variants is not None else (
        DEVICE_MAX_VARIANTS if on_gpu else CPU_MAX_VARIANTS)
    checks = max_checks if max_checks is not None else (None if on_gpu else CPU_MAX_CHECKS)
    budget = time_budget_s if time_budget_s is not None else (
        DEVICE_TIME_BUDGET_S if on_gpu and max_variants is None else None)
    return variants, checks, budget


def budget_text(max_variants: int | None, max_checks: int | None,
                time_budget_s: float | None) -> str:
    """The search budget in words, as the port states it before it starts."""
    if max_variants is None:
        text = "budget: every candidate (exhaustive)"
    else:
        text = (f"budget: {max_variants} candidate{'s' if max_variants != 1 else ''}"
                " per shape and dtype")
        if time_budget_s is not None:
            text += (f", ~{time_budget_s:.0f} s per target (later shapes get fewer, at "
                     f"least {DEVICE_MIN_VARIANTS}, when behind)")
        text += "; --exhaustive for all"
    if max_checks is not None:
        text += f"; {max_checks} interpreted checks per run (--max-checks)"
    return text


def within_time_budget(cands: tuple[Any, ...], index: int, total: int, started: float,
                       judged: int, time_budget_s: float | None) -> tuple[Any, ...]:
    """`cands` cut so the target's remaining units fit its time budget (device only): at the
    cost per candidate so far (`judged` candidates since `started`), the time left shared
    evenly by the units left, never below DEVICE_MIN_VARIANTS. The search ordered them, so
    the cut drops the least promising. Unit `index` of `total`, counted from 1."""
    if time_budget_s is None or index == 1 or judged == 0:
        return cands
    elapsed = time.perf_counter() - started
    per_candidate = elapsed / judged
    per_unit = max(0.0, time_budget_s - elapsed) / (total - index + 1)
    cap = max(DEVICE_MIN_VARIANTS, int(per_unit / per_candidate))
    if cap < len(cands):
        log.info("time budget: %d of %d candidates for unit %d/%d", cap, len(cands), index,
                 total)
    return cands[:cap]


def capped_list(cands: tuple[Candidate, ...], cap: int | None) -> tuple[Candidate, ...]:
    return cands if cap is None else cands[:cap]


def capped(sr: Any, cap: int | None) -> Any:
    """A `SearchResult` cut to `cap` candidates (the rest counted as capped)."""
    if cap is None or len(sr.candidates) <= cap:
        return sr
    return replace(sr, candidates=sr.candidates[:cap],
                   capped=sr.capped + len(sr.candidates) - cap)
