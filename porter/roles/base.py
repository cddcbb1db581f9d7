"""The six roles of the porter: one small interface each, one request type in, one artifact out.

A role implementation is any object with `name` (the role: "planner", "search", "writer",
"benchmark", "debugger", "profiler"), `implementation` ("rules" for the offline ones in this
package; "claude" for the LLM layer's) and the role's one method. Every method takes

- `ctx`: a `TargetContext`, the live objects of one target (spec, hardware model, backend,
  generated op, run folder). Not serialised; an LLM role reads `ctx.hw` for its prompt prefix
  (`hwmodels.descriptor(ctx.hw)`) and need not touch the rest.
- `request`: a frozen dataclass of plain data (`to_dict()` / `from_dict()`), what the role is
  asked; the loop records it with the role's answer (`Exchange`) in `<target>/roles.jsonl`.

and returns a serialisable artifact (`porter.roles.artifacts`). The loop (`porter.loop`) calls
them in the order of DESIGN.md's data flow: plan, search, write, judge, debug, profile, and the
ledger keeps or reverts. Implementations are chosen per role (`Team`); the rule-based team is
`porter.roles.rules_team()`.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any
from typing import Protocol
from typing import runtime_checkable

from porter.roles.artifacts import Artifact
from porter.roles.artifacts import BenchRow
from porter.roles.artifacts import Diagnosis
from porter.roles.artifacts import KernelSource
from porter.roles.artifacts import ShapePlan
from porter.roles.artifacts import TuningPlan
from porter.roles.artifacts import UnitCandidates
from porter.roles.artifacts import UnitProfile
from porter.roles.artifacts import shape_tuple

if TYPE_CHECKING:
    from harness.problem import Problem
    from hwmodels.model import HardwareModel
    from targets.base import TargetBackend

ROLE_NAMES = ("planner", "search", "writer", "benchmark", "debugger", "profiler")
RULES = "rules"  # the offline implementations' `implementation`


@dataclass
class TargetContext:
    """The live objects every role of one target works with (built by the loop, not saved).

    spec: the loaded `OpSpec`; problem: `spec.problem()`; gen_op: the template generator's
    `GeneratedOp` for the op (the rule-based Writer and Search read it); target_dir: the
    target's run folder (`runs/<id>/<target>/`); measured_here: the target is the local GPU.
    """

    spec: Any
    problem: Problem
    hw: HardwareModel
    backend: TargetBackend
    gen_op: Any
    run_dir: Path
    target_dir: Path
    measured_here: bool = False
    session: Any = None  # the run's shared state (porter.session.PortSession)
    plan: TuningPlan | None = None  # the Planner's artifact, once planned
    tolerance: str = ""  # the judge's tolerance policy as text, once a check ran

    def capabilities(self) -> Any:
        """What the target's backend can do here (`targets.base.Capabilities`)."""
        return self.backend.capabilities()

    @property
    def target(self) -> str:
        return self.hw.name

    @property
    def family(self) -> str:
        return str(getattr(self.gen_op, "family", ""))

    def summary(self) -> dict[str, Any]:
        """What any role may be told about the target, as plain data."""
        return {"op": self.spec.name, "target": self.hw.name, "vendor": self.hw.vendor,
                "backend": self.backend.name, "arch": self.hw.build.arch,
                "family": self.family, "measured_here": self.measured_here}


# -- requests (plain data) ------------------------------------------------------------------
class _Request(Artifact):
    pass


@dataclass(frozen=True)
class PlanRequest(_Request):
    """Planner: put these shapes x dtypes on the device's roofline."""

    op: str
    target: str
    family: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> PlanRequest:
        return cls(op=raw["op"], target=raw["target"], family=raw.get("family", ""),
                   shapes=tuple(shape_tuple(s) for s in raw["shapes"]), dtypes=tuple(raw["dtypes"]))


