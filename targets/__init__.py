"""Target backends: one per code dialect (Triton for NVIDIA, Triton for AMD, Metal for Apple).

Public API (see docs/INTERNAL_API.md):

    targets.for_device(hw)          -> TargetBackend   (triton-cuda | triton-hip | metal)
    targets.get_backend(name)       -> TargetBackend   (UnknownTargetError lists the names)
    targets.available()             -> list[str]
    targets.occupancy.compute(resources, hw) -> Occupancy
    targets.load_kernel(path, name) -> JITFunction     (imported without the interpreter)
    targets.kernel_ref_for(fn, dtype=..., constexprs=...) -> KernelRef

Importing this package does not import triton; compiling does.
"""

from __future__ import annotations

from targets import occupancy
from targets.base import CompileError
from targets.base import CompileReport
from targets.base import KernelRef
from targets.base import LaunchConfig
from targets.base import Occupancy
from targets.base import ResourceUsage
from targets.base import TargetBackend
from targets.loading import KernelLoadError
from targets.loading import kernel_ref_for
from targets.loading import load_kernel
from targets.registry import UnknownTargetError
from targets.registry import available
from targets.registry import for_device
from targets.registry import get_backend

__all__ = [
    "CompileError",
    "CompileReport",
    "KernelLoadError",
    "KernelRef",
    "LaunchConfig",
    "Occupancy",
    "ResourceUsage",
    "TargetBackend",
    "UnknownTargetError",
    "available",
    "for_device",
    "get_backend",
    "kernel_ref_for",
    "load_kernel",
    "occupancy",
]
