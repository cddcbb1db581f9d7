"""The offline Debugger: why a candidate failed, in the port's failure kinds, and a fix where a rule
knows one.

Rules, in order of what failed:
- a resource overflow (the compile tier's misfit): shared memory / LDS -> one pipeline stage
  fewer, else the largest tile halved; registers or spills -> the largest tile halved, or, for a
  kernel whose block must hold the whole row, more warps to spread it; threads -> half the warps.
  The fix must pass the backend's launch check (`validate_config`).
- a compile error: classified (resources, syntax, undefined name, type, unsupported, frontend,
  backend, other).
- a correctness stage: the stage, the dtype and the smallest input the judge saw fail (the judge
  stops at the first failing trial, so it is the first of that stage's shapes to fail), and what
  a failure at that stage usually means (odd sizes: masking at a partial block; one dtype:
  precision or a dtype-specific path).
- a crash, a hang or a check that timed out: named, with the signal where there is one.
Anything else is kind "unknown": never an exception.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING
from typing import Any

from porter.roles.artifacts import Diagnosis
from porter.roles.artifacts import FailingInput
from porter.roles.base import RULES
from porter.verdicts import reject_kind

if TYPE_CHECKING:
    from porter.roles.base import DebugRequest
    from porter.roles.base import TargetContext

TILE_KNOBS = ("BLOCK_K", "BLOCK_N", "BLOCK_M", "BLOCK_SIZE", "BLOCK")
# strategies whose block must hold the whole row: their BLOCK_N is not a knob a fix may halve
WHOLE_ROW = ("single_pass", "persistent", "two_block")
MIN_TILE = 16

# what a failure at one stage usually means (harness.check's stage names)
STAGE_MEANING = {
    "smoke": "wrong at the first trial: indexing, the math, or the output contract",
    "sweep": "wrong at some shapes: indexing or a size-dependent path",
    "adversarial": "numerics at extreme magnitudes (overflow, cancellation, an unstable formula)",
    "determinism": "different results between runs: a race or atomics",
    "odd_sizes": "wrong only at sizes that are not a multiple of the block: masking of a "
                 "partial block",
    "no_torch_compute": "the candidate calls torch to compute instead of running its kernel",
    "completion": "the kernel leaves part of the output unwritten",
}
COMPILE_CLASSES = (
    ("resources", ("out of resource", "outofresources", "shared memory", "too many registers")),
    ("syntax", ("syntaxerror", "invalid syntax", "unexpected indent")),
    ("undefined name", ("nameerror", "is not defined", "unresolved")),
    ("type", ("typeerror", "incompatible", "type mismatch", "expected type", "cannot cast")),
    ("unsupported", ("not supported", "notimplementederror", "unsupported")),
    ("frontend", ("compilationerror", "at ", "triton.compiler")),
    ("backend", ("passmanager", "mlir", "llvm", "ptxas", "lld")),
)
SIGNALS = {"-11": "SIGSEGV", "-6": "SIGABRT", "-9": "SIGKILL", "-7": "SIGBUS", "-8": "SIGFPE"}


def classify_compile_error(text: str) -> str:
    low = text.lower()
    for name, needles in COMPILE_CLASSES:
        if any(n in low for n in needles):
            return name
    return "other"


def failing_input(text: str) -> FailingInput | None:
    """The input a harness message names: "... (input 'random', shape (1023, 7), dtype fp16,
    seed 0x2)" -> FailingInput((1023, 7), "fp16", stage)."""
    shape = re.search(r"shape \(([\d, ]*)\)", text)
    dtype = re.search(r"dtype (\w+)", text)
    if shape is None or dtype is None:
        return None
    stage = re.match(r"\s*(?:\[[^\]]*\]\s*)?(\w+):", text)
    dims = tuple(int(d) for d in shape.group(1).replace(" ", "").split(",") if d)
    return FailingInput(shape=dims, dtype=dtype.group(1), stage=stage.group(1) if stage else "")


