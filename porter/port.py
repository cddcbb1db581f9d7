"""`porter port`: from an op spec to a verified, per-target specialized kernel pack.

Data flow (DESIGN.md, "Data flow of porter port"), per target device:

    hw       = hwmodels.get(name);  backend = targets.for_device(hw)
    plan     = planner.plan(...)                        -> runs/<id>/<target>/tuning_plan.json
    variants = search.search(...) per shape x dtype     -> runs/<id>/<target>/candidates.json
    for each variant:
        compile tier     backend.compile of every kernel; what does not fit is rejected, with why
        correctness      on the device when it is the local GPU; else the Triton interpreter on
                         CPU at the spec's interpreter shapes. The kernel BODY is the same on every
                         Triton target, so one interpreted check per distinct source+config is
                         shared across targets (the ledger says "shared").
        speed            measured (harness.timing) on the local GPU, else projected
                         (harness.projection with the compiled kernel's occupancy), labelled so
        ledger           keep/revert                    -> ledger.jsonl, bench_results.csv
    best per shape bucket -> pack entry;  Metal targets: emitted tier (no compiler runs here)

On a CPU the projection is cheap and the interpreter is not, so candidates are checked in
projected order and a candidate that cannot beat the one already kept is not interpreted at all
(recorded as reverted with that reason). Every check and number also goes to the results store.

On the device the search is budgeted (`resolve_budget`): the first DEVICE_MAX_VARIANTS candidates
per (bucket, dtype), configs kept at earlier units first, fewer when the target runs past its
time budget; every candidate is screened at SCREEN_REPS and the FINALISTS fastest timed again at
DEVICE_REPS. `exhaustive=True` judges the whole space. A resumed run (same run dir) continues the
ledger: judged candidates are not redone, budget-skipped ones are, and the interpreted checks
already spent count against max_checks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from porter.errors import PorterError
from porter.ledger import Ledger
from porter.ledger import LedgerEntry
from porter.ledger import candidate_key
from porter.ledger import config_key
from porter.ledger import source_hash
from porter.pack import shape_bucket
from porter.pack import tier_rank

if TYPE_CHECKING:
    import torch

    from hwmodels.model import HardwareModel
    from porter.planner import ShapePlan
    from porter.search import Candidate
    from targets.base import TargetBackend

log = logging.getLogger(__name__)

Progress = Callable[[str], None]
DEFAULT_RUNS_DIR = Path("runs")
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
DEVICE_HUNG_EXIT = 3
_exit = os._exit  # no cleanup: the main thread is stuck in CUDA; tests replace it

# A generated config that needs more than this fraction of the device's shared memory per block
# at its bucket's shape is also compiled at the shapes the judge launches it at: Triton
# specializes a kernel per launch (a row stride that is not a multiple of 16, a one-tile grid),
# and a specialization can need more. A flattened 4-stage TMA matmul needed 181 KB at 8192^3
# and 262 KB at (7, 33, 64), over the H100's 227 KB (bench/NOTES.md item 31).
NEAR_SMEM_LIMIT = 0.75


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


class PortError(PorterError):
    """The port cannot start: unknown target, or a spec/op the porter cannot handle."""


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


@dataclass(frozen=True)
class BucketChoice:
    """The kept kernel of one target for one shape bucket and dtype."""

    bucket: str
    dtype: str
    shape: tuple[int, ...]
    config: dict[str, Any]
    source: str  # the module (Triton) or Metal source with the config baked in
    tier: str
    numbers: dict[str, Any] = field(default_factory=dict)
    origin: str = "generated"  # "generated" (porter.codegen) | "existing" (the spec's kernel)


@dataclass(frozen=True)
class _Existing:
    """Variant marker: the spec's own TRITON_KERNEL run through its TRITON_LAUNCHER."""

    knobs: tuple[str, ...]  # launcher parameters that take this candidate's config values


# Launch knobs a launcher may take; anything else in TUNABLES that it does not accept as a
# parameter cannot be varied from outside, so it does not multiply the candidates.
EXISTING_LAUNCH_KNOBS = ("num_warps", "num_stages")
_EXISTING_WRAPPER = '''

# --- porter: pack entry point for the existing kernel above (generated by `porter port`) ---
_PORTER_KNOBS = {knobs!r}


def launch(*inputs, out=None, config=None):
    """Run this file's own launcher, passing the pack entry's launch knobs it accepts."""
    knobs = {{k: (config or {{}})[k] for k in _PORTER_KNOBS if k in (config or {{}})}}
    return {launcher}(*inputs, out=out, **knobs)
'''


def _existing_candidates(spec: Any) -> list[Candidate]:
    """The spec's existing kernel as candidates: one per combination of the TUNABLES its
    launcher accepts as parameters (one candidate when it accepts none)."""
    import inspect
    import itertools

    from porter.search import Candidate

    if getattr(spec, "triton_kernel", None) is None or getattr(spec, "triton_launcher", None) is None:
        return []
    try:
        params = inspect.signature(spec.triton_launcher).parameters
    except (TypeError, ValueError):
        params = {}
    knobs = [k for k, v in (spec.tunables or {}).items()
             if k in params and isinstance(v, (list, tuple)) and v]
    combos = itertools.product(*(spec.tunables[k] for k in knobs)) if knobs else [()]
    return [Candidate(config={"origin": "existing", **dict(zip(knobs, combo))},
                      variant=_Existing(tuple(knobs)), origin="existing") for combo in combos]


@dataclass(frozen=True)
class TargetResult:
    target: str
    vendor: str
    backend: str
    arch: str
    hw_model_hash: str
    tolerance: str
    choices: tuple[BucketChoice, ...]
    notes: tuple[str, ...] = ()
    # one line per (bucket, dtype) that got no kernel: what its candidates did, by kind
    failures: tuple[str, ...] = ()

    @property
    def tier(self) -> str:
        """Lowest tier over the buckets (what every kept config reached); "none" when empty."""
        return min((c.tier for c in self.choices), key=tier_rank) if self.choices else "none"


@dataclass(frozen=True)
class PortResult:
    op: str
    spec_path: Path
    run_dir: Path
    targets: tuple[TargetResult, ...]
    versions: dict[str, Any]
    fusion: dict[str, Any]
    signature: tuple[str, ...]  # "tensor" | "float" | "int" | "bool" per input
    reference_function: str | None = None  # attribute of reference.py, or None: load_spec
    pack_path: Path | None = None
    checks_run: int = 0
    checks_shared: int = 0
    budget: str = ""  # the search budget, as the output states it
    warnings_file: Path | None = None  # library warnings captured during the port, if any

    @property
    def missing(self) -> tuple[TargetResult, ...]:
        """The targets that got no kernel at all (the CLI exits 1 naming them)."""
        return tuple(t for t in self.targets if not t.choices)


@dataclass
class _Pending:
    cand: Candidate
    source: str
    src_hash: str
    key: str
    numbers: dict[str, Any]
    details: dict[str, Any]
    tier: str


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


def _dtype_name(dtype: torch.dtype) -> str:
    from porter.planner import dtype_name

    return dtype_name(dtype)


def _kinds(inputs: tuple[Any, ...]) -> tuple[str, ...]:
    import torch

    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            out.append("tensor")
        elif isinstance(x, bool):
            out.append("bool")
        elif isinstance(x, int):
            out.append("int")
        elif isinstance(x, float):
            out.append("float")
        else:
            out.append(type(x).__name__)
    return tuple(out)