@dataclass(frozen=True)
class SearchRequest(_Request):
    """Search: the candidates for one (shape, dtype) unit, best first, at most max_variants."""

    target: str
    shape: tuple[int, ...]
    dtype: str
    bucket: str
    plan: ShapePlan | None = None
    max_variants: int | None = None
    # configs already kept at earlier units of this target (dtype left out): likely winners
    winners: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SearchRequest:
        plan = raw.get("plan")
        return cls(**{**raw, "shape": shape_tuple(raw["shape"]),
                      "plan": ShapePlan.from_dict(plan) if plan else None,
                      "winners": tuple(raw.get("winners", ()))})


@dataclass(frozen=True)
class WriteRequest(_Request):
    """Kernel Writer: the kernel for this target and config (origin "existing": the spec's own
    kernel wrapped for the pack)."""

    target: str
    config: dict[str, Any]
    origin: str = "generated"
    bucket: str = ""
    dtype: str = ""


@dataclass(frozen=True)
class JudgeRequest(_Request):
    """Benchmark: judge these kernels of one (bucket, dtype) at `shape`; the harness decides."""

    target: str
    bucket: str
    dtype: str
    shape: tuple[int, ...]
    kernels: tuple[KernelSource, ...]

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> JudgeRequest:
        return cls(target=raw["target"], bucket=raw["bucket"], dtype=raw["dtype"],
                   shape=shape_tuple(raw["shape"]),
                   kernels=tuple(KernelSource.from_dict(k) for k in raw["kernels"]))


@dataclass(frozen=True)
class DebugRequest(_Request):
    """Debugger: why did this candidate fail, and is there a fix? `details` is what the judge
    recorded (compiled resources per kernel, the failing check's message)."""

    target: str
    shape: tuple[int, ...]
    row: BenchRow
    kernel: KernelSource
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> DebugRequest:
        return cls(target=raw["target"], shape=shape_tuple(raw["shape"]),
                   row=BenchRow.from_dict(raw["row"]), kernel=KernelSource.from_dict(raw["kernel"]),
                   details=dict(raw.get("details", {})))


@dataclass(frozen=True)
class ProfileRequest(_Request):
    """Profiler: where does the kept kernel of one (bucket, dtype) stand, and what binds it."""

    target: str
    bucket: str
    dtype: str
    shape: tuple[int, ...]
    config: dict[str, Any]
    tier: str
    numbers: dict[str, Any] = field(default_factory=dict)  # time, label, bytes, flops, floor
    details: dict[str, Any] = field(default_factory=dict)  # compiled kernels' resources

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ProfileRequest:
        return cls(**{**raw, "shape": shape_tuple(raw["shape"])})


# -- the roles ------------------------------------------------------------------------------
@runtime_checkable
class Role(Protocol):
    name: str  # one of ROLE_NAMES
    implementation: str  # "rules" | "claude" | ...


@runtime_checkable
class Planner(Role, Protocol):
    def plan(self, ctx: TargetContext, request: PlanRequest) -> TuningPlan:
        """The roofline floor of each shape x dtype on ctx.hw, what binds, the knobs to try
        first. Never fails on a valid request (an unknown cost gives an estimate, noted)."""
        ...


@runtime_checkable
class Search(Role, Protocol):
    def candidates(self, ctx: TargetContext, request: SearchRequest) -> UnitCandidates:
        """The configs to judge for one unit, best first, capped at request.max_variants (the
        rest counted in `capped`), with the configs the backend refuses in `rejected`."""
        ...


@runtime_checkable
class KernelWriter(Role, Protocol):
    def write(self, ctx: TargetContext, request: WriteRequest) -> KernelSource:
        """The kernel module (Triton) or source (Metal) for one config.

        Raises:
            PorterError: no kernel can be written for this target (e.g. no Metal template
                covers the op's family), naming why.
        """
        ...


