"""What one `porter port` run shares across its targets and roles: the spec and generated op, the
ledger and the results store, the search budget, the interpreted checks already run (shared by
identical kernel bodies across targets), and the progress lines.

The roles read it through `TargetContext.session`; the loop (`porter.loop`) creates one per run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from porter import budget
from porter.ledger import Ledger
from porter.ledger import config_key
from porter.ledger import source_hash

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def input_kinds(inputs: tuple[Any, ...]) -> tuple[str, ...]:
    """"tensor" | "float" | "int" | "bool" (else the type's name) per input: the pack's
    signature."""
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


def spent_check(check: dict[str, Any] | None) -> bool:
    """Whether a ledger entry's check record is an interpreted check that was run (not shared)."""
    return bool(check and check.get("key") and check.get("interpreted")
                and not check.get("shared"))


class PortSession:
    """The run-wide state of one port (see the module docstring).

    Args:
        spec: the loaded OpSpec.
        gen_op: the generated op (`porter.port.generate_op`'s result).
        run_dir: the run folder; its ledger is continued when `resume`, else set aside.
        store_path: the results store (SQLite).
        units: (shape, torch dtype) pairs to tune; None: every spec shape x dtype.
        local: the hardware-model name of the local GPU, or None (nothing is measured).
        max_variants, max_checks, time_budget_s: the resolved budget (`budget.resolve_budget`).
        deadline_s: an explicit device deadline (`--deadline`), else None.
        generate: how an op is generated again from the reference (a bucket whose size the
            run's trace pinned is traced at its own sizes): `porter.port.generate_op`, the
            seam tests replace; None: `porter.codegen.generate`.
    """

    def __init__(self, spec: Any, gen_op: Any, run_dir: Path, *, store_path: Path, resume: bool,
                 progress: Progress, local: str | None, max_variants: int | None,
                 max_checks: int | None, time_budget_s: float | None,
                 units: list[tuple[tuple[int, ...], Any]] | None = None,
                 deadline_s: float | None = None, verbose: bool = False,
                 generate: Callable[..., Any] | None = None) -> None:
        from harness.store import ResultsStore

        self.spec = spec
        self.generate = generate
        self.problem = spec.problem()
        self.gen_op = gen_op
        self.units = units
        self.run_dir = run_dir
        self.progress = progress
        self.verbose = verbose
        self.local = local
        self.detect_reason = ""  # why no GPU is measured here, when none is
        self.signature: tuple[str, ...] = ()  # input kinds, for the pack (`input_kinds`)
        self.leading_dims: dict[str, Any] | None = None  # porter.packs.leading.probe's verdict
        self.deadline_s = deadline_s
        self.max_variants, self.max_checks, self.time_budget_s = (
            max_variants, max_checks, time_budget_s)
        ledger_path = run_dir / "ledger.jsonl"
        if not resume and ledger_path.exists():
            ledger_path.rename(run_dir / f"ledger.{int(time.time())}.jsonl")
        self.ledger = Ledger(ledger_path)
        self.store = ResultsStore(store_path, run_id=run_dir.name)
        self.checks_run = 0
        self.checks_shared = 0
        # semantic check key -> (passed, message, tolerances)
        self.checks: dict[str, tuple[bool, str, str]] = self._checks_from_ledger()
        # Interpreted checks this run has already spent (in earlier, interrupted invocations):
        # the budget continues from there, so a resumed run ends where an uninterrupted one does.
        self.checks_spent = len({e.details["check"]["key"] for e in self.ledger
                                 if spent_check(e.details.get("check"))})
        self._modules: dict[tuple[str, bool], Any] = {}
        # per unit, set by the loop: the shape the unit's op was traced at when it is not the
        # run's (a bucket whose size the run's trace pinned); that op serves this shape only,
        # so the judge checks it there only, and on the device only
        self.own_shape: tuple[int, ...] | None = None
        # per target, reset by the loop
        self.judged_in_target = 0
        self.already_judged = 0
        self.target_deadline_s = budget.DEVICE_DEADLINE_S

    def budget_text(self) -> str:
        return budget.budget_text(self.max_variants, self.max_checks, self.time_budget_s)

    def detail(self, line: str) -> None:
        """A per-candidate line: printed under `verbose` (`-v`), else only logged."""
        if self.verbose:
            self.progress(line)
        else:
            log.debug("%s", line)

    def _checks_from_ledger(self) -> dict[str, tuple[bool, str, str]]:
        out: dict[str, tuple[bool, str, str]] = {}
        for e in self.ledger:
            chk = e.details.get("check")
            if chk and chk.get("key") and chk.get("interpreted"):
                out[chk["key"]] = (bool(chk["passed"]), chk.get("message", ""),
                                   chk.get("tolerances", ""))
        return out

    def record(self, hw: HardwareModel, backend: str, tier: str, passed: bool,
               config: dict[str, Any], shape: tuple[int, ...], dtype: str, *,
               metrics: dict[str, Any] | None = None, spread: dict[str, Any] | None = None,
               message: str = "") -> None:
        """One row in the results store (every compile, check and number the port takes)."""
        from harness.store import Record

        self.store.record(Record(op=self.spec.name, variant=config_key(config), device=hw.name,
                                 tier=tier, passed=passed, shape=tuple(shape), dtype=dtype,
                                 target=backend, config=dict(config), metrics=metrics or {},
                                 spread=spread or {}, message=message))

    def module(self, source: str, interpret: bool) -> Any:
        """`source` imported as a module (once per source and interpreter setting)."""
        from porter.codegen.loading import load_generated_module

        key = (source_hash(source), interpret)
        if key not in self._modules:
            name = f"_porter_gen_{self.spec.name}_{key[0][:12]}_{'i' if interpret else 'n'}"
            self._modules[key] = load_generated_module(source, name, interpret)
        return self._modules[key]

    def unit_pairs(self) -> list[tuple[tuple[int, ...], Any]]:
        """The (shape, torch dtype) pairs to tune, in order."""
        if self.units is not None:
            return [(tuple(s), d) for s, d in self.units]
        return [(tuple(s), d) for s in self.spec.shapes for d in self.spec.dtypes]

    def judge_shapes(self) -> list[tuple[int, ...]]:
        """The distinct shapes the judge launches a kernel at on the device."""
        from harness.check import odd_shapes
        from harness.check import sweep_shapes

        shapes = [tuple(self.problem.smoke_shape), *sweep_shapes(self.problem, False),
                  *odd_shapes(self.problem, False)]
        return list(dict.fromkeys(tuple(s) for s in shapes))