class _Porter:
    # per-target state, reset by run_target (defaults here for pieces used on their own)
    target_deadline_s: float = DEVICE_DEADLINE_S
    judged_in_target = 0
    already_judged = 0
    verbose = False

    def __init__(self, spec: Any, run_dir: Path, *, store_path: Path, resume: bool,
                 max_variants: int | None, max_checks: int | None, progress: Progress,
                 units: list[tuple[tuple[int, ...], Any]] | None = None,
                 exhaustive: bool = False, time_budget_s: float | None = None,
                 deadline_s: float | None = None, verbose: bool = False) -> None:
        import torch

        import hwmodels
        from harness.store import ResultsStore

        self.spec = spec
        self.problem = spec.problem()
        # (shape, dtype) pairs to tune; default: every spec shape x every spec dtype
        self.units = units
        self.run_dir = run_dir
        self.progress = progress
        self.verbose = verbose
        self.deadline_s = deadline_s
        ledger_path = run_dir / "ledger.jsonl"
        if not resume and ledger_path.exists():
            ledger_path.rename(run_dir / f"ledger.{int(time.time())}.jsonl")
        self.ledger = Ledger(ledger_path)
        self.store = ResultsStore(store_path, run_id=run_dir.name)
        gen = torch.Generator().manual_seed(0)
        example = spec.make_inputs(tuple(spec.smoke_shape), spec.dtypes[0],
                                   torch.device("cpu"), gen)
        self.signature = _kinds(tuple(example))
        self.gen_op = _generate(spec.reference, tuple(example), spec.name)
        det = hwmodels.detect()

        self.local = det.model.name if det.model is not None and torch.cuda.is_available() else None
        self.detect_reason = det.reason
        self.max_variants, self.max_checks, self.time_budget_s = resolve_budget(
            on_gpu=self.local is not None, max_variants=max_variants, max_checks=max_checks,
            exhaustive=exhaustive, time_budget_s=time_budget_s)
        self.checks_run = 0
        self.checks_shared = 0
        # semantic check key -> (passed, message, tolerances)
        self._checks: dict[str, tuple[bool, str, str]] = self._checks_from_ledger()
        # Interpreted checks this run has already spent (in earlier, interrupted invocations):
        # the budget continues from there, so a resumed run ends where an uninterrupted one does.
        self.checks_spent = len({e.details["check"]["key"] for e in self.ledger
                                 if _spent_check(e.details.get("check"))})
        self._modules: dict[tuple[str, bool], Any] = {}
        self.existing = _existing_candidates(spec)

    # -- bookkeeping ----------------------------------------------------------------------
    def _detail(self, line: str) -> None:
        """A per-candidate line: printed under `verbose` (`-v`), else only logged."""
        if self.verbose:
            self.progress(line)
        else:
            log.debug("%s", line)

    def budget_text(self) -> str:
        """The search budget in words, as the port states it before it starts."""
        if self.max_variants is None:
            text = "budget: every candidate (exhaustive)"
        else:
            text = (f"budget: {self.max_variants} candidate{'s' if self.max_variants != 1 else ''}"
                    " per shape and dtype")
            if self.time_budget_s is not None:
                text += (f", ~{self.time_budget_s:.0f} s per target (later shapes get fewer, at "
                         f"least {DEVICE_MIN_VARIANTS}, when behind)")
            text += "; --exhaustive for all"
        if self.max_checks is not None:
            text += f"; {self.max_checks} interpreted checks per run (--max-checks)"
        return text

    def _checks_from_ledger(self) -> dict[str, tuple[bool, str, str]]:
        out: dict[str, tuple[bool, str, str]] = {}
        for e in self.ledger:
            chk = e.details.get("check")
            if chk and chk.get("key") and chk.get("interpreted"):
                out[chk["key"]] = (bool(chk["passed"]), chk.get("message", ""),
                                   chk.get("tolerances", ""))
        return out

    def _record(self, hw: HardwareModel, backend: str, tier: str, passed: bool,
                config: dict[str, Any], shape: tuple[int, ...], dtype: str, *,
                metrics: dict[str, Any] | None = None, spread: dict[str, Any] | None = None,
                message: str = "") -> None:
        from harness.store import Record

        self.store.record(Record(op=self.spec.name, variant=config_key(config), device=hw.name,
                                 tier=tier, passed=passed, shape=tuple(shape), dtype=dtype,
                                 target=backend, config=dict(config), metrics=metrics or {},
                                 spread=spread or {}, message=message))

    def _module(self, source: str, interpret: bool) -> Any:
        from porter.codegen.loading import load_generated_module

        key = (source_hash(source), interpret)
        if key not in self._modules:
            name = f"_porter_gen_{self.spec.name}_{key[0][:12]}_{'i' if interpret else 'n'}"
            self._modules[key] = load_generated_module(source, name, interpret)
        return self._modules[key]

    # -- one target -----------------------------------------------------------------------
    def run_target(self, name: str) -> TargetResult:
        import torch

        import hwmodels
        import targets
        from porter import planner
        from porter.search import search
        from porter.search import write_candidates

        hw = hwmodels.get(name)
        backend = targets.for_device(hw)
        tdir = self.run_dir / hw.name
        family = str(getattr(self.gen_op, "family", ""))
        if self.units is not None:
            pairs = [(tuple(s), d) for s, d in self.units]
        else:
            pairs = [(tuple(s), d) for s in self.spec.shapes for d in self.spec.dtypes]
        shapes = list(dict.fromkeys(s for s, _ in pairs))
        dtypes = list(dict.fromkeys(d for _, d in pairs))
        plan = planner.plan(self.problem, hw, shapes, dtypes, family=family)
        plan.write(tdir / "tuning_plan.json")
        self.progress(f"[{hw.name}] {backend.name} {hw.build.arch}: plan -> "
                      f"{tdir / 'tuning_plan.json'}")
        notes: list[str] = []
        if backend.name == "metal":
            notes.append("Metal: source emitted only; no Metal compiler runs on this machine")
        measured_here = self.local == hw.name
        if not measured_here:
            notes.append("times projected (not measured): the target GPU is not on this machine")

        units: list[tuple[tuple[int, ...], torch.dtype, str, Any, ShapePlan | None]] = []
        searches = {}
        seen_buckets: dict[tuple[str, str], tuple[int, ...]] = {}
        for shape in shapes:
            meta_inputs = self.problem.make_inputs(shape, dtypes[0], torch.device("meta"),
                                                   torch.Generator().manual_seed(0))
            first = next((t for t in meta_inputs if isinstance(t, torch.Tensor)), None)
            bucket = shape_bucket(first.shape if first is not None else shape)
            for dtype in [d for s, d in pairs if s == shape]:
                dname = _dtype_name(dtype)
                if (bucket, dname) in seen_buckets:
                    notes.append(f"shape {shape} shares bucket {bucket} with "
                                 f"{seen_buckets[(bucket, dname)]}; tuned once")
                    continue
                seen_buckets[(bucket, dname)] = shape
                sp = plan.for_shape(shape, dname)
                inputs = self.problem.make_inputs(shape, dtype, torch.device("meta"),
                                                  torch.Generator().manual_seed(0))
                # On the device the cap is applied per unit, after earlier units' winners are
                # moved to the front (`_winners_first`); candidates.json shows the capped list.
                sr = search(self.gen_op, backend, hw, tuple(inputs), dtype, plan=sp,
                            max_variants=None if measured_here else self.max_variants)
                searches[f"{'x'.join(map(str, shape))}/{dname}"] = _capped(sr, self.max_variants)
                units.append((shape, dtype, bucket, sr, sp))
        write_candidates(searches, tdir / "candidates.json")
        if measured_here:
            floor = max((x.floor_ms for x in plan.shapes), default=0.0)
            self.target_deadline_s = device_deadline_s(
                self.deadline_s, scaled_deadline_s(floor, len(self._judge_shapes())))
        n_cands = sum(len(_capped(sr, self.max_variants).candidates) for *_, sr, _sp in units)
        n_valid = sum(len(sr.candidates) + sr.capped for *_, sr, _sp in units)
        more = f"; --exhaustive for all {n_valid}" if n_cands < n_valid else ""
        self.progress(f"[{hw.name}] {len(units)} shape/dtype units, {n_cands} of {n_valid} valid "
                      f"candidates ({'measured on this GPU' if measured_here else 'projected'}"
                      f"{more})")

        tolerance = ""
        choices: list[BucketChoice] = []
        failures: list[str] = []
        started = time.perf_counter()
        self.judged_in_target = 0
        winners: list[dict[str, Any]] = []  # configs kept at earlier units, dtype left out
        for index, (shape, dtype, bucket, sr, sp) in enumerate(units, 1):
            dname = _dtype_name(dtype)
            ordered = tuple(sr.candidates)
            if measured_here:
                ordered = _capped_list(_winners_first(ordered, winners), self.max_variants)
            generated = self._within_time_budget(ordered, index, len(units), started,
                                                 measured_here)
            # The spec's own kernel competes on Triton targets, judged like generated ones.
            cands = generated + (tuple(self.existing) if backend.name != "metal" else ())
            self.already_judged = 0
            tol = self._run_bucket(hw, backend, shape, dtype, bucket, cands, sp, measured_here)
            tolerance = tolerance or tol
            choice = self._choice(hw, backend, shape, dname, bucket, cands)
            if choice is not None:
                choices.append(choice)
                winners.append({k: v for k, v in choice.config.items() if k != "dtype"})
                n = choice.numbers
                t = n.get("time_ms")
                outcome = f"kept {_cfg(choice.config)}, {choice.tier}" + (
                    f", {t * 1e3:.1f} us {n.get('label', '')}" if t is not None else "")
            else:
                why = self._failure_summary(hw.name, bucket, dname)
                failures.append(f"{bucket}/{dname}: {why}")
                notes.append(f"{bucket}/{dname}: no candidate passed")
                outcome = f"no kernel: {why}"
            elapsed = time.perf_counter() - started
            left = elapsed / index * (len(units) - index)
            again = (f"; {self.already_judged} already judged" if self.already_judged else "")
            self.progress(f"[{hw.name}] {index}/{len(units)} {bucket}/{dname}, {len(cands)} "
                          f"candidates{again}: {outcome} ({elapsed:.0f} s, ~{left:.0f} s left)")
        if not tolerance:
            tolerance = self._tolerance_text(hw)
        self.ledger.write_csv(self.run_dir / "bench_results.csv")
        return TargetResult(
            target=hw.name, vendor=hw.vendor, backend=backend.name, arch=hw.build.arch,
            hw_model_hash=hwmodels.model_hash(hw), tolerance=tolerance,
            choices=tuple(choices), notes=tuple(dict.fromkeys(notes)),
            failures=tuple(failures),
        )

    def _within_time_budget(self, cands: tuple[Candidate, ...], index: int, total: int,
                            started: float, measured_here: bool) -> tuple[Candidate, ...]:
        """`cands` cut so the target's remaining units fit its time budget (device only): at the
        cost per candidate so far, the time left shared evenly by the units left, never below
        DEVICE_MIN_VARIANTS. The search ordered them, so the cut drops the least promising."""
        if (self.time_budget_s is None or not measured_here or index == 1
                or self.judged_in_target == 0):
            return cands
        elapsed = time.perf_counter() - started
        per_candidate = elapsed / self.judged_in_target
        per_unit = max(0.0, self.time_budget_s - elapsed) / (total - index + 1)
        cap = max(DEVICE_MIN_VARIANTS, int(per_unit / per_candidate))
        if cap < len(cands):
            log.info("time budget: %d of %d candidates for unit %d/%d", cap, len(cands), index,
                     total)
        return cands[:cap]

    def _judge_shapes(self) -> list[tuple[int, ...]]:
        """The distinct shapes the judge launches a kernel at on the device."""
        from harness.check import odd_shapes
        from harness.check import sweep_shapes

        shapes = [tuple(self.problem.smoke_shape), *sweep_shapes(self.problem, False),
                  *odd_shapes(self.problem, False)]
        return list(dict.fromkeys(tuple(s) for s in shapes))

    def _failure_summary(self, target: str, bucket: str, dname: str) -> str:
        """What the candidates of one (target, bucket, dtype) with no kernel did, by kind:
        "8 candidates, none passed: 5 misfit (registers), 3 failed sweep at bf16 (max abs err
        3.1e-01)"."""
        entries = [e for e in self.ledger
                   if (e.target, e.bucket, e.dtype) == (target, bucket, dname)]
        if not entries:
            return "no candidate was offered (the search's space was empty after pruning)"
        kinds: dict[str, list[str]] = {}
        for e in entries:
            if e.verdict == "rejected":
                kind, detail = reject_kind(e.reason)
            elif e.verdict == "skipped":
                kind, detail = "not checked (check budget spent; raise --max-checks)", ""
            else:
                kind, detail = f"{e.verdict} ({' '.join(e.reason.split())[:60]})", ""
            kinds.setdefault(kind, []).append(detail)
        parts = []
        for kind, details in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            example = next((d for d in details if d), "")
            parts.append(f"{len(details)} {kind}" + (f" ({example})" if example else ""))
        return f"{len(entries)} candidates, none passed: " + ", ".join(parts)

    def _tolerance_text(self, hw: HardwareModel) -> str:
        from harness.tolerance import tolerance

        return "; ".join(f"{_dtype_name(d)}: {tolerance(d, hw).describe()}"
                         for d in self.spec.dtypes)

    def _existing_source(self, variant: _Existing) -> str:
        """A self-contained module: the existing kernel's file plus a `launch` for the pack."""
        launcher = self.spec.triton_launcher
        body = self.spec.triton_kernel.source
        if "\ndef launch(" in body:
            raise PortError(f"{self.spec.path}: TRITON_KERNEL's file already defines `launch`; "
                            "the pack wrapper needs that name")
        return body.rstrip("\n") + "\n" + _EXISTING_WRAPPER.format(
            knobs=tuple(variant.knobs), launcher=launcher.__name__)

    def _source(self, backend: TargetBackend, variant: Any) -> str:
        if isinstance(variant, _Existing):
            return self._existing_source(variant)
        if backend.name == "metal":
            src = self.gen_op.metal_source(variant)
            if not src:
                raise PortError(f"{self.spec.path}: no Metal template covers the "
                                f"{getattr(self.gen_op, 'family', '?')} family of {self.spec.name}")
            return src
        return self.gen_op.triton_module_source(variant)

    def _run_bucket(self, hw: HardwareModel, backend: TargetBackend, shape: tuple[int, ...],
                    dtype: torch.dtype, bucket: str, cands: tuple[Candidate, ...],
                    sp: ShapePlan | None, measured_here: bool) -> str:
        """Judge every candidate of one (target, bucket, dtype); returns the tolerance text."""
        dname = _dtype_name(dtype)
        pending: list[_Pending] = []
        tol = ""
        for cand in cands:
            try:
                source = self._source(backend, cand.variant)
            except PortError:
                raise
            src_hash = source_hash(source)
            key = candidate_key(hw.name, src_hash, cand.config, bucket, dname)
            if self.ledger.done(key):
                e = self.ledger.get(key)
                assert e is not None
                self.already_judged += 1
                self._detail(f"  [{hw.name}] {bucket}/{dname} {_cfg(cand.config)}: "
                             f"already judged ({e.verdict}), skipped")
                continue
            ok, details, reason = self._compile(hw, backend, cand, shape, dtype)
            tier = "emitted" if backend.name == "metal" else "compiled"
            if not ok:
                self.ledger.judge(target=hw.name, bucket=bucket, dtype=dname, config=cand.config,
                                  src_hash=src_hash, tier="emitted", passed=False,
                                  reason_failed=reason, shape=shape, details=details)
                self.judged_in_target += 1
                self._detail(f"  [{hw.name}] {bucket}/{dname} {_cfg(cand.config)}: "
                             f"rejected: {brief_reason(reason)}")
                continue
            numbers = self._project(hw, shape, dtype, cand, details)
            pending.append(_Pending(cand, source, src_hash, key, numbers, details, tier))

        if backend.name == "metal":
            for p in pending:
                self._judge(hw, backend, bucket, dname, shape, p, passed=True,
                            why="emitted (Metal source; no compiler ran)")
            return tol
        if measured_here:
            return self._device_bucket(hw, backend, shape, dtype, bucket, pending)
        # CPU path: check the fastest-projected first; one that cannot win is not interpreted.
        pending.sort(key=lambda p: p.numbers.get("time_ms", float("inf")))
        for p in pending:
            kept = self.ledger.kept(hw.name, bucket, dname)
            if (kept is not None and tier_rank(kept.tier) >= tier_rank("interpreted")
                    and kept.time_ms is not None
                    and p.numbers.get("time_ms", float("inf")) >= kept.time_ms):
                self._judge(hw, backend, bucket, dname, shape, p, passed=True,
                            why=f"projected {p.numbers['time_ms']:.4g} ms cannot beat the kept "
                                f"{kept.time_ms:.4g} ms; correctness not run")
                continue
            tol = self._interpreted_eval(hw, backend, shape, dtype, bucket, p) or tol
        return tol

    def _judge(self, hw: HardwareModel, backend: TargetBackend, bucket: str, dname: str,
               shape: tuple[int, ...], p: _Pending, *, passed: bool, why: str = "") -> LedgerEntry:
        e = self.ledger.judge(target=hw.name, bucket=bucket, dtype=dname, config=p.cand.config,
                              src_hash=p.src_hash, tier=p.tier, passed=passed,
                              reason_failed=why if not passed else "",
                              note=why if passed else "",
                              numbers=p.numbers, shape=shape, details=p.details)
        self.judged_in_target += 1
        t = p.numbers.get("time_ms")
        ttxt = f"{t * 1e3:.1f} us {p.numbers.get('label', '')}" if t is not None else "no time"
        # a rejection says why in a few words; the ledger keeps the whole reason
        why_txt = f": {brief_reason(e.reason)}" if e.verdict == "rejected" else ""
        self._detail(f"  [{hw.name}] {bucket}/{dname} {_cfg(p.cand.config)}: {p.tier}, {ttxt} "
                     f"-> {e.verdict}{why_txt}")
        return e

    # -- tiers ----------------------------------------------------------------------------
    def _compile(self, hw: HardwareModel, backend: TargetBackend, cand: Candidate,
                 shape: tuple[int, ...], dtype: torch.dtype) -> tuple[bool, dict[str, Any], str]:
        import torch

        from porter.search import launch_config
        from targets.base import CompileError

        inputs = self.problem.make_inputs(shape, dtype, torch.device("meta"),
                                          torch.Generator().manual_seed(0))
        details: dict[str, Any] = {
            "kernels": [], "origin": "existing" if isinstance(cand.variant, _Existing) else "generated"}
        try:
            if backend.name == "metal":
                refs = [_metal_ref(self._source(backend, cand.variant), self.spec.name)]
            elif isinstance(cand.variant, _Existing):
                refs = [self._existing_ref(shape, dtype, cand.config)]
            else:
                refs = list(self.gen_op.kernel_refs(tuple(inputs), cand.variant,
                                                    source_path=str(self._source_file(cand))))
        except Exception as exc:  # noqa: BLE001 - codegen rejecting a config is a verdict
            if isinstance(cand.variant, _Existing):
                return False, details, (f"existing kernel could not be specialized at {shape}: "
                                        f"{exc} (TRITON_CONSTEXPRS in the spec gives its "
                                        "constexprs per shape)")
            return False, details, f"codegen could not specialize this config: {exc}"
        lc = launch_config(cand.config)
        occupancy = None
        for item in refs:
            kref, klc = (item if isinstance(item, tuple) else (item, lc))
            try:
                rep = backend.compile(kref, klc, hw)
            except CompileError as exc:
                return False, details, f"compile error: {exc}"
            info = {
                "kernel": kref.name, "tier": rep.tier, "fits": rep.fits,
                "reasons": list(rep.reasons), "notes": list(rep.notes),
            }
            if rep.resources is not None:
                info.update(registers=rep.resources.registers_per_thread,
                            smem_bytes=rep.resources.shared_memory_bytes,
                            spill_bytes=rep.resources.spill_bytes)
            if rep.occupancy is not None:
                info.update(occupancy=rep.occupancy.fraction,
                            blocks_per_unit=rep.occupancy.blocks_per_unit,
                            limited_by=rep.occupancy.limited_by)
                if occupancy is None or rep.occupancy.fraction < occupancy.fraction:
                    occupancy = rep.occupancy
            details["kernels"].append(info)
            self._record(hw, backend.name, rep.tier, rep.fits, cand.config, shape,
                         _dtype_name(dtype), metrics={k: v for k, v in info.items()
                                                      if isinstance(v, (int, float))},
                         message="; ".join(rep.reasons or rep.notes))
            if not rep.fits:
                return False, details, f"{kref.name} does not fit: {'; '.join(rep.reasons)}"
        if backend.name != "metal" and not isinstance(cand.variant, _Existing):
            limit = int(hw.limits.shared_memory_per_block_bytes.value)
            if any(k.get("smem_bytes", 0) > NEAR_SMEM_LIMIT * limit for k in details["kernels"]):
                why = self._misfit_at_judge_shapes(hw, backend, cand, shape, dtype, refs)
                if why:
                    return False, details, why
        details["_occupancy"] = occupancy
        details["grid"] = self._grid(tuple(inputs), cand, refs)
        return True, details, ""

    def _misfit_at_judge_shapes(self, hw: HardwareModel, backend: TargetBackend,
                                cand: Candidate, shape: tuple[int, ...], dtype: torch.dtype,
                                refs: list[Any]) -> str:
        """Why `cand` does not fit at one of the judge's device shapes (smoke, sweep, odd
        sizes), compiling each distinct specialization once; "" when it fits at all of them."""
        import torch

        from harness.check import odd_shapes
        from harness.check import sweep_shapes
        from porter.search import launch_config
        from targets.base import CompileError

        def spec_key(kref: Any) -> tuple[Any, ...]:
            return (kref.name, tuple(sorted(kref.signature.items())),
                    tuple(sorted((k, repr(v)) for k, v in kref.constexprs.items())))

        seen = {spec_key(item[0] if isinstance(item, tuple) else item) for item in refs}
        shapes = [tuple(self.problem.smoke_shape), *sweep_shapes(self.problem, False),
                  *odd_shapes(self.problem, False)]
        lc = launch_config(cand.config)
        for other in dict.fromkeys(shapes):
            inputs = self.problem.make_inputs(other, dtype, torch.device("meta"),
                                              torch.Generator().manual_seed(0))
            try:
                others = list(self.gen_op.kernel_refs(tuple(inputs), cand.variant,
                                                      source_path=str(self._source_file(cand))))
            except Exception:  # noqa: BLE001, S112 - a one-block size the judge refits there
                continue
            for item in others:
                kref, klc = (item if isinstance(item, tuple) else (item, lc))
                if spec_key(kref) in seen:
                    continue
                seen.add(spec_key(kref))
                try:
                    rep = backend.compile(kref, klc, hw)
                except CompileError as exc:
                    return f"compiles at {shape} but not at the judge's {other}: {exc}"
                if not rep.fits:
                    return (f"{kref.name} fits at {shape} but not at the judge's {other}: "
                            f"{'; '.join(rep.reasons)}")
        return ""

    def _existing_ref(self, shape: tuple[int, ...], dtype: torch.dtype,
                      config: dict[str, Any]) -> tuple[Any, Any]:
        """The existing kernel specialized for `shape` (constexprs as its launcher picks them)."""
        from porter.search import launch_config
        from targets import kernel_ref_for

        kref = self.spec.triton_kernel
        values = dict(kref.constexprs)
        hook = getattr(self.spec, "triton_constexprs", None)
        if hook is not None:
            values.update(hook(tuple(shape), dtype))
        knobs = {k: values.pop(k) for k in EXISTING_LAUNCH_KNOBS if k in values}
        knobs.update({k: v for k, v in config.items() if k in EXISTING_LAUNCH_KNOBS})
        ref = kernel_ref_for(self._existing_jit(), dtype=_dtype_name(dtype), constexprs=values,
                             name=kref.name)
        return ref, launch_config(knobs)

    def _existing_jit(self) -> Any:
        """The existing kernel as a compilable JITFunction.

        The spec loader imported it under whatever TRITON_INTERPRET was set (an interpreted
        function cannot be cross-compiled), so its file is imported again with it off.
        """
        import inspect

        from targets import load_kernel

        if getattr(self, "_existing_fn", None) is None:
            fn = self.spec.triton_kernel.fn
            path = inspect.getsourcefile(getattr(fn, "fn", fn))
            self._existing_fn = load_kernel(path, self.spec.triton_kernel.name)
        return self._existing_fn

    def _source_file(self, cand: Candidate) -> Path:
        """The Triton module of `cand` as a file (kernel_refs loads compilable kernels from it)."""
        source = self.gen_op.triton_module_source(cand.variant)
        path = self.run_dir / "_sources" / f"{self.spec.name}_{source_hash(source)[:16]}.py"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source)
        return path

    def _grid(self, inputs: tuple[Any, ...], cand: Candidate, refs: list[Any]) -> int:
        """Programs launched (for the projection): from codegen if it says, else rows / tile."""
        import math

        import torch

        # codegen's grid knows only its own variants; the existing kernel falls back below
        objs = refs if isinstance(cand.variant, _Existing) else (self.gen_op, *refs)
        for obj in objs:
            fn = getattr(obj, "grid", None)
            if callable(fn):
                try:
                    g = fn(inputs, cand.variant)
                    return int(math.prod(g)) if isinstance(g, tuple) else int(g)
                except TypeError:
                    continue
            if isinstance(fn, (int, tuple)):
                return int(math.prod(fn)) if isinstance(fn, tuple) else int(fn)
        first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
        if first is None:
            return 1
        cfg = cand.config
        rows = math.prod(first.shape[:-1]) if first.dim() > 1 else 1
        per = cfg.get("ROWS_PER_PROGRAM") or cfg.get("ROWS") or 1
        if first.dim() <= 1 or str(getattr(self.gen_op, "family", "")) == "elementwise":
            block = cfg.get("BLOCK_SIZE") or cfg.get("BLOCK") or 1024
            return max(1, math.ceil(first.numel() / int(block)))
        return max(1, math.ceil(rows / int(per)))

    def _project(self, hw: HardwareModel, shape: tuple[int, ...], dtype: torch.dtype,
                 cand: Candidate, details: dict[str, Any]) -> dict[str, Any]:
        from harness.projection import project
        from harness.roofline import analyze
        from porter.planner import op_cost

        nbytes, flops = op_cost(self.problem, shape, dtype)
        occ = details.pop("_occupancy", None)
        try:
            unit = "matrix" if getattr(self.gen_op, "family", "") == "matmul_epilogue" else "simt"
            pr = project(nbytes, flops, hw, dtype, grid=int(details.get("grid", 1)),
                         occupancy=occ, math_unit=unit)
        except ValueError as exc:
            details["projection_error"] = str(exc)
            return {}
        roof = analyze(nbytes, flops, pr.time_ms, hw, dtype, math=unit)
        numbers = {"time_ms": pr.time_ms, "label": "projected", "bound": pr.bound,
                   "pct_of_peak": roof.pct_peak, "floor_ms": roof.floor_ms,
                   "bytes_moved": nbytes, "flops": flops}
        self._record(hw, "", "projected", True, cand.config, shape, _dtype_name(dtype),
                     metrics={"median_ms": pr.time_ms, "pct_peak": roof.pct_peak},
                     message=f"projected ({pr.bound}-bound)")
        return numbers

    def _check_key(self, p: _Pending) -> str:
        from porter.search import semantic_config

        # "dtype" is left out: the judge checks every dtype the spec claims in one check.
        sem = {k: v for k, v in semantic_config(p.cand.config).items() if k != "dtype"}
        return f"{p.src_hash[:16]}|{config_key(sem)}"

    def _device_check_key(self, p: _Pending, dname: str) -> str:
        """`_check_key` plus the launch knobs: on the device those decide whether a kernel
        launches at all (the shared memory it needs at some shape), so a device check is not
        shared across them. Sharing one let a 3-stage config inherit a 4-stage config's
        out-of-resources failure (bench/NOTES.md item 31)."""
        from porter.search import LAUNCH_KNOBS

        launch = {k: v for k, v in p.cand.config.items() if k in LAUNCH_KNOBS}
        return f"{self._check_key(p)}|{config_key(launch)}|{dname}"

    def _interpreted_eval(self, hw: HardwareModel, backend: TargetBackend,
                          shape: tuple[int, ...], dtype: torch.dtype, bucket: str,
                          p: _Pending) -> str:
        dname = _dtype_name(dtype)
        ckey = self._check_key(p)
        shared = ckey in self._checks
        if not shared:
            if self.max_checks is not None and self.checks_spent >= self.max_checks:
                before = self.ledger.get(p.key)
                if before is None or before.verdict != "skipped":
                    # a skip is not "done": a resumed run with a larger budget checks it
                    self.ledger.skip(target=hw.name, bucket=bucket, dtype=dname,
                                     config=p.cand.config, source_hash=p.src_hash, tier=p.tier,
                                     numbers=p.numbers, shape=shape, details=p.details,
                                     reason=f"interpreted-check budget ({self.max_checks}) spent; "
                                            "rerun with --run-dir and a larger --max-checks to "
                                            "check it, or on the device")
                self._detail(f"  [{hw.name}] {bucket}/{dname} {_cfg(p.cand.config)}: "
                             "skipped (check budget spent)")
                return ""
            self._detail(f"  [{hw.name}] {bucket}/{dname} {_cfg(p.cand.config)}: checking under "
                         "the Triton interpreter (CPU)...")
            res = _interpreted_check(self.spec.path, p.source, p.cand.config, hw.name,
                                     self.run_dir)
            self.checks_run += 1
            self.checks_spent += 1
            self._checks[ckey] = (res["passed"], res["message"], res["tolerances"])
            self._record(hw, backend.name, "interpreted", res["passed"], p.cand.config, shape,
                         dname, message=res["message"])
        else:
            self.checks_shared += 1
        passed, msg, tol = self._checks[ckey]
        p.details["check"] = {"key": ckey, "interpreted": True, "passed": passed,
                              "message": msg, "tolerances": tol, "shared": shared}
        if passed:
            p.tier = "interpreted"
        why = msg if not passed else ("interpreted check shared with an identical kernel "
                                      "body+config on another target" if shared else "")
        self._judge(hw, backend, bucket, dname, shape, p, passed=passed, why=why)
        return tol

    def _device_bucket(self, hw: HardwareModel, backend: TargetBackend,
                       shape: tuple[int, ...], dtype: torch.dtype, bucket: str,
                       pending: list[_Pending]) -> str:
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

        dname = _dtype_name(dtype)
        dev = torch.device("cuda")

        def make_args() -> tuple[Any, ...]:
            return tuple(self.problem.make_inputs(shape, dtype, dev, torch.Generator(dev)))

        limit = self.target_deadline_s

        def hung(p: _Pending, what: str) -> Callable[[], None]:
            return lambda: self._hung(hw, backend, bucket, dname, shape, p, what, limit)

        at_shape = dataclasses.replace(self.problem, smoke_shape=tuple(shape))
        passing: list[tuple[_Pending, Any]] = []
        for p in pending:
            module = self._module(p.source, interpret=False)
            cand = _refitting_candidate(module, self.gen_op, hw, p.cand.config)
            try:
                with deadline(limit, hung(p, f"its first run at {shape}")):
                    quick = check(at_shape, cand, device="cuda", interpret=False, hw=hw,
                                  stages=["smoke"], dtypes=[dtype])
            except ValueError as exc:
                # harness.check's ProblemError (a ValueError): the spec's own code failed
                raise PortError(f"{self.spec.path}: the spec's own code failed while its kernel "
                                f"was judged on the device: {exc}") from exc
            except Exception as exc:  # noqa: BLE001 - a kernel that crashes is a verdict
                self._judge(hw, backend, bucket, dname, shape, p, passed=False,
                            why=f"crashed at {shape}: {type(exc).__name__}: {exc}")
                continue
            if not quick.passed:
                failed = quick.failed
                self._judge(hw, backend, bucket, dname, shape, p, passed=False,
                            why=f"{failed.name}: {failed.message}" if failed else "failed")
                continue
            passing.append((p, cand))
        # (finalist? 0 : 1, median ms): a screened-out candidate never outranks a finalist, whose
        # full-repetition median can differ from its screen's
        timed: list[tuple[tuple[int, float], _Pending, Any]] = []

        def time_side_by_side(group: list[tuple[_Pending, Any]], reps: int) -> dict[int, Any]:
            # Candidates timed interleaved in one comparison (same inputs, same machine drift);
            # events with the host head start and a flushed LLC every repetition.
            cmp = compare({str(i): (lambda *a, _c=c: _c(*a)) for i, (_, c) in enumerate(group)},
                          make_args, hw=hw, reps=reps, warmup=3, graph=False)
            return {id(p): cmp.timings[str(i)] for i, (p, _) in enumerate(group)}

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
        winner: tuple[_Pending, Any] | None = None
        for _, p, cand in timed:
            if winner is not None:
                break
            ckey = self._device_check_key(p, dname)
            if ckey not in self._checks:
                try:
                    with deadline(limit, hung(p, "its check at the judge's shapes")):
                        report = check(self.problem, cand, device="cuda", interpret=False, hw=hw,
                                       dtypes=[dtype])
                except ValueError as exc:
                    # harness.check's ProblemError (a ValueError): the spec's own code failed
                    raise PortError(f"{self.spec.path}: the spec's own code failed while its "
                                    f"kernel was judged on the device: {exc}") from exc
                msg = ("passed all stages on the device" if report.passed else
                       f"{report.failed.name}: {report.failed.message}" if report.failed
                       else "failed")
                self._checks[ckey] = (report.passed, msg, report.tolerances)
                self.checks_run += 1
            else:
                self.checks_shared += 1
            passed, msg, tol = self._checks[ckey]
            p.details["check"] = {"key": ckey, "interpreted": False, "passed": passed,
                                  "message": msg, "tolerances": tol}
            self._record(hw, backend.name, "measured" if passed else "compiled", passed,
                         p.cand.config, shape, dname, message=msg)
            if not passed:
                self._judge(hw, backend, bucket, dname, shape, p, passed=False, why=msg)
                continue
            winner = (p, cand)
        if winner is None:
            return tol
        p, cand = winner
        cmp = compare({"kernel": lambda *a: cand(*a), "eager": self.problem.reference},
                      make_args, hw=hw, reps=DEVICE_REPS, graph=False)
        t = cmp.timings["kernel"]
        nbytes = p.numbers.get("bytes_moved") or 0
        flops = p.numbers.get("flops") or 0
        unit = "matrix" if getattr(self.gen_op, "family", "") == "matmul_epilogue" else "simt"
        roof = analyze(nbytes, flops, t.median_ms, hw, dtype, math=unit)
        vs_eager = cmp.ratio("eager", "kernel")  # eager time / kernel time, per-rep pairs
        p.numbers.update({"time_ms": t.median_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms,
                          "pct_of_peak": roof.pct_peak, "floor_ms": roof.floor_ms,
                          "speedup_vs_eager": vs_eager[0],
                          "speedup_vs_eager_p20_p80": [vs_eager[1], vs_eager[2]]})
        if vs_eager[2] < 1.0 and vs_eager[0] < PREFER_REFERENCE_BELOW:
            # Eager PyTorch was faster in (at least) 80% of the paired repetitions, and by more
            # than noise at the median: the pack says so and its loader runs the reference for
            # this bucket on this device.
            p.numbers["prefer_reference"] = (
                f"eager PyTorch is faster here: kernel {t.median_ms * 1e3:.1f} us vs eager "
                f"{cmp.timings['eager'].median_ms * 1e3:.1f} us (ratio p80 {vs_eager[2]:.2f})")
        if roof.exceeds_speed_of_light:
            self._judge(hw, backend, bucket, dname, shape, p, passed=False, why=roof.message)
            return tol
        p.tier = "measured"
        self._record(hw, backend.name, "measured", True, p.cand.config, shape, dname,
                     metrics={"median_ms": t.median_ms, "pct_peak": roof.pct_peak,
                              "speedup_vs_eager": p.numbers["speedup_vs_eager"]},
                     spread={"p20_ms": t.p20_ms, "p80_ms": t.p80_ms}, message=roof.message)
        self._judge(hw, backend, bucket, dname, shape, p, passed=True)
        for _, other, _c in timed:
            if other is not p and "check" not in other.details:
                # timed and right at its shape, but slower than the kept one: reverted
                self._judge(hw, backend, bucket, dname, shape, other, passed=True,
                            why="checked at its shape (smoke) and timed; slower than the kept")
        return tol

    def _hung(self, hw: HardwareModel, backend: TargetBackend, bucket: str, dname: str,
              shape: tuple[int, ...], p: _Pending, what: str,
              limit: float = DEVICE_DEADLINE_S) -> None:
        """A candidate's device run passed its deadline (called from the watchdog thread):
        record it rejected, say so, and end the process (the hung kernel holds the GPU)."""
        why = (f"{what} did not finish in {limit:.0f} s: taken to be hung "
               "(a CUDA kernel cannot be stopped from the host)")
        self._judge(hw, backend, bucket, dname, shape, p, passed=False, why=why)
        print(f"porter port: {hw.name} {bucket}/{dname} {_cfg(p.cand.config)}: {why}. Stopping; "
              f"the ledger ({self.ledger.path}) has it rejected, so the same command resumes "
              "without it.", file=sys.stderr, flush=True)
        _exit(DEVICE_HUNG_EXIT)

    def _choice(self, hw: HardwareModel, backend: TargetBackend, shape: tuple[int, ...],
                dname: str, bucket: str, cands: tuple[Candidate, ...]) -> BucketChoice | None:
        kept = self.ledger.kept(hw.name, bucket, dname)
        if kept is None:
            return None
        variant = next((c.variant for c in cands if config_key(c.config) ==
                        config_key(kept.config)), kept.config)
        source = self._source(backend, variant)
        if source_hash(source) != kept.source_hash:
            log.warning("%s %s/%s: regenerated source differs from the judged one; the pack "
                        "gets the regenerated one", hw.name, bucket, dname)
        numbers = {k: v for k, v in kept.numbers.items() if not isinstance(v, dict)}
        return BucketChoice(bucket=bucket, dtype=dname, shape=tuple(shape), config=kept.config,
                            source=source, tier=kept.tier, numbers=numbers,
                            origin="existing" if isinstance(variant, _Existing) else "generated")


