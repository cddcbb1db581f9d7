"""Judging a model-written kernel: the harness, in isolated child processes, with time limits.

A written kernel is untrusted code, so nothing of it runs in the porter's process:

1. the check child (TRITON_INTERPRET=1) imports the module, launches it once at the smoke shape
   with the interpreter's launches recorded (kernel, argument types, constexprs, warps), then
   runs `harness.check` (five stages, guards unchanged) and prints the verdict;
2. the compile child (interpreter off) cross-compiles each recorded kernel for the target's arch
   through the target's backend and reports registers, spills, shared memory and occupancy, or
   the compiler's error. A kernel the interpreter accepts but the compiler refuses (a runtime
   value where a constexpr is needed) fails here.

On the target's own GPU (`on_device=True`) there is one child instead: the check runs natively
at the spec's real shapes, the kernels' resources are read from what Triton compiled, and the
candidate is timed at the first shape (`harness.timing`: flushed caches, rotated inputs) and put
on the roofline (`harness.roofline`). A time below the datasheet's speed of light is no win: the
candidate is rejected as a cheat (work escaping the timed region, a cached result).

Either child crashing (SIGSEGV, an illegal access) or passing its limit ends that candidate with
a verdict naming the signal or the limit and the stage it was in; the run goes on.

Metal sources run on the CPU Metal executor (`porter.emulated`, the emulated tier: the same five
stages, in a child process), bound and launched as their `// porter-dispatch:` line says; where
no C++ compiler is available for the executor they stay at the emitted tier, saying why.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from harness.isolation import innermost_frame
from harness.isolation import run_child

REPO = Path(__file__).resolve().parents[2]
# Interpreted checks of small shapes take seconds; a candidate stuck for this long is hung.
CHECK_LIMIT_S = 240.0
COMPILE_LIMIT_S = 180.0
_TYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
         "int32": "i32", "int64": "i64", "int8": "i8", "uint8": "u8", "bool": "i1"}


@dataclass(frozen=True)
class Verdict:
    """The judge's word on one candidate for one target.

    stage: where it ended: "passed", "compile", "resources", "crash", "timeout", "load", or a
        harness stage (smoke, sweep, adversarial, determinism, odd_sizes).
    reason: a short code: the harness's (mismatch, torch_compute, early_return, stale, ...) or
        compile | resources | crash | timeout | load | ok.
    tier: the highest tier it reached ("interpreted", "compiled", "emitted", "none").
    resources: per compiled kernel: registers, spill_bytes, smem_bytes, occupancy, limited_by.
    """

    passed: bool
    stage: str
    reason: str
    message: str
    tier: str
    caught_by: str | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    resources: list[dict[str, Any]] = field(default_factory=list)
    launches: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    # measured on the device: time_ms, p20_ms, p80_ms, label "measured", pct_of_peak (% of the
    # speed of light), floor_ms, bound; empty when not timed
    numbers: dict[str, Any] = field(default_factory=dict)

    @property
    def cheat(self) -> bool:
        """Rejected by a guard: the output came from torch, early, stale, or faster than light."""
        return self.reason in {"torch_compute", "early_return", "stale", "speed_of_light"}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _env(interpret: bool) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    if interpret:
        env.update(TRITON_INTERPRET="1", TRITON_DEFAULT_FP_FUSION="1")
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def judge(spec_path: str | Path, source: str, hw: Any, folder: str | Path, *,
          language: str, check_limit_s: float = CHECK_LIMIT_S,
          on_device: bool = False) -> Verdict:
    """Judge `source` (a whole module, or Metal source) for target `hw`.

    Args:
        spec_path: the op's spec (or KernelBench) file, loaded again in the child.
        source: the candidate.
        hw: the target's hardware model.
        folder: where the candidate's file is written (the run's `llm/candidates/`).
        language: "triton" | "metal".
        check_limit_s: the check child's time limit in seconds.
        on_device: `hw` is this machine's GPU: check natively and time (see the module doc).

    Returns:
        A `Verdict`; the candidate's own failures never raise.
    """
    from porter.ledger import source_hash

    t0 = time.monotonic()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / f"{source_hash(source)[:16]}.{'metal' if language == 'metal' else 'py'}"
    file.write_text(source)
    if language == "metal":
        return _metal(spec_path, source, hw, t0)

    job = {"spec": str(Path(spec_path).resolve()), "source": str(file.resolve()), "hw": hw.name,
           "device": "cuda" if on_device else "cpu"}
    res = run_child([sys.executable, "-c", "from porter.llm.judge import check_child; "
                     "check_child()"], job=json.dumps(job), limit_s=check_limit_s,
                    env=_env(not on_device))
    final = res.last("verdict")
    launches = res.last("launches") or []
    if final is None:
        last = next((e for e in reversed(res.events) if "stage" in e), {})
        frame = innermost_frame(res.stderr)
        stage = last.get("stage", res.last("phase") or "starting")
        why = "timeout" if res.timed_out else "crash"
        if not res.timed_out and not res.signal_name:
            tail = " | ".join(res.stderr.strip().splitlines()[-3:])
            msg = f"the check's child {res.describe()}: {tail}"
        else:
            where = f"in stage {last['stage']}" if "stage" in last else f"while {stage}"
            msg = (f"the check's child {res.describe()} {where}"
                   + (f", shape {tuple(last['shape'])}, {last['dtype']}" if "shape" in last else "")
                   + (f", at {frame}" if frame else ""))
        return Verdict(False, why, why, msg, "none",
                       shape=tuple(last["shape"]) if "shape" in last else None,
                       dtype=last.get("dtype"), launches=launches,
                       seconds=time.monotonic() - t0)
    if final.get("problem"):
        from porter.errors import PorterError

        raise PorterError(f"{spec_path}: the spec's own code failed while a kernel was judged: "
                          f"{final['problem']}")
    tier = ("measured" if on_device else "interpreted") if final["passed"] else "none"
    verdict = Verdict(bool(final["passed"]), final["stage"], final["reason"], final["message"],
                      tier, caught_by=final.get("caught_by"),
                      shape=tuple(final["shape"]) if final.get("shape") else None,
                      dtype=final.get("dtype"), launches=launches,
                      resources=res.last("compiled_here") or [],
                      numbers=res.last("numbers") or {})
    if launches and not on_device:
        verdict = _compiled(verdict, file, launches, hw)
    # The run folder's path is no part of a verdict (a replay judges in another folder, and the
    # message goes into the Debugger's prompt).
    message = verdict.message.replace(str(folder.resolve()), "<candidates>").replace(
        str(folder), "<candidates>")
    return Verdict(**{**asdict(verdict), "message": message, "seconds": time.monotonic() - t0})


def _metal(spec_path: str | Path, source: str, hw: Any, t0: float) -> Verdict:
    """A Metal source on the CPU executor (emulated tier), or emitted where it cannot run."""
    from porter.emulated import emulated_check
    from targets.metal_exec import available
    from targets.metal_host import parse

    ok, why = available()
    if not ok:
        return Verdict(True, "passed", "ok", f"Metal source emitted, not run: {why}", "emitted",
                       seconds=time.monotonic() - t0)
    dtype = parse(source).get("io_dtype", "fp32")  # checked by the output contract
    res = emulated_check(spec_path, source, hw.name, dtype)
    if res["passed"]:
        return Verdict(True, "passed", "ok", res["message"], "emulated",
                       seconds=time.monotonic() - t0)
    stage, _, rest = res["message"].partition(": ")
    known = stage in ("smoke", "sweep", "adversarial", "determinism", "odd_sizes")
    return Verdict(False, stage if known else "emulate", "failed" if known else "error",
                   res["message"], "none", caught_by=stage if known else None,
                   seconds=time.monotonic() - t0)


def _compiled(verdict: Verdict, file: Path, launches: list[dict[str, Any]], hw: Any) -> Verdict:
    """`verdict` after cross-compiling the recorded launches for `hw` in a child."""
    job = {"source": str(file.resolve()), "hw": hw.name, "launches": launches}
    res = run_child([sys.executable, "-c", "from porter.llm.judge import compile_child; "
                     "compile_child()"], job=json.dumps(job), limit_s=COMPILE_LIMIT_S,
                    env=_env(False))
    out = res.last("compiled")
    # A compile failure is not at a shape: the interpreter's (if it failed too) is left out.
    base = {**asdict(verdict), "shape": None, "dtype": None}
    if out is None:
        return Verdict(**{**base, "passed": False, "stage": "compile", "reason": "crash",
                          "tier": "none", "caught_by": "compile",
                          "message": f"the compile child {res.describe()}: "
                                     + " | ".join(res.stderr.strip().splitlines()[-2:])})
    if out.get("error"):
        return Verdict(**{**base, "passed": False, "stage": "compile", "reason": "compile",
                          "tier": "none", "caught_by": "compile", "message": out["error"]})
    resources = out["kernels"]
    misfit = [k for k in resources if not k["fits"]]
    if misfit:
        return Verdict(**{**base, "passed": False, "stage": "resources", "reason": "resources",
                          "tier": "none", "caught_by": "compile", "resources": resources,
                          "message": "; ".join(f"{k['kernel']} does not fit: "
                                               + "; ".join(k["reasons"]) for k in misfit)})
    return Verdict(**{**asdict(verdict), "resources": resources})


# -- child sides ------------------------------------------------------------------------------
def check_child() -> None:
    """The check child: job on stdin; events (phase, launches, stage trials, verdict) on stdout."""
    from harness.isolation import emit
    from harness.isolation import enable_tracebacks

    enable_tracebacks()
    job = json.loads(sys.stdin.read())
    emit({"phase": "loading the spec"})
    import torch

    import hwmodels
    from harness.check import check
    from porter.codegen.loading import load_generated_module
    from porter.specs import load_spec

    spec = load_spec(job["spec"])
    hw = hwmodels.get(job["hw"])
    native = job.get("device") == "cuda"
    emit({"phase": "importing the candidate"})
    try:
        module = load_generated_module(Path(job["source"]).read_text(), f"llm_{spec.name}",
                                       not native)
    except Exception as exc:  # noqa: BLE001 - the candidate's import failing is its verdict
        emit({"verdict": {"passed": False, "stage": "load", "reason": "load",
                          "message": f"importing the module raised {type(exc).__name__}: {exc}"}})
        return
    launch = getattr(module, "launch", None)
    if not callable(launch):
        emit({"verdict": {"passed": False, "stage": "load", "reason": "contract",
                          "message": "the module has no launch(*inputs, out=None) function"}})
        return
    emit({"phase": "recording the launches at the smoke shape"})
    if native:
        emit({"compiled_here": _compiled_here(spec, launch, hw)})
    else:
        emit({"launches": _record_launches(spec, launch)})

    def candidate(*inputs: Any, out: Any = None) -> Any:
        return launch(*inputs, out=out)

    def progress(stage: str, shape: Any, dtype: torch.dtype) -> None:
        emit({"stage": stage, "shape": list(shape), "dtype": str(dtype).replace("torch.", "")})

    try:
        report = check(spec.problem(interpret=not native), candidate,
                       device="cuda" if native else "cpu", interpret=not native, hw=hw,
                       progress=progress)
    except ValueError as exc:  # ProblemError: the spec's code, not the candidate
        emit({"verdict": {"problem": f"{type(exc).__name__}: {exc}"}})
        return
    failed = report.failed
    if failed is None:
        where = "on the device" if native else "under the Triton interpreter"
        verdict = {"passed": report.passed, "stage": "passed", "reason": "ok",
                   "message": "passed " + ", ".join(s.name for s in report.stages) + " " + where}
        if native:
            emit({"phase": "timing"})
            numbers = _time(spec, launch, hw)
            emit({"numbers": numbers})
            if numbers.get("exceeds_speed_of_light"):
                verdict = {"passed": False, "stage": "timing", "reason": "speed_of_light",
                           "caught_by": "speed_of_light", "message": numbers["message"]}
        emit({"verdict": verdict})
        return
    shape = failed.shapes[-1] if failed.shapes else None
    emit({"verdict": {"passed": False, "stage": failed.name, "reason": failed.reason or "failed",
                      "caught_by": failed.caught_by, "message": failed.message,
                      "shape": list(shape) if shape else None,
                      "dtype": failed.dtypes[-1] if failed.dtypes else None}})


def _record_launches(spec: Any, launch: Any) -> list[dict[str, Any]]:
    """Run `launch` once at the smoke shape, recording each interpreted kernel's first launch
    (argument types, constexprs, num_warps/num_stages) for the compile child. A failure here is
    left for the check to report."""
    import torch
    from triton.runtime.interpreter import InterpretedFunction

    seen: dict[str, dict[str, Any]] = {}
    original = InterpretedFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
        name = self.fn.__name__
        if name not in seen:
            params = inspect_params(self.fn)
            arg_types: dict[str, str] = {}
            constexprs: dict[str, Any] = {}
            bound = dict(zip([p for p, _ in params], args, strict=False))
            bound.update({k: v for k, v in kwargs.items() if k in dict(params)})
            for pname, is_const in params:
                value = bound.get(pname)
                if is_const:
                    if value is not None:
                        constexprs[pname] = value
                elif isinstance(value, torch.Tensor):
                    arg_types[pname] = "*" + _TYPE.get(str(value.dtype).replace("torch.", ""),
                                                       "fp32")
                elif isinstance(value, bool):
                    arg_types[pname] = "i1"
                elif isinstance(value, int):
                    arg_types[pname] = "i64" if abs(value) >= 2**31 else "i32"
                elif isinstance(value, float):
                    arg_types[pname] = "fp32"
            seen[name] = {"kernel": name, "arg_types": arg_types, "constexprs": constexprs,
                          "num_warps": int(kwargs.get("num_warps", 4)),
                          "num_stages": int(kwargs.get("num_stages", 2))}
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    try:
        inputs = spec.make_inputs(tuple(spec.smoke_shape), spec.dtypes[0], torch.device("cpu"),
                                  torch.Generator().manual_seed(0))
        ref = spec.reference(*inputs)
        out = tuple(torch.empty_like(r) for r in ref) if isinstance(ref, tuple) else \
            torch.empty_like(ref)
        launch(*inputs, out=out)
    except Exception:  # noqa: BLE001,S110 - the check that follows reports it with its stage
        pass
    finally:
        InterpretedFunction.run = original
    return list(seen.values())


def _inputs(spec: Any, shape: tuple[int, ...], device: str, seed: int) -> tuple[Any, Any]:
    """Inputs at `shape` in the spec's first dtype, and an output buffer like the reference's."""
    import torch

    inputs = spec.make_inputs(tuple(shape), spec.dtypes[0], torch.device(device),
                              torch.Generator(device=device).manual_seed(seed))
    with torch.no_grad():
        ref = spec.reference(*inputs)
    out = tuple(torch.empty_like(r) for r in ref) if isinstance(ref, tuple) else \
        torch.empty_like(ref)
    return inputs, out


def _compiled_here(spec: Any, launch: Any, hw: Any) -> list[dict[str, Any]]:
    """On the GPU: launch once at the smoke shape and read each compiled kernel's registers,
    spills and shared memory from what Triton built (its `CompiledKernel`)."""
    from triton.runtime.jit import JITFunction

    from targets import occupancy as occ
    from targets.base import ResourceUsage

    seen: dict[str, dict[str, Any]] = {}
    original = JITFunction.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        kernel = original(self, *args, **kwargs)
        name = self.fn.__name__
        if name not in seen and kernel is not None:
            warps = int(kwargs.get("num_warps", 4))
            info: dict[str, Any] = {"kernel": name, "fits": True, "reasons": [],
                                    "tier": "measured", "num_warps": warps,
                                    "registers": getattr(kernel, "n_regs", None),
                                    "spill_bytes": getattr(kernel, "n_spills", None),
                                    "smem_bytes": getattr(getattr(kernel, "metadata", None),
                                                          "shared", None)}
            try:
                usage = ResourceUsage(registers_per_thread=info["registers"],
                                      shared_memory_bytes=int(info["smem_bytes"] or 0),
                                      spill_bytes=int(info["spill_bytes"] or 0),
                                      threads_per_block=warps * hw.build.warp_size)
                o = occ.compute(usage, hw)
                info.update(occupancy=round(o.fraction, 3), limited_by=o.limited_by)
            except Exception:  # noqa: BLE001,S110 - occupancy is a nicety; resources still stand
                pass
            seen[name] = info
        return kernel

    JITFunction.run = run
    try:
        inputs, out = _inputs(spec, tuple(spec.smoke_shape), "cuda", 0)
        launch(*inputs, out=out)
    except Exception:  # noqa: BLE001,S110 - the check that follows reports it with its stage
        pass
    finally:
        JITFunction.run = original
    return list(seen.values())


def _time(spec: Any, launch: Any, hw: Any) -> dict[str, Any]:
    """Time the candidate at the spec's first shape and put it on the roofline."""
    from harness.roofline import analyze
    from harness.roofline import derive_bytes
    from harness.timing import bench

    shape = tuple(spec.shapes[0])
    counter = iter(range(1 << 30))

    def make_args() -> tuple[Any, ...]:
        inputs, out = _inputs(spec, shape, "cuda", next(counter))
        return (*inputs, out)

    def fn(*args: Any) -> Any:
        return launch(*args[:-1], out=args[-1])

    timing = bench(fn, make_args, hw=hw, reps=50, warmup=5)
    args = make_args()
    moved = int(spec.bytes_moved(args[:-1], args[-1]) if spec.bytes_moved
                else derive_bytes(args[:-1], args[-1]))
    flops = int(spec.flops(args[:-1], args[-1])) if spec.flops else 0
    roof = analyze(moved, flops, timing.median_ms, hw, spec.dtypes[0])
    return {"time_ms": timing.median_ms, "p20_ms": timing.p20_ms, "p80_ms": timing.p80_ms,
            "label": "measured", "pct_of_peak": round(roof.pct_of_sol, 1),
            "floor_ms": roof.floor_ms, "bound": roof.bound, "shape": list(shape),
            "exceeds_speed_of_light": bool(roof.exceeds_speed_of_light or timing.async_suspect),
            "message": roof.message + ("; event time far below the wall clock (work escaping "
                                       "the timed stream)" if timing.async_suspect else "")}


