"""Compatibility: KernelBench ingestion lives in `porter.specs.kernelbench`."""

from __future__ import annotations

from porter.specs.kernelbench import INTERPRET_ELEMENT_BUDGET  # noqa: F401
from porter.specs.kernelbench import INTERPRET_SIZE_CAP  # noqa: F401
from porter.specs.kernelbench import LEADING_FLOOR  # noqa: F401
from porter.specs.kernelbench import MIN_REDUCIBLE  # noqa: F401
from porter.specs.kernelbench import PARAM_SEED  # noqa: F401
from porter.specs.kernelbench import KernelBenchProblem  # noqa: F401
from porter.specs.kernelbench import kernelbench_problem  # noqa: F401
from porter.specs.kernelbench import load_kernelbench  # noqa: F401