@runtime_checkable
class Benchmark(Role, Protocol):
    def judge(self, ctx: TargetContext, request: JudgeRequest) -> tuple[BenchRow, ...]:
        """Compile, check and time (or project) the kernels of one unit; one row per kernel
        with its verdict (kept | reverted | rejected | skipped) and why. The harness judges;
        the ledger keeps or reverts."""
        ...


@runtime_checkable
class Debugger(Role, Protocol):
    def diagnose(self, ctx: TargetContext, request: DebugRequest) -> Diagnosis:
        """Classify a failure and, where a rule (or a model) knows one, propose a fixed config
        (`fix_config`) or kernel. Never raises for an unknown failure: kind says "unknown"."""
        ...


@runtime_checkable
class Profiler(Role, Protocol):
    def profile(self, ctx: TargetContext, request: ProfileRequest) -> UnitProfile:
        """What the kept kernel uses (registers, spills, shared memory, occupancy), where it
        stands on the roofline, and hardware counters when it was measured and a profiler
        is available (else `counters` None and `counters_note` says why)."""
        ...


@dataclass
class Team:
    """One implementation per role; the loop asks the team, never a concrete class."""

    planner: Planner
    search: Search
    writer: KernelWriter
    benchmark: Benchmark
    debugger: Debugger
    profiler: Profiler

    def members(self) -> dict[str, Role]:
        return {name: getattr(self, name) for name in ROLE_NAMES}

    def describe(self) -> dict[str, str]:
        """{"planner": "rules", ...}: which implementation plays each role."""
        return {name: role.implementation for name, role in self.members().items()}


# -- what a role saw and said ---------------------------------------------------------------
@dataclass(frozen=True)
class Exchange(Artifact):
    """One call of a role: its request and its answer, as plain data (a line of roles.jsonl).

    An LLM implementation adds its transcript (`extra`: prompt file, model, raw response file,
    tokens) so the exchange can be replayed offline.
    """

    role: str
    implementation: str
    target: str
    request: dict[str, Any]
    response: Any
    seconds: float = 0.0
    at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def record_exchange(path: Path, role: Role, target: str, request: Artifact | dict[str, Any],
                    response: Any, seconds: float, extra: dict[str, Any] | None = None,
                    ) -> Exchange:
    """Append one exchange to `path` (JSONL) and return it. `request`/`response` may be given
    as plain dicts already (e.g. with kernel sources replaced by their sha256)."""
    if isinstance(response, Artifact):
        answer: Any = response.to_dict()
    elif isinstance(response, (list, tuple)):
        answer = [r.to_dict() if isinstance(r, Artifact) else r for r in response]
    else:
        answer = response
    ex = Exchange(role=role.name, implementation=role.implementation, target=target,
                  request=request.to_dict() if isinstance(request, Artifact) else request,
                  response=answer, seconds=round(seconds, 4),
                  at=time.time(), extra=dict(extra or {}))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(json.dumps(ex.to_dict(), sort_keys=True, default=str) + "\n")
    return ex


class RecordedCalls:
    """Calls a role's method for one target and records what it saw and said (request and
    answer, kernel sources as their sha256) in `<target>/roles.jsonl`."""

    def __init__(self, ctx: TargetContext) -> None:
        self.ctx, self.path = ctx, ctx.target_dir / "roles.jsonl"

    def __call__(self, role: Role, method: str, request: Any) -> Any:
        started = time.perf_counter()
        answer = getattr(role, method)(self.ctx, request)
        record_exchange(self.path, role, self.ctx.target, _brief(request), _brief(answer),
                        time.perf_counter() - started)
        return answer


def _brief(obj: Any) -> Any:
    """A request or answer for roles.jsonl, kernel sources replaced by their sha256."""
    if isinstance(obj, (list, tuple)):
        return [_brief(o) for o in obj]
    raw = obj.to_dict() if isinstance(obj, Artifact) else obj
    if isinstance(raw, dict):
        return {k: _sha(v) if k == "source" else _brief(v) for k, v in raw.items()}
    return raw


def _sha(text: str) -> str:
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()}"
