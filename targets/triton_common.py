"""Cross-compilation shared by the Triton backends (NVIDIA and AMD): build, check, report.

A backend subclass says how to name the GPU target, which extra knobs it accepts, and how to read
resources out of its artifact; everything else (signature and hints, calling `triton.compile`,
the fit check, occupancy, the report) lives here so both backends reason about fit identically.

Signature convention (KernelRef.signature): Triton type strings ("*fp32", "*bf16", "i32", "fp32"),
optionally with a divisibility hint as in `triton.tools.compile`: "i32:16" means the value is a
multiple of 16. Pointers get the 16-byte alignment hint by default, because that is how the
JIT specializes a torch tensor argument at launch (torch allocations are 16-byte aligned); without
it the compiler cannot vectorize or pipeline loads and the read-out would describe a different
kernel from the one that runs. Write "*fp32:1" to turn the hint off for a pointer.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from dataclasses import replace
from typing import TYPE_CHECKING
from typing import Any

from targets import isolated
from targets import occupancy as occupancy_mod
from targets.base import TRITON_CAPABILITIES
from targets.base import Capabilities
from targets.base import CompileError
from targets.base import CompileReport
from targets.base import KernelRef
from targets.base import LaunchConfig
from targets.base import Occupancy
from targets.base import ResourceUsage
from targets.base import TargetBackend
from targets.tiers import Tier
from targets.triton_source import build_source
from targets.triton_source import source_signature
from targets.triton_source import split_hint  # noqa: F401 - importable from here as before

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

log = logging.getLogger(__name__)


def memory_word(hw: HardwareModel) -> str:
    """What the vendor calls per-block on-chip memory: "LDS", "threadgroup memory", "shared
    memory"."""
    return {"amd": "LDS", "apple": "threadgroup memory"}.get(hw.vendor, "shared memory")


def block_word(hw: HardwareModel) -> str:
    return {"amd": "workgroup", "apple": "threadgroup"}.get(hw.vendor, "block")


def unit_word(hw: HardwareModel) -> str:
    return {"amd": "CU", "apple": "GPU core"}.get(hw.vendor, "SM")


def fit_reasons(resources: ResourceUsage, occ: Occupancy | None, hw: HardwareModel) -> list[str]:
    """Why a kernel with `resources` cannot run on `hw` (empty list: it fits).

    Args:
        resources: what the compiled kernel uses.
        occ: its occupancy on `hw` (None to skip the zero-occupancy check).
        hw: the device's hardware model.

    Returns:
        One sentence per exceeded limit, naming the limit, the device and the excess.
    """
    lim = hw.limits
    mem = memory_word(hw)
    blk = block_word(hw)
    reasons: list[str] = []

    smem_max = int(lim.shared_memory_per_block_bytes.value)
    if resources.shared_memory_bytes > smem_max:
        # On AMD one workgroup may take the whole CU's LDS, so say "per CU" as AMD does.
        whole_unit = smem_max == int(lim.shared_memory_per_unit_bytes.value)
        per = "per CU" if hw.vendor == "amd" and whole_unit else f"max per {blk}"
        reasons.append(
            f"{mem} {resources.shared_memory_bytes} B per {blk} > {smem_max} B {mem} {per} on "
            f"{hw.name} (by {resources.shared_memory_bytes - smem_max} B)"
        )
    regs_max = int(lim.max_registers_per_thread.value)
    regs = resources.registers_per_thread
    if regs is not None and regs > regs_max:
        reasons.append(
            f"registers {regs} per thread > {regs_max} max per thread on {hw.name} "
            f"(by {regs - regs_max})"
        )
    threads_max = int(lim.max_threads_per_block.value)
    if resources.threads_per_block > threads_max:
        reasons.append(
            f"threads {resources.threads_per_block} per {blk} > {threads_max} max per {blk} on "
            f"{hw.name} (by {resources.threads_per_block - threads_max})"
        )
    if occ is not None and occ.blocks_per_unit == 0 and not reasons:
        reasons.append(
            f"zero occupancy: not even one {blk} fits on one {unit_word(hw)} of {hw.name} "
            f"(limited by {occ.limited_by.replace('_', ' ')})"
        )
    return reasons