CHECK_TIMEOUT_S = 600


def _interpreted_check(spec_path: Path, source: str, config: dict[str, Any], hw_name: str,
                       run_dir: Path) -> dict[str, Any]:
    """Run harness.check under the Triton interpreter in a child process; returns its verdict.

    A child process because `triton.language` decides at import whether its library functions
    (tl.sum, ...) are interpreted, and the same process must cross-compile with them compiled:
    one process cannot do both. The child starts with TRITON_INTERPRET=1 set.
    """
    import subprocess
    import sys

    folder = run_dir / "_checks"
    folder.mkdir(parents=True, exist_ok=True)
    src_file = folder / f"{source_hash(source)[:16]}.py"
    src_file.write_text(source)
    job = {"spec": str(Path(spec_path).resolve()), "source": str(src_file.resolve()),
           "config": config, "hw": hw_name}
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_DEFAULT_FP_FUSION": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", "from porter.port import _check_child; "
                               "_check_child()"], input=json.dumps(job), capture_output=True,
                              text=True, env=env, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"passed": False, "tolerances": "",
                "message": f"interpreted check timed out after {CHECK_TIMEOUT_S}s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"passed": False, "tolerances": "",
                "message": f"interpreted check crashed (exit {proc.returncode}): "
                           + " | ".join(tail)}
    res = json.loads(lines[-1])
    if res.get("problem"):
        raise PortError(f"{spec_path}: the spec's own code failed while its kernel was judged "
                        f"under the interpreter: {' '.join(res['problem'].split())}")
    if res["passed"]:
        res["message"] = (f"passed {res['message']} under the Triton interpreter in "
                          f"{time.perf_counter() - t0:.1f}s")
    return res


