"""What the judge needs to know about an op, independent of who wrote the candidate.

The porter builds a `Problem` from an op spec (or a KernelBench file) and hands it, with a
candidate callable, to the harness. The harness never imports the porter.

Candidate calling convention (the "out contract"):
    candidate(*inputs, out=out) -> out
`out` is a tensor (or tuple of tensors) the harness allocated and poisoned with NaN (or the
dtype's extreme value for integer outputs); the candidate must write every element and
return it. Inputs come from `make_inputs`, fresh for every trial.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import torch

Shape = tuple[int, ...]
# make_inputs(shape, dtype, device, generator) -> tuple of inputs (tensors or python scalars)
InputMaker = Callable[[Shape, torch.dtype, torch.device, torch.Generator], tuple[Any, ...]]
# adversarial(shape, dtype, device, generator) -> list of (label, inputs) cases
AdversarialMaker = Callable[
    [Shape, torch.dtype, torch.device, torch.Generator], list[tuple[str, tuple[Any, ...]]]
]
# cost(inputs, outputs) -> int (bytes that must move / FLOPs that must be done)
CostFn = Callable[[tuple[Any, ...], Any], int]


@dataclass(frozen=True)
class Problem:
    name: str
    reference: Callable[..., Any]  # plain PyTorch, the meaning; run in float64/float32 by the judge
    make_inputs: InputMaker
    smoke_shape: Shape
    sweep_shapes: Sequence[Shape]  # 8-10 shapes (interpreter-sized variants chosen by the judge)
    odd_shapes: Sequence[Shape] = ()  # non-powers of two and tiny; defaults filled by the judge
    dtypes: Sequence[torch.dtype] = (torch.float32, torch.float16, torch.bfloat16)
    adversarial: AdversarialMaker | None = None
    bytes_moved: CostFn | None = None  # None: derived from inputs + outputs sizes
    flops: CostFn | None = None  # None: treated as memory-bound (0 FLOPs counted)
    # Kernels that use atomics may declare a tolerance for run-to-run differences, with why.
    nondeterminism_tolerance: float = 0.0
    nondeterminism_reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class ProblemError(ValueError):
    """The problem is wrong, not the candidate: its own code raised or gave unusable inputs.

    Raised by the judge (never returned as a verdict) when `make_inputs`, `reference` or
    `adversarial` raises, when the reference returns something other than tensors, or when
    `make_inputs` returns all-zero inputs or a floating-point input whose dtype is not the one
    asked for. The candidate was not judged on that trial; a caller should report a bad spec
    (the porter's CLI: one line, exit 2), not a failed kernel.

    Attributes:
        problem: the problem's name, e.g. "rmsnorm".
        detail: what went wrong, e.g. "reference raised RuntimeError: too many rows".
        stage: the stage that was running ("sweep"), or None outside a stage.
        shape: the trial's shape, e.g. (64, 4096), or None.
        dtype: the trial's dtype name ("float16"), or None.
        seed: the trial's input seed (replays it), or None.
    """

    def __init__(self, problem: str, detail: str, *, stage: str | None = None,
                 shape: Shape | None = None, dtype: str | None = None,
                 seed: int | None = None) -> None:
        self.problem = problem
        self.detail = detail
        self.stage = stage
        self.shape = shape
        self.dtype = dtype
        self.seed = seed
        where = [f"stage {stage}" if stage else "",
                 f"shape {tuple(shape)}" if shape is not None else "",
                 f"dtype {dtype}" if dtype else "",
                 f"seed {seed:#x}" if seed is not None else ""]
        context = ", ".join(w for w in where if w)
        super().__init__(
            f"problem {problem}: {detail}" + (f" ({context})" if context else "")
            + "; the problem's own code is at fault, not the candidate")
