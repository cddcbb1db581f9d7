"""The LLM implementations of the roles (implementation "claude") behind porter.roles' interfaces.

Each asks the model one structured question through `LLMClient` (the target's hardware descriptor
as the cached prefix) and answers with the same artifact types as the offline roles. What a
model says that is not in an artifact type (a kernel's source for a proposed variant, a fixed
kernel) is kept in the shared `Session`, keyed by the config the artifact names, for the loop to
judge. The Benchmark role is the harness in isolated children (`porter.llm.judge`), not a model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import torch

from porter.llm.client import LLMClient
from porter.llm.inputs import dtype_name
from porter.llm.prompts import language_of
from porter.roles.artifacts import Diagnosis
from porter.roles.artifacts import FailingInput
from porter.roles.artifacts import KernelResources
from porter.roles.artifacts import KernelSource
from porter.roles.artifacts import ProposedConfig
from porter.roles.artifacts import ShapePlan
from porter.roles.artifacts import TuningPlan
from porter.roles.artifacts import UnitCandidates
from porter.roles.artifacts import UnitProfile
from porter.roles.base import DebugRequest
from porter.roles.base import PlanRequest
from porter.roles.base import ProfileRequest
from porter.roles.base import SearchRequest
from porter.roles.base import TargetContext
from porter.roles.base import WriteRequest

CLAUDE = "claude"


@dataclass
class TargetState:
    """What the loop and the roles know about one target so far (prompt context)."""

    plan: dict[str, Any] | None = None
    best: dict[str, Any] | None = None  # {"source", "verdict", "numbers"}
    profile: dict[str, Any] | None = None
    sources: dict[str, str] = field(default_factory=dict)  # candidate id -> source
    notes: dict[str, str] = field(default_factory=dict)
    search_rounds: int = 0
    last_failure: dict[str, Any] | None = None  # the judge's last rejection (a new round's Writer)


class Session:
    """Shared by the Claude roles of one run: the client, the op's prompt context, per-target
    state."""

    def __init__(self, client: LLMClient, op: dict[str, Any]) -> None:
        self.client = client
        self.op = op
        self._state: dict[str, TargetState] = {}
        self._lock = threading.Lock()

    def state(self, target: str) -> TargetState:
        with self._lock:
            return self._state.setdefault(target, TargetState())

    def ask(self, role: str, ctx: TargetContext, **extra: Any) -> dict[str, Any]:
        st = self.state(ctx.target)
        context = {"op": self.op, "best": st.best, "profile": st.profile, "plan": st.plan,
                   **extra}
        return self.client.ask(role, ctx.hw, **context).data


def feedback(verdict: dict[str, Any], source: str) -> dict[str, Any]:
    """The judge's verdict (`Verdict.to_json()`) as the prompts show it (the message goes
    inside <judge> tags)."""
    shape = verdict.get("shape")
    return {"stage": verdict["stage"], "reason": verdict["reason"],
            "shape": tuple(shape) if shape else None, "dtype": verdict.get("dtype"),
            "message": verdict["message"], "source": source}


def roofline_plans(ctx: TargetContext, shapes: tuple[tuple[int, ...], ...],
                   dtypes: tuple[str, ...]) -> list[dict[str, Any]]:
    """Bytes, FLOPs and the speed-of-light floor of each shape x dtype on ctx.hw (meta tensors:
    nothing is allocated)."""
    from harness.roofline import derive_bytes

    by_name = {dtype_name(d): d for d in ctx.spec.dtypes}
    out = []
    for shape in shapes:
        for dname in dtypes:
            dtype = by_name.get(dname, torch.float32)
            inputs = ctx.spec.make_inputs(tuple(shape), dtype, torch.device("meta"),
                                          torch.Generator().manual_seed(0))
            outputs = ctx.spec.reference(*inputs)
            moved = int(ctx.spec.bytes_moved(inputs, outputs) if ctx.spec.bytes_moved
                        else derive_bytes(inputs, outputs))
            flops = int(ctx.spec.flops(inputs, outputs)) if ctx.spec.flops else 0
            mem_ms = moved / (ctx.hw.peak_bandwidth_gbps * 1e6)
            peak = ctx.hw.dense_tflops.get("fp32" if dname == "fp32" else dname)
            comp_ms = flops / (peak.value * 1e9) if flops and peak is not None else 0.0
            out.append({"shape": tuple(shape), "dtype": dname, "bytes_moved": moved,
                        "flops": flops, "memory_floor_ms": mem_ms, "compute_floor_ms": comp_ms,
                        "floor_ms": max(mem_ms, comp_ms),
                        "bound": "compute" if comp_ms > mem_ms else "memory"})
    return out


class ClaudePlanner:
    name = "planner"
    implementation = CLAUDE

    def __init__(self, session: Session) -> None:
        self.session = session

    def plan(self, ctx: TargetContext, request: PlanRequest) -> TuningPlan:
        """The roofline floors (computed) and the model's plan (where the headroom is)."""
        floors = roofline_plans(ctx, request.shapes, request.dtypes)
        text = "; ".join(f"{'x'.join(map(str, f['shape']))} {f['dtype']}: "
                         f"{f['bytes_moved']} bytes, floor {f['floor_ms'] * 1e3:.2f} us "
                         f"({f['bound']}-bound)" for f in floors)
        data = self.session.ask("planner", ctx, roofline=text)
        self.session.state(ctx.target).plan = data
        return TuningPlan(target=ctx.target, op=request.op, shapes=tuple(
            ShapePlan(shape=f["shape"], dtype=f["dtype"], bytes_moved=f["bytes_moved"],
                      flops=f["flops"], memory_floor_ms=f["memory_floor_ms"],
                      compute_floor_ms=f["compute_floor_ms"], floor_ms=f["floor_ms"],
                      bound=data.get("bound", f["bound"]),
                      knob_order=tuple(data.get("try_first", ())),
                      note=data.get("strategy", ""))
            for f in floors))


