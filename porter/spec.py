"""Compatibility: op specs live in `porter.specs` (`load_spec`, `OpSpec`, ...)."""

from __future__ import annotations

from porter.specs import load_spec  # noqa: F401
from porter.specs.kernels import load_kernel  # noqa: F401
from porter.specs.kernels import resolve_file_attr  # noqa: F401
from porter.specs.module import spec_from_module  # noqa: F401
from porter.specs.opspec import DEFAULT_DTYPES  # noqa: F401
from porter.specs.opspec import OpSpec  # noqa: F401
from porter.specs.opspec import default_interpret_shapes  # noqa: F401
from porter.specs.opspec import import_file  # noqa: F401
from porter.specs.opspec import validate  # noqa: F401
