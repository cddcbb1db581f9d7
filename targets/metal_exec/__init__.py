"""Metal kernels executed on the CPU (the *emulated* tier): see executor.py and metal_stdlib.h."""

from __future__ import annotations

from targets.metal_exec.executor import MetalExecError
from targets.metal_exec.executor import MetalProgram
from targets.metal_exec.executor import available
from targets.metal_exec.translate import KernelSig
from targets.metal_exec.translate import TranslateError
from targets.metal_exec.translate import translate

__all__ = ["KernelSig", "MetalExecError", "MetalProgram", "TranslateError", "available",
           "translate"]
