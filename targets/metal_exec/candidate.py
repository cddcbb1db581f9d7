"""A generated Metal kernel as a judge candidate, and the five-stage check on the executor.

`MetalCandidate(source)` is `candidate(*inputs, out=out) -> out`: it reads the source's
dispatch line (targets.metal_host), binds the buffers, and launches every kernel on the CPU
executor. `check_source(problem, source)` runs `harness.check.check` with it at the reduced CPU
sizes: the same fresh inputs, NaN-poisoned outputs, guards and per-dtype tolerances as every
other target. A pass is the *emulated* tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

import torch

from targets import metal_host
from targets.metal_exec.executor import MetalProgram

if TYPE_CHECKING:
    from harness.check import CheckReport
    from harness.problem import Problem
    from hwmodels.model import HardwareModel

_IO = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class MetalCandidate:
    """Generated Metal source run on the CPU executor, with the judge's calling convention."""

    def __init__(self, source: str, *, threadgroup_memory_limit: int = 32768) -> None:
        self.dispatch = metal_host.parse(source)
        self.program = MetalProgram(source)
        self.limit = threadgroup_memory_limit
        self.__name__ = f"metal:{self.dispatch['kernel']}"

    @property
    def launches(self) -> int:
        """Kernel launches so far (a test proves the kernel ran with it)."""
        return self.program.launches

    def __call__(self, *inputs: Any, out: Any) -> Any:
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        for launch in metal_host.plan(self.dispatch, inputs, outs):
            self.program.launch(launch.kernel, launch.args, threadgroups=launch.threadgroups,
                                threads=launch.threads,
                                threadgroup_memory_limit=self.limit)
        return out


def check_source(problem: Problem, source: str, *, hw: HardwareModel | None = None,
                 dtypes: Sequence[torch.dtype] | None = None,
                 stages: Sequence[str] | None = None, store: Any | None = None) -> CheckReport:
    """The five stages for generated Metal `source`, run on the CPU executor.

    Args:
        problem: the op (e.g. `OpSpec.problem(interpret=True)`); its reduced CPU shapes are used.
        source: Metal source with its `// porter-dispatch:` line (porter.codegen.metal).
        hw: the target's model (tolerances; threadgroup memory limit). None: 32 KB, defaults.
        dtypes: dtypes to check; None: the one the source was generated for.
        stages: a subset of the five; None: all.
        store: optional results store.

    Returns:
        The judge's `CheckReport` (passed: the emulated tier).

    Raises:
        targets.metal_exec.executor.MetalExecError: the source does not build for the executor.
        targets.metal_host.DispatchError: the source has no dispatch line.
    """
    from harness.check import check

    limit = int(hw.limits.shared_memory_per_block_bytes.value) if hw is not None else 32768
    cand = MetalCandidate(source, threadgroup_memory_limit=limit)
    if dtypes is None:
        dtypes = (_IO[cand.dispatch["io_dtype"]],)
    return check(problem, cand, device="cpu", interpret=True, hw=hw, stages=stages,
                 dtypes=dtypes, store=store)