def inspect_params(fn: Any) -> list[tuple[str, bool]]:
    """(name, is constexpr) per parameter of a @triton.jit function's Python function."""
    import inspect

    out = []
    for p in inspect.signature(fn).parameters.values():
        ann = p.annotation
        text = ann if isinstance(ann, str) else getattr(ann, "__name__", repr(ann))
        out.append((p.name, "constexpr" in str(text)))
    return out


def compile_child() -> None:
    """The compile child: cross-compiles the recorded launches for the target (no interpreter)."""
    from harness.isolation import emit
    from harness.isolation import enable_tracebacks

    enable_tracebacks()
    job = json.loads(sys.stdin.read())
    import hwmodels
    from targets import for_device
    from targets import kernel_ref_for
    from targets import load_kernel
    from targets.base import CompileError
    from targets.base import LaunchConfig

    hw = hwmodels.get(job["hw"])
    backend = for_device(hw)
    kernels = []
    for item in job["launches"]:
        try:
            fn = load_kernel(job["source"], item["kernel"])
            ptrs = [t for t in item["arg_types"].values() if t.startswith("*")]
            kref = kernel_ref_for(fn, dtype=ptrs[0][1:] if ptrs else "fp32",
                                  constexprs=item["constexprs"], arg_types=item["arg_types"],
                                  name=item["kernel"])
            rep = backend.compile(kref, LaunchConfig(num_warps=item["num_warps"],
                                                     num_stages=item["num_stages"]), hw)
        except CompileError as exc:
            emit({"compiled": {"error": f"{item['kernel']} for {hw.name} ({backend.name}): "
                                        + _first_lines(str(exc))}})
            return
        except Exception as exc:  # noqa: BLE001 - a kernel Triton cannot build is the verdict
            emit({"compiled": {"error": f"{item['kernel']} for {hw.name} ({backend.name}): "
                                        f"{type(exc).__name__}: {_first_lines(str(exc))}"}})
            return
        info: dict[str, Any] = {"kernel": item["kernel"], "fits": rep.fits,
                                "reasons": list(rep.reasons), "tier": rep.tier,
                                "num_warps": item["num_warps"], "constexprs": item["constexprs"]}
        if rep.resources is not None:
            info.update(registers=rep.resources.registers_per_thread,
                        spill_bytes=rep.resources.spill_bytes,
                        smem_bytes=rep.resources.shared_memory_bytes,
                        threads_per_block=rep.resources.threads_per_block)
        if rep.occupancy is not None:
            info.update(occupancy=round(rep.occupancy.fraction, 3),
                        limited_by=rep.occupancy.limited_by)
        kernels.append(info)
    emit({"compiled": {"kernels": kernels}})


def _first_lines(text: str, n: int = 8) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(lines[:n])