def _check_child() -> None:
    """Child side of `_interpreted_check`: reads a job (JSON) on stdin, prints the verdict."""
    import sys

    import hwmodels
    from harness import check
    from porter.codegen.loading import load_generated_module
    from porter.spec import load_spec

    import torch

    from porter.search import SIZE_KNOBS

    job = json.loads(sys.stdin.read())
    spec = load_spec(job["spec"])
    source = Path(job["source"]).read_text()
    module = load_generated_module(source, f"check_{spec.name}", True)
    config = job["config"]
    hw = hwmodels.get(job["hw"])
    example = spec.make_inputs(tuple(spec.smoke_shape), spec.dtypes[0], torch.device("cpu"),
                               torch.Generator().manual_seed(0))
    gen_op = _generate(spec.reference, tuple(example), spec.name)
    candidate = _refitting_candidate(module, gen_op, hw, config)
    refitted = candidate.refitted

    try:
        report = check(spec.problem(), candidate, device="cpu", interpret=True, hw=hw)
    except ValueError as exc:
        # harness.check raises ValueError (ProblemError) when the problem's own code fails, e.g.
        # a reference that raises at a later sweep shape: no verdict on the candidate.
        print(json.dumps({"passed": False, "message": "", "tolerances": "",
                          "problem": f"{type(exc).__name__}: {exc}"}))
        return
    if report.passed:
        msg = ", ".join(s.name for s in report.stages)
        if refitted:
            msg += (f" (size knobs re-derived at {len(set(refitted))} judge shape(s) the bucket's "
                    "BLOCK_N does not cover)")
    else:
        failed = report.failed
        msg = f"{failed.name}: {failed.message}" if failed is not None else report.summary()
    print(json.dumps({"passed": report.passed, "message": msg,
                      "tolerances": report.tolerances}))


