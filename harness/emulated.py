"""The emulated tier: generated Metal source judged by the five stages on the CPU executor.

`check_source(problem, source)` runs `harness.check.check` with the source launched through
`targets.metal_exec` (each threadgroup's threads as fibers, SIMD-groups of 32, threadgroup memory
race- and bounds-checked) at the reduced CPU sizes: the same fresh inputs, NaN-poisoned
outputs, guards and per-dtype tolerances as every other target. A pass is tier "emulated".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from harness.check import CheckReport
from harness.check import check

if TYPE_CHECKING:
    import torch

    from harness.problem import Problem
    from hwmodels.model import HardwareModel


def check_source(problem: Problem, source: str, *, hw: HardwareModel | None = None,
                 dtypes: Sequence[torch.dtype] | None = None,
                 stages: Sequence[str] | None = None, store: Any | None = None) -> CheckReport:
    """The five stages for generated Metal `source`, run on the CPU executor.

    Args:
        problem: the op (e.g. `OpSpec.problem(interpret=True)`); the reduced CPU shapes are used.
        source: Metal source with its `// porter-dispatch:` line (porter.codegen.metal).
        hw: the target's model (tolerances; its threadgroup memory is the executor's limit).
            None: 32 KB and the default tolerances.
        dtypes: dtypes to check; None: the one the source was generated for.
        stages: a subset of the five; None: all.
        store: optional results store (harness.store).

    Returns:
        The judge's `CheckReport`; `passed` means the emulated tier.

    Raises:
        targets.metal_exec.MetalExecError: the source does not build for the executor.
        targets.metal_host.DispatchError: the source has no dispatch line.
        harness.problem.ProblemError: the problem's own code failed.
    """
    from targets.metal_exec.candidate import MetalCandidate

    limit = int(hw.limits.shared_memory_per_block_bytes.value) if hw is not None else 32768
    cand = MetalCandidate(source, threadgroup_memory_limit=limit)
    return check(problem, cand, device="cpu", interpret=True, hw=hw, stages=stages,
                 dtypes=tuple(dtypes) if dtypes is not None else (cand.io_dtype,), store=store)