def resource_fix(config: dict[str, Any], what: str, max_warps: int,
                 ) -> tuple[dict[str, Any], str] | None:
    """(fixed config, "knob old -> new") for a kernel that ran out of `what`, or None."""
    whole_row = config.get("strategy") in WHOLE_ROW
    tiles = [k for k in TILE_KNOBS if isinstance(config.get(k), int)
             and config[k] > MIN_TILE and not (whole_row and k in ("BLOCK_N", "BLOCK_TAIL"))]
    warps = config.get("num_warps")

    def change(knob: str, new: int) -> tuple[dict[str, Any], str]:
        return {**config, knob: new}, f"{knob} {config[knob]} -> {new}"

    def halve_tile() -> tuple[dict[str, Any], str] | None:
        if not tiles:
            return None
        knob = max(tiles, key=lambda k: (config[k], -TILE_KNOBS.index(k)))
        return change(knob, config[knob] // 2)

    if what in ("shared memory", "LDS", "resources"):
        if isinstance(config.get("num_stages"), int) and config["num_stages"] > 1:
            return change("num_stages", config["num_stages"] - 1)
        return halve_tile()
    if what in ("registers", "spills"):
        if whole_row and isinstance(warps, int) and warps * 2 <= max_warps:
            return change("num_warps", warps * 2)
        return halve_tile()
    if what == "threads" and isinstance(warps, int) and warps > 1:
        return change("num_warps", warps // 2)
    return None


class RuleDebugger:
    name = "debugger"
    implementation = RULES

    def diagnose(self, ctx: TargetContext, request: DebugRequest) -> Diagnosis:
        row = request.row
        config = dict(request.kernel.config) or json.loads(row.config or "{}")
        kind, detail = reject_kind(row.reason)
        base = dict(target=request.target, bucket=row.bucket, dtype=row.dtype, config=config,
                    failure=row.reason, kind=kind, detail=detail)
        low = row.reason.lower()
        if kind.startswith("misfit"):
            what = kind[kind.find("(") + 1:-1] if "(" in kind else "resources"
            return self._with_fix(ctx, Diagnosis(**base, classification=what), config, what)
        if kind == "compile error":
            cls = classify_compile_error(row.reason)
            diag = Diagnosis(**base, classification=cls)
            return self._with_fix(ctx, diag, config, "resources") if cls == "resources" else diag
        if kind == "no such config":
            return Diagnosis(**base, classification="config outside what the generator builds")
        if kind.startswith("failed "):
            small = failing_input(row.reason)
            stage = kind.split()[1]
            return Diagnosis(**base, classification=STAGE_MEANING.get(stage, stage),
                             smallest_failing=small)
        if kind == "crashed":
            code = re.search(r"exit (-?\d+)", row.reason)
            sig = SIGNALS.get(code.group(1), f"exit {code.group(1)}") if code else ""
            return Diagnosis(**base, classification=f"crash{f' ({sig})' if sig else ''}",
                             smallest_failing=failing_input(row.reason))
        if kind in ("hung", "check timed out"):
            return Diagnosis(**base, classification="hang: a loop that does not end, or a "
                             "kernel far slower than its deadline")
        if "speed of light" in low or "roofline" in low:
            return Diagnosis(**base, classification="timing faster than the device allows: "
                             "the kernel likely skips work")
        return Diagnosis(**{**base, "kind": "unknown"}, classification="no rule matches")

    def _with_fix(self, ctx: TargetContext, diag: Diagnosis, config: dict[str, Any],
                  what: str) -> Diagnosis:
        from porter.search import launch_config

        if config.get("origin") == "existing":
            return diag  # the spec's own kernel: its launcher decides its sizes
        hw = ctx.hw
        max_warps = max(1, int(hw.limits.max_threads_per_block.value) // hw.warp_size)
        fix = resource_fix(config, what, max_warps)
        if fix is None:
            return diag
        fixed, change = fix
        if ctx.backend.validate_config(launch_config(fixed), hw):
            return diag
        return Diagnosis(**{**diag.__dict__, "fix_config": fixed, "fix_change": change})