# Rowwise strategies whose block holds the whole row (BLOCK_N, plus BLOCK_TAIL for two_block,
# >= the row's length).
ONE_BLOCK_STRATEGIES = ("single_pass", "persistent", "two_block")


class _refitting_candidate:  # noqa: N801 - used like a function
    """The generated launcher with one config, as a harness candidate (out contract).

    A bucket's config pins size knobs (BLOCK_N) for its GPU-size shape; at the judge's other
    shapes those are re-derived the way the launcher would, and every other knob (strategy,
    ROWS, warps, ...) stays as tested, unless the row is too long for one block, where the
    launcher's own (looped) config runs, as the pack's loader does. `refitted` lists the shapes
    where either happened.
    """

    def __init__(self, module: Any, gen_op: Any, hw: Any, config: dict[str, Any]) -> None:
        self.module, self.gen_op, self.hw, self.config = module, gen_op, hw, config
        self.refitted: list[tuple[int, ...]] = []

    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        import torch

        from porter.codegen import heuristics

        cfg = self.config
        first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
        if first is not None and not _config_fits(self.gen_op, self.hw, inputs, cfg):
            fresh = self.gen_op.default_config(self.hw, tuple(inputs), first.dtype)
            if fresh.get("strategy") in ONE_BLOCK_STRATEGIES:
                n_cols = self.gen_op.problem_sizes(tuple(inputs))["n_cols"]
                cfg = {**cfg, **heuristics.one_block_sizes(cfg["strategy"], n_cols)}
            else:
                # The row needs the looped kernel: the launcher's own config, as the loader
                # runs it (a one-block config with a looped BLOCK_N is no config at all).
                cfg = fresh
            self.refitted.append(tuple(first.shape))
        return self.module.launch(*inputs, out=out, config=cfg)


