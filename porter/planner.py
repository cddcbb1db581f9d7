"""The offline Planner: where the headroom is on one device, and which knobs to try first.

For each real (GPU-size) shape of the op it computes the roofline floor from the bytes the op must
move and the FLOPs it must do (`harness.roofline`), says what binds (memory, compute, or launch
overhead when the floor is a few microseconds), and orders the tuning knobs accordingly:

- memory-bound row-wise/elementwise work: cover the row in as few passes as possible, then pick
  num_warps so each thread holds a handful of elements (row width / (warp width x ~8)), then rows
  per program for narrow rows; num_stages matters little.
- compute-bound matmul-like work: tile sizes first, then pipeline stages, then warps.
- AMD: `waves_per_eu` right after warps (it trades registers for occupancy on CDNA).

The plan is data (`runs/<id>/<target>/tuning_plan.json`); `porter.search` orders candidates by it.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING
from typing import Any

import torch

from porter.roles.artifacts import ShapePlan
from porter.roles.artifacts import TuningPlan

if TYPE_CHECKING:
    from harness.problem import Problem
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)

# Below this floor the launch (a few us on every GPU) dominates, and fewer/persistent programs
# matter more than per-element efficiency.
LAUNCH_BOUND_MS = 0.005
# fp32 values per thread the warp heuristic aims for on row-wise work: 16 up to 4096 columns,
# 32 beyond (a sweep of the whole variant space on an H100 found these 3-35% faster than 8;
# bench/NOTES.md). The same rule is `porter.codegen.heuristics.rowwise_default`'s.
ELEMS_PER_THREAD = 16
ELEMS_PER_THREAD_WIDE = 32


def dtype_name(dtype: torch.dtype) -> str:
    """Short name used in plans, ledgers and manifests: torch.bfloat16 -> "bf16"."""
    from harness.roofline import dtype_key

    return dtype_key(dtype)


def op_cost(problem: Problem, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[int, int]:
    """Bytes and FLOPs the op must move/do at `shape`, computed on the meta device (no memory).

    Returns:
        (bytes_moved, flops). FLOPs are 0 when the problem declares none (memory-bound).
    """
    from harness.roofline import derive_bytes

    gen = torch.Generator().manual_seed(0)
    meta = torch.device("meta")
    inputs = problem.make_inputs(tuple(shape), dtype, meta, gen)
    try:
        outputs = problem.reference(*inputs)
    except Exception as exc:  # noqa: BLE001 - a reference that cannot run on meta is common
        # Fall back to "outputs as large as the first tensor input": right for every
        # elementwise and normalization op, and the plan says it is an estimate.
        log.info("%s: reference does not run on the meta device (%s); estimating output bytes",
                 problem.name, exc)
        first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
        outputs = torch.empty_like(first) if first is not None else ()
    bytes_moved = (problem.bytes_moved(inputs, outputs) if problem.bytes_moved
                   else derive_bytes(inputs, outputs))
    flops = problem.flops(inputs, outputs) if problem.flops else 0
    return int(bytes_moved), int(flops)


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def plan(
    problem: Problem,
    hw: HardwareModel,
    shapes: list[tuple[int, ...]],
    dtypes: list[torch.dtype],
    *,
    family: str = "",
) -> TuningPlan:
    """Roofline floor per (shape, dtype) on `hw`, the binding limit, and the knob order.

    Args:
        problem: the op as the judge sees it (reference, input maker, cost functions).
        hw: the target device's hardware model.
        shapes: the real (GPU-size) shapes to plan for.
        dtypes: the dtypes the op runs in.
        family: the codegen family ("rowwise", "elementwise", "matmul", ...), "" if unknown.

    Returns:
        A `TuningPlan`; write it with `.write(run_dir / target / "tuning_plan.json")`.
    """
    from harness.roofline import analyze

    out: list[ShapePlan] = []
    for shape in shapes:
        for dtype in dtypes:
            nbytes, flops = op_cost(problem, shape, dtype)
            # analyze() needs a time; the floors do not depend on it.
            roof = analyze(nbytes, flops, 1.0, hw, dtype)
            bound = roof.bound
            if roof.floor_ms < LAUNCH_BOUND_MS:
                bound = "launch"
            knobs, preferred, note = _knobs(family, bound, shape, hw)
            out.append(
                ShapePlan(
                    shape=tuple(shape),
                    dtype=roof.dtype,
                    bytes_moved=nbytes,
                    flops=flops,
                    memory_floor_ms=roof.memory_floor_ms,
                    compute_floor_ms=roof.compute_floor_ms,
                    floor_ms=roof.floor_ms,
                    bound=bound,
                    knob_order=knobs,
                    preferred=preferred,
                    note=note,
                )
            )
    return TuningPlan(target=hw.name, op=problem.name, shapes=tuple(out))


def _knobs(
    family: str, bound: str, shape: tuple[int, ...], hw: HardwareModel
) -> tuple[tuple[str, ...], dict[str, Any], str]:
    width = int(shape[-1]) if shape else 1
    preferred: dict[str, Any] = {}
    if family == "matmul" or bound == "compute":
        knobs = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps", "GROUP_M"]
        preferred["num_stages"] = 3 if hw.vendor == "nvidia" else 2
        note = "compute-bound: tile sizes and pipelining decide; aim for the matrix units"
    else:
        # BLOCK: the flat elementwise kernel's block (row-wise kernels have BLOCK_N instead)
        knobs = ["BLOCK_N", "BLOCK", "num_warps", "ROWS", "num_stages", "strategy"]
        per_thread = ELEMS_PER_THREAD if _pow2_ceil(width) <= 4096 else ELEMS_PER_THREAD_WIDE
        threads = max(hw.warp_size, _pow2_ceil(width) // per_thread)
        max_warps = max(1, int(hw.limits.max_threads_per_block.value) // hw.warp_size)
        warps = max(1, min(max_warps, threads // hw.warp_size))
        preferred["num_warps"] = _pow2_ceil(warps)
        preferred["BLOCK_N"] = _pow2_ceil(width)
        note = (f"{bound}-bound: one pass over the row ({width} wide), "
                f"~{per_thread} elements per thread -> {preferred['num_warps']} warps")
        if bound == "launch":
            knobs.remove("ROWS")
            knobs.insert(0, "ROWS")
            note += "; floor is a few us, so launch overhead dominates: pack rows per program"
    if hw.vendor == "amd":
        knobs.insert(knobs.index("num_warps") + 1, "waves_per_eu")
    return tuple(knobs), preferred, note
