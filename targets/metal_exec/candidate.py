"""A generated Metal kernel as a judge candidate on the CPU executor.

`MetalCandidate(source)` is `candidate(*inputs, out=out) -> out`: it reads the source's
dispatch line (targets.metal_host), binds the buffers, and launches every kernel on the CPU
executor. `harness.emulated.check_source` judges it (the *emulated* tier).
"""

from __future__ import annotations

from typing import Any

import torch

from targets import metal_host
from targets.metal_exec.executor import MetalProgram

IO_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


class MetalCandidate:
    """Generated Metal source run on the CPU executor, with the judge's calling convention."""

    def __init__(self, source: str, *, threadgroup_memory_limit: int = 32768) -> None:
        self.dispatch = metal_host.parse(source)
        self.program = MetalProgram(source)
        self.limit = threadgroup_memory_limit
        self.__name__ = f"metal:{self.dispatch['kernel']}"

    @property
    def io_dtype(self) -> torch.dtype:
        """The floating dtype the source was generated for."""
        return IO_DTYPES[self.dispatch["io_dtype"]]

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