def _config_fits(gen_op: Any, hw: Any, inputs: tuple[Any, ...], config: dict[str, Any]) -> bool:
    """Whether `config`'s size knobs cover these inputs (a one-block row must hold the row)."""
    import torch

    first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
    if (first is None or config.get("strategy") not in ONE_BLOCK_STRATEGIES
            or "BLOCK_N" not in config):
        return True
    return int(config["BLOCK_N"]) + int(config.get("BLOCK_TAIL", 0)) >= int(first.shape[-1])


def _metal_ref(source: str, op: str) -> Any:
    """A KernelRef for generated Metal source (the Metal backend emits/inspects, never runs)."""
    import re

    from targets.base import KernelRef

    found = re.search(r"kernel\s+void\s+(\w+)", source)
    return KernelRef(name=found.group(1) if found else op, source=source)


def _generate(reference: Callable[..., Any], example: tuple[Any, ...], name: str) -> Any:
    """Template code generation (porter.codegen); a seam the tests replace with a stand-in."""
    from porter import codegen

    return codegen.generate(reference, example, name=name)


def _cfg(config: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items())


def _capped_list(cands: tuple[Candidate, ...], cap: int | None) -> tuple[Candidate, ...]:
    return cands if cap is None else cands[:cap]


def _capped(sr: Any, cap: int | None) -> Any:
    """A `SearchResult` cut to `cap` candidates (the rest counted as capped)."""
    if cap is None or len(sr.candidates) <= cap:
        return sr
    return replace(sr, candidates=sr.candidates[:cap],
                   capped=sr.capped + len(sr.candidates) - cap)


