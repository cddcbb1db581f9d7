"""Op specs: a spec module or a KernelBench problem file read into an `OpSpec` (`load_spec`).

`opspec` holds the OpSpec and its validation, `module` spec modules, `kernels` a spec's existing
Triton kernel, `kernelbench` KernelBench problem files."""

from __future__ import annotations

import os
from pathlib import Path

from porter.errors import SpecError
from porter.specs.module import read_source
from porter.specs.module import spec_from_module
from porter.specs.module import top_level_names
from porter.specs.opspec import OpSpec
from porter.specs.opspec import import_file

__all__ = ["OpSpec", "load_spec"]


def load_spec(path: str | os.PathLike[str]) -> OpSpec:
    """Load an op spec module or an unmodified KernelBench problem file.

    Args:
        path: the file (a folder is taken to mean its ``spec.py``).

    Returns:
        The validated `OpSpec` (make_inputs was called once on the smoke shape and bound
        against the reference's signature, and the reference ran on it).

    Raises:
        SpecError: the file is missing, does not import (with the line), lacks a reference or
            inputs, its inputs do not fit the reference, or its kernel path is bad.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "spec.py"
    if not p.is_file():
        raise SpecError(
            p, "no such file", "give the path of a spec.py or a KernelBench problem file"
        )
    source = read_source(p)
    names = top_level_names(p, source)
    if "Model" in names or "get_inputs" in names or "get_init_inputs" in names:
        from porter.specs.kernelbench import load_kernelbench

        return load_kernelbench(p)
    module = import_file(p)
    return spec_from_module(module, p)