class ClaudeWriter:
    name = "writer"
    implementation = CLAUDE

    def __init__(self, session: Session) -> None:
        self.session = session

    def write(self, ctx: TargetContext, request: WriteRequest) -> KernelSource:
        """A kernel for this target; `request.config["candidate"]` (k of n) asks for a
        different approach per parallel candidate."""
        k, n = request.config.get("candidate", 1), request.config.get("of", 1)
        hint = (f"You are writing candidate {k} of {n} written in parallel; take approach "
                f"number {k} of your ideas.") if n > 1 else ""
        plan = dict(self.session.state(ctx.target).plan or {})
        if hint and plan:
            plan["strategy"] = f"{plan.get('strategy', '')} {hint}".strip()
        elif hint:
            plan = {"bound": "memory", "strategy": hint, "try_first": []}
        st = self.session.state(ctx.target)
        # A later round with nothing kept yet shows the Writer the last rejection.
        data = self.session.ask("writer", ctx, plan=plan or None,
                                feedback=st.last_failure if st.best is None else None)
        return KernelSource(target=ctx.target, language=data["language"], source=data["source"],
                            config=dict(request.config), origin="generated",
                            bucket=request.bucket, dtype=request.dtype, note=data["notes"])


class ClaudeDebugger:
    name = "debugger"
    implementation = CLAUDE

    def __init__(self, session: Session) -> None:
        self.session = session

    def diagnose(self, ctx: TargetContext, request: DebugRequest) -> Diagnosis:
        """The model's diagnosis; its fixed kernel waits in the session under the config's
        candidate id + "-fix" for the loop to judge (`fixed` is set once the judge passed it)."""
        # The Claude loop passes the judge's whole verdict; another loop passes what its judge
        # recorded (the ledger's reason, the compiled kernels): the prompt shows either.
        verdict = request.details.get("verdict") or {
            "stage": request.row.tier or "judge", "reason": request.row.verdict,
            "shape": list(request.shape) or None, "dtype": request.row.dtype,
            "message": request.row.reason}
        data = self.session.ask("debugger", ctx, feedback=feedback(verdict, request.kernel.source))
        fix_id = f"{request.kernel.config.get('id', 'c')}-fix"
        st = self.session.state(ctx.target)
        st.sources[fix_id] = data["fixed"]["source"]
        st.notes[fix_id] = data["explanation"]
        shape = verdict.get("shape")
        return Diagnosis(
            target=ctx.target, bucket=request.row.bucket, dtype=request.row.dtype,
            config=dict(request.kernel.config), failure=request.row.reason,
            kind={"compile": "compile error", "crash": "crashed", "timeout": "hung",
                  "cheat": "rejected by a guard", "mismatch": f"failed {verdict['stage']}",
                  }.get(data["cause"], data["cause"]),
            detail=data["explanation"], classification=data["cause"],
            smallest_failing=FailingInput(shape=tuple(shape), dtype=verdict.get("dtype") or "",
                                          stage=verdict["stage"]) if shape else None,
            fix_config={**request.kernel.config, "id": fix_id},
            fix_change=data["fixed"].get("notes", ""))