def _winners_first(cands: tuple[Candidate, ...], winners: list[dict[str, Any]],
                   ) -> tuple[Candidate, ...]:
    """`cands` with those whose config (dtype aside) was kept at an earlier unit of the same
    target moved to the front, the latest winner first; the rest keep the search's order.

    A kernel that won at one dtype or bucket is the likeliest to win at the next, and on the
    device a cap (or the time budget) keeps only the first few. Without it a matmul whose
    default config misfits at 8192^3 kept the tiled kernel, 14% slower than the TMA one that
    won at 4096^3 (H100, 2026-11-26)."""
    def key(c: Candidate) -> str:
        return config_key({k: v for k, v in c.config.items() if k != "dtype"})

    rank = {config_key(w): i for i, w in enumerate(winners)}
    first = sorted((c for c in cands if key(c) in rank), key=lambda c: -rank[key(c)])
    return tuple(first) + tuple(c for c in cands if key(c) not in rank)


def _spent_check(check: dict[str, Any] | None) -> bool:
    """Whether a ledger entry's check record is an interpreted check that was run (not shared)."""
    return bool(check and check.get("key") and check.get("interpreted")
                and not check.get("shared"))


_STAGES = ("smoke", "sweep", "adversarial", "determinism", "odd_sizes")
# what a misfit ran out of, by the words of backend.compile's reasons
_RESOURCES = (("register", "registers"), ("spill", "spills"), ("shared memory", "shared memory"),
              ("lds", "LDS"), ("thread", "threads"), ("warp", "threads"))


