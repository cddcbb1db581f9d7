"""Triton for NVIDIA (sm_80, sm_90, sm_100): cross-compile to a cubin and read its resources.

Registers, static shared memory and local memory come from `cuobjdump --dump-resource-usage`
on the cubin (the tool ships in triton's `backends/nvidia/bin`). Triton's own shared memory is
dynamic (allocated at launch), so it is not in the cubin's SHARED figure; it comes from the
compiled kernel's metadata (`metadata.shared`) and the two are added.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from targets.base import KernelRef
from targets.base import ResourceUsage
from targets.triton_common import TritonBackend

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)

SUPPORTED_ARCHS = ("80", "90", "100")

_FUNCTION_RE = re.compile(r"^\s*Function\s+(\S+?):\s*$")
_FIELD_RE = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")


def cuobjdump_path() -> str | None:
    """The cuobjdump shipped with triton, else one on PATH, else None."""
    import triton

    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    return shutil.which("cuobjdump")


def parse_resource_usage(text: str, kernel_name: str) -> dict[str, int]:
    """Fields of one function in `cuobjdump --dump-resource-usage` output.

    Args:
        text: the tool's stdout, e.g. " Function k:\\n  REG:48 STACK:0 SHARED:0 LOCAL:0 ...".
        kernel_name: the function to pick; the first function is used if no name matches.

    Returns:
        {"REG": 48, "STACK": 0, "SHARED": 0, "LOCAL": 0, ...}; empty when no function is listed.
    """
    functions: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        match = _FUNCTION_RE.match(line)
        if match:
            current = match.group(1)
            functions[current] = {}
            continue
        if current is not None:
            functions[current].update({k: int(v) for k, v in _FIELD_RE.findall(line)})
    if kernel_name in functions:
        return functions[kernel_name]
    return next(iter(functions.values()), {})


def dump_resource_usage(cubin: bytes, kernel_name: str) -> tuple[dict[str, int], str]:
    """Run cuobjdump on `cubin` (written to a temp file); returns (fields, note-if-unreadable)."""
    tool = cuobjdump_path()
    if tool is None:
        return {}, (
            "cuobjdump not found (neither in triton's bin folder nor on PATH): registers unread"
        )
    with tempfile.TemporaryDirectory(prefix="porter-cubin-") as tmp:
        path = Path(tmp) / f"{kernel_name}.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run(
            [tool, "--dump-resource-usage", str(path)], capture_output=True, text=True, timeout=60
        )
    if proc.returncode != 0:
        return {}, f"cuobjdump failed ({proc.returncode}): {proc.stderr.strip()[:200]}"
    fields = parse_resource_usage(proc.stdout, kernel_name)
    if not fields:
        return {}, "cuobjdump listed no function: registers unread"
    return fields, ""


class TritonCudaBackend(TritonBackend):
    """Triton -> PTX -> cubin for NVIDIA GPUs, e.g. h100 -> GPUTarget("cuda", 90, 32)."""

    name = "triton-cuda"
    vendor = "nvidia"
    # Extra `triton.compile` options this backend passes through (CUDAOptions fields in 3.6+).
    known_knobs = frozenset({"num_ctas", "maxnreg"})

    def options_class(self) -> Any:
        from triton.backends.nvidia.compiler import CUDAOptions

        return CUDAOptions

    def gpu_target(self, hw: HardwareModel) -> Any:
        from triton.backends.compiler import GPUTarget

        arch = hw.build.arch.removeprefix("sm_").rstrip("a")
        if arch not in SUPPORTED_ARCHS:
            from targets.base import CompileError

            raise CompileError(
                f"{self.name}: arch {hw.build.arch!r} of {hw.name} is not one of "
                f"{', '.join('sm_' + a for a in SUPPORTED_ARCHS)}"
            )
        return GPUTarget("cuda", int(arch), hw.warp_size)

    def read_resources(self, compiled: Any, kernel: KernelRef, hw: HardwareModel) -> ResourceUsage:
        meta = compiled.metadata
        fields, problem = dump_resource_usage(compiled.asm["cubin"], meta.name)
        if problem:
            log.warning("%s on %s: %s", kernel.name, hw.name, problem)
        dynamic_shared = int(getattr(meta, "shared", 0) or 0)
        static_shared = fields.get("SHARED", 0)
        # Recent ptxas puts spills in the stack frame (STACK) and leaves LOCAL at 0; older ones
        # report LOCAL. Both are per-thread local memory, so both count as spill bytes.
        spill = fields.get("LOCAL", 0) + fields.get("STACK", 0)
        extra: dict[str, Any] = {
            "static_shared_bytes": static_shared,
            "dynamic_shared_bytes": dynamic_shared,
            "stack_bytes": fields.get("STACK", 0),
            "local_bytes": fields.get("LOCAL", 0),
            "num_warps": int(meta.num_warps),
            "source": "cuobjdump --dump-resource-usage" if fields else "metadata only",
        }
        if problem:
            extra["read_problem"] = problem
        return ResourceUsage(
            registers_per_thread=fields.get("REG"),
            shared_memory_bytes=static_shared + dynamic_shared,
            spill_bytes=spill,
            threads_per_block=int(meta.num_warps) * hw.warp_size,
            extra=extra,
        )

    def artifacts(self, compiled: Any) -> tuple[dict[str, str], bytes | None]:
        return {"ptx": compiled.asm.get("ptx", "")}, compiled.asm.get("cubin")