class ClaudeSearch:
    name = "search"
    implementation = CLAUDE

    def __init__(self, session: Session, n_variants: int = 2) -> None:
        self.session = session
        self.n_variants = n_variants

    def candidates(self, ctx: TargetContext, request: SearchRequest) -> UnitCandidates:
        """Variants of the current best kernel (sources kept in the session by config id)."""
        data = self.session.ask("search", ctx, n_variants=self.n_variants)
        st = self.session.state(ctx.target)
        st.search_rounds += 1
        out = []
        for i, v in enumerate(data["variants"][:self.n_variants], 1):
            vid = f"s{st.search_rounds}v{i}"
            st.sources[vid] = v["source"]
            out.append(ProposedConfig(config={"origin": "llm", "id": vid, "variant": v["name"]},
                                      origin="space", why=f"{v['change']}: {v['why']}"))
        return UnitCandidates(shape=request.shape, dtype=request.dtype, bucket=request.bucket,
                              candidates=tuple(out), space_size=len(data["variants"]))


class ClaudeProfiler:
    """The Profiler's facts come from the compiled kernels and the roofline (no model needed
    to read a register count); the model reads them in the Writer's and Search's prompts."""

    name = "profiler"
    implementation = CLAUDE

    def __init__(self, session: Session) -> None:
        self.session = session

    def profile(self, ctx: TargetContext, request: ProfileRequest) -> UnitProfile:
        lim = ctx.hw.limits
        kernels = tuple(KernelResources(
            kernel=k["kernel"], registers=k.get("registers"), spill_bytes=k.get("spill_bytes"),
            smem_bytes=k.get("smem_bytes"), occupancy=k.get("occupancy"),
            limited_by=k.get("limited_by", "")) for k in request.details.get("kernels", ()))
        numbers = dict(request.numbers)
        time_ms = numbers.get("time_ms")
        if time_ms:
            numbers["pct_of_peak"] = round(100 * numbers["floor_ms"] / time_ms, 1)
        spills = [k.kernel for k in kernels if k.spill_bytes]
        low = [k for k in kernels if k.occupancy is not None and k.occupancy < 0.25]
        if spills:
            bottleneck = (f"register spills in {', '.join(spills)}: smaller blocks or fewer live "
                          "values")
        elif low:
            bottleneck = (f"occupancy {low[0].occupancy:.0%} limited by {low[0].limited_by}: "
                          "fewer registers or shared memory per block")
        elif time_ms:
            bottleneck = (f"{numbers['pct_of_peak']}% of the {numbers.get('bound', 'memory')} "
                          "roofline")
        else:
            bottleneck = ("fits with no spills; not timed here (no such device on this machine): "
                          "the roofline floor is the target to beat")
        report = UnitProfile(
            bucket=request.bucket, dtype=request.dtype, shape=request.shape,
            config=dict(request.config), tier=request.tier, kernels=kernels,
            limits={"registers_per_unit": lim.registers_per_unit.value,
                    "shared_memory_per_block_bytes": lim.shared_memory_per_block_bytes.value,
                    "max_threads_per_block": lim.max_threads_per_block.value,
                    "warp_size": ctx.hw.build.warp_size},
            roofline=numbers, bottleneck=bottleneck,
            counters=None, counters_note=("not measured: no profiler run (the kernel was judged "
                                          "under the interpreter on a CPU)"
                                          if not ctx.measured_here else "no profiler available"))
        st = self.session.state(ctx.target)
        st.profile = {**{k.kernel + " registers": k.registers for k in kernels},
                      **{k.kernel + " spill bytes": k.spill_bytes for k in kernels},
                      **{k.kernel + " shared memory bytes": k.smem_bytes for k in kernels},
                      **{k.kernel + " occupancy": k.occupancy for k in kernels},
                      "roofline floor (us)": round(numbers.get("floor_ms", 0.0) * 1e3, 3),
                      "bottleneck": bottleneck}
        return report


def language(ctx: TargetContext) -> str:
    return language_of(ctx.hw)