def reject_kind(reason: str) -> tuple[str, str]:
    """A rejection reason as (kind, detail): kinds group candidates in the port's summary,
    e.g. ("misfit (registers)", ""), ("failed sweep at bf16", "max abs err 3.1e-01"),
    ("crashed", "RuntimeError: illegal memory access")."""
    import re

    text = " ".join(reason.split())
    low = text.lower()
    if "taken to be hung" in low:
        return "hung", ""
    if "does not fit" in low or "but not at the judge's" in low:
        what = next((name for key, name in _RESOURCES if key in low), "resources")
        return f"misfit ({what})", ""
    if low.startswith("compile error"):
        return "compile error", _clip(text.split(":", 1)[-1])
    if "could not specialize" in low or "could not be specialized" in low:
        return "no such config", _clip(text.split(":", 1)[-1])
    if "timed out" in low:
        return "check timed out", ""
    if "crashed" in low:
        last = text.split(" | ")[-1] if " | " in text else text.split(": ", 1)[-1]
        return "crashed", _clip(last)
    stage = next((st for st in _STAGES if low.startswith(st + ":") or f"] {st}:" in low), None)
    if stage is not None:
        dtype = re.search(r"dtype (\w+)", text)
        kind = f"failed {stage}" + (f" at {dtype.group(1)}" if dtype else "")
        err = re.search(r"max abs err [0-9.e+-]+", text)
        if err:
            return kind, err.group(0)
        if "nan/inf" in low:
            return kind, "NaN/Inf where the reference is finite"
        raised = re.search(r"raised (\w+)", text)
        return kind, f"raised {raised.group(1)}" if raised else _clip(text.split(":", 1)[-1])
    if "speed of light" in low or "roofline" in low:
        return "faster than the roofline allows", ""
    return _clip(text, 60), ""


def brief_reason(reason: str) -> str:
    """A rejection reason in a few words for a progress line (the ledger keeps it whole)."""
    kind, detail = reject_kind(reason)
    return f"{kind} ({detail})" if detail else kind


def _clip(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


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
            (`porter.pack.write_pack`'s `replace`; named so it does not hide dataclasses.replace).

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
    from porter.pack import check_out_dir
    from porter.pack import write_pack
    from porter.spec import load_spec

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
        porter_ = _Porter(spec, rd, store_path=store, resume=resume, max_variants=max_variants,
                          max_checks=max_checks, progress=say, units=units, exhaustive=exhaustive,
                          time_budget_s=time_budget_s, deadline_s=deadline_s, verbose=verbose)
        say(f"{spec.name}: family {getattr(porter_.gen_op, 'family', '?')}; "
            f"{'measuring on ' + porter_.local if porter_.local else 'no GPU here: ' + porter_.detect_reason}")
        say(porter_.budget_text())
        results = []
        seen = set()
        for t in targets:
            name = hwmodels.get(t).name
            if name in seen:
                continue
            seen.add(name)
            results.append(porter_.run_target(name))
    fusion = getattr(porter_.gen_op, "fusion", None)
    fusion_d = {"text": getattr(fusion, "text", str(fusion or "")),
                "bytes_saved": getattr(fusion, "bytes_saved", None)}
    result = PortResult(
        op=spec.name, spec_path=spec_path, run_dir=rd, targets=tuple(results),
        versions={k: v for k, v in env_info.versions().items() if v is not None},
        fusion=fusion_d, signature=porter_.signature,
        # A spec module defines `reference` itself: the loader imports it from reference.py
        # directly (its TRITON_KERNEL path would not resolve inside the pack). A KernelBench file
        # is self-contained and goes through load_spec, which lifts the Model's parameters.
        reference_function="reference" if getattr(spec, "source_kind", "spec") == "spec" else None,
        checks_run=porter_.checks_run, checks_shared=porter_.checks_shared,
        budget=porter_.budget_text(), warnings_file=rd / "warnings.txt" if caught else None,
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