def launch_reasons(config: LaunchConfig, hw: HardwareModel) -> list[str]:
    """Launch-shape problems visible before compiling (warps, stages), shared by all backends."""
    reasons: list[str] = []
    nw = config.num_warps
    if nw <= 0 or nw & (nw - 1):
        reasons.append(f"num_warps={nw} must be a positive power of two")
    else:
        threads = nw * hw.warp_size
        threads_max = int(hw.limits.max_threads_per_block.value)
        if threads > threads_max:
            unit = {"amd": "wavefronts", "apple": "simdgroups"}.get(hw.vendor, "warps")
            reasons.append(
                f"{nw} {unit} x {hw.warp_size} lanes = {threads} threads > {threads_max} per "
                f"{block_word(hw)} on {hw.name}"
            )
    if config.num_stages < 1:
        reasons.append(f"num_stages={config.num_stages} must be >= 1")
    return reasons


def knob_reasons(config: LaunchConfig, backend: str, known: frozenset[str]) -> list[str]:
    """One reason per `config.extra` knob the backend does not understand."""
    return [
        f"unknown knob {name!r} for {backend} (known: {', '.join(sorted(known)) or 'none'})"
        for name in sorted(config.extra)
        if name not in known
    ]


class TritonBackend(TargetBackend):
    """Common compile path; subclasses name the GPU target and read the artifact."""

    name: str
    vendor: str
    known_knobs: frozenset[str]

    def capabilities(self) -> Capabilities:
        """Triton module source, cross-compiled here, checked under the interpreter; a spec's
        own Triton kernel runs on it; the fp32 dot precisions of the installed Triton's
        options for this backend."""
        try:
            allowed = tuple(self.options_class().allowed_dot_input_precisions)
        except Exception:  # noqa: BLE001 - no Triton, or one without the field: claim none
            allowed = ()
        return replace(TRITON_CAPABILITIES, fp32_dot_precisions=allowed)

    @abstractmethod
    def options_class(self) -> Any:
        """The installed Triton's compile options class of this backend (CUDAOptions, ...)."""

    def supports(self, hw: HardwareModel) -> bool:
        """True when the model says it is built with this backend (hw.build.backend)."""
        return hw.build.backend == self.name

    @abstractmethod
    def gpu_target(self, hw: HardwareModel) -> Any:
        """`triton.backends.compiler.GPUTarget` for `hw`, e.g. GPUTarget("cuda", 90, 32)."""

    @abstractmethod
    def read_resources(self, compiled: Any, kernel: KernelRef, hw: HardwareModel) -> ResourceUsage:
        """Resources read from the compiled artifact (cubin / amdgcn)."""

    @abstractmethod
    def artifacts(self, compiled: Any) -> tuple[dict[str, str], bytes | None]:
        """Text artifacts to keep ("ptx" / "amdgcn") and the binary (cubin / hsaco)."""

    def validate_config(self, config: LaunchConfig, hw: HardwareModel) -> list[str]:
        """Reasons `config` cannot run on `hw`, before compiling (empty list = plausible).

        Example: LaunchConfig(num_warps=32) on mi300x -> ["32 wavefronts x 64 lanes = 2048 threads
        > 1024 per workgroup on mi300x"]; extra={"waves_per_eu": 2} on h100 -> ["unknown knob
        'waves_per_eu' for triton-cuda (known: maxnreg, num_ctas)"].
        """
        reasons: list[str] = []
        if not self.supports(hw):
            reasons.append(f"{self.name} does not build for {hw.name} (it uses {hw.build.backend})")
        reasons += knob_reasons(config, self.name, self.known_knobs)
        reasons += launch_reasons(config, hw)
        return reasons

    def options(self, config: LaunchConfig) -> dict[str, Any]:
        return {"num_warps": config.num_warps, "num_stages": config.num_stages, **config.extra}

    def compile(self, kernel: KernelRef, config: LaunchConfig, hw: HardwareModel) -> CompileReport:
        """Cross-compile `kernel` for `hw` on this machine, read resources, check the fit.

        Returns:
            CompileReport(tier="compiled"), fits=False with reasons when a limit is exceeded
            (e.g. "LDS 98304 B per workgroup > 65536 B LDS per CU on mi300x (by 32768 B)").

        Raises:
            CompileError: the device is not this backend's, a knob is unknown, an argument is
                untyped, or Triton itself rejects the kernel; the message names kernel and target.
        """
        where = f"{kernel.name} for {hw.name} ({self.name} {hw.build.arch})"
        blocking = []
        if not self.supports(hw):
            blocking.append(
                f"{self.name} does not build for {hw.name} (it uses {hw.build.backend})"
            )
        blocking += knob_reasons(config, self.name, self.known_knobs)
        if blocking:
            raise CompileError(f"cannot build {where}: " + "; ".join(blocking))

        compiled = self._compile_artifact(kernel, config, hw, where)

        resources = self.read_resources(compiled, kernel, hw)
        occ = occupancy_mod.compute(resources, hw)
        reasons = fit_reasons(resources, occ, hw)
        # Launch-shape problems the artifact alone does not show (e.g. num_stages < 1).
        for reason in launch_reasons(config, hw):
            if "threads" not in reason:
                reasons.append(reason)
        notes = list(self.notes(resources, hw))
        if isolated.triton_path():
            notes.append(f"compiled with Triton {getattr(compiled, 'triton_version', '?')} from "
                         f"{isolated.TRITON_PATH_ENV}={isolated.triton_path()}")
        if resources.spill_bytes:
            notes.append(f"spills: {resources.spill_bytes} B per thread of local/scratch memory")
        text, binary = self.artifacts(compiled)
        log.debug("compiled %s: %s %s", where, resources, occ)
        return CompileReport(
            target=hw.name,
            backend=self.name,
            arch=hw.build.arch,
            tier=Tier.COMPILED,
            fits=not reasons,
            reasons=tuple(reasons),
            resources=resources,
            occupancy=occ,
            artifacts=text,
            binary=binary,
            notes=tuple(notes),
        )

    def _compile_artifact(
        self, kernel: KernelRef, config: LaunchConfig, hw: HardwareModel, where: str
    ) -> Any:
        """Run `triton.compile` here, or in a clean process when the interpreter is active here
        or PORTER_TRITON_PATH names another Triton.

        Either way the result has the `metadata` / `asm` the read-out code uses, and a compiler
        rejection becomes the same CompileError ("Triton failed to compile WHERE: TYPE: CAUSE").
        """
        if isolated.interpreter_active() or isolated.triton_path():
            # Interpreted triton.language helpers would corrupt this process's compiles, and
            # PORTER_TRITON_PATH names another Triton than this process's; see
            # targets/isolated.py. Check the signature here so those errors stay in-process.
            source_signature(kernel)
            try:
                return isolated.compile_in_child(
                    kernel, self.gpu_target(hw), self.options(config), where
                )
            except isolated.ChildCompileFailed as exc:
                raise CompileError(f"Triton failed to compile {where}: {exc.kind}: {exc}") from exc

        import triton

        source = build_source(kernel)
        try:
            return triton.compile(source, target=self.gpu_target(hw), options=self.options(config))
        except Exception as exc:  # Triton raises many types; all mean "the compiler said no"
            detail = str(exc).strip().splitlines()
            head = detail[-1] if detail else ""
            raise CompileError(
                f"Triton failed to compile {where}: {type(exc).__name__}: {head}"
            ) from exc

    def notes(self, resources: ResourceUsage, hw: HardwareModel) -> list[str]:
        """Backend-specific remarks for the report (none by default)."""
        return []
