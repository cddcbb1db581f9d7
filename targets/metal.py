"""Metal for Apple GPUs: no Metal compiler runs on this machine; the CPU executor checks it.

`compile()` takes Metal Shading Language text (KernelRef.source) and checks what can be checked
without a compiler: the `threadgroup` arrays it declares against the device's threadgroup memory
(32 KB on M-series), and the threads per threadgroup (the source's `constant uint THREADS`, else
config.num_warps simdgroups x 32 lanes, and any `[[max_total_threads_per_threadgroup(N)]]`)
against the maximum. The report's tier is "emitted": nothing was compiled, and registers are
unknown.

Correctness without a Mac: where a C++ compiler is present, `capabilities().cpu_check` is
"emulator": generated source runs on the CPU Metal executor (`targets.metal_exec`; `candidate()`
gives the judge's callable, `harness.emulated.check_source` runs the five stages), and a pass is
the *emulated* tier.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from targets import occupancy as occupancy_mod
from targets.base import Capabilities
from targets.base import CompileError
from targets.base import CompileReport
from targets.base import KernelRef
from targets.base import LaunchConfig
from targets.base import ResourceUsage
from targets.base import TargetBackend
from targets.tiers import Tier
from targets.triton_common import fit_reasons
from targets.triton_common import knob_reasons
from targets.triton_common import launch_reasons

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from targets.metal_exec.candidate import MetalCandidate

_THREADS_RE = re.compile(r"constant\s+uint\s+THREADS\s*=\s*(\d+)\s*;")
NO_COMPILER_NOTE = (
    "Metal: no Metal compiler runs on this machine, so nothing was compiled; "
    "threadgroup memory and threads were checked statically from the source, registers are unknown."
)

# Bytes per element of MSL scalar and vector types (vectors of 3 are padded to 4, as in MSL).
_SCALAR_BYTES = {
    "bool": 1, "char": 1, "uchar": 1, "int8_t": 1, "uint8_t": 1,
    "short": 2, "ushort": 2, "half": 2, "bfloat": 2, "int16_t": 2, "uint16_t": 2,
    "int": 4, "uint": 4, "float": 4, "int32_t": 4, "uint32_t": 4, "atomic_int": 4,
    "atomic_uint": 4, "atomic_float": 4,
    "long": 8, "ulong": 8, "int64_t": 8, "uint64_t": 8,
}
_DECL_RE = re.compile(
    r"\bthreadgroup\s+(?:const\s+)?([A-Za-z_]\w*)\s+([A-Za-z_]\w*)\s*((?:\[[^\]]+\]\s*)+);"
)
_CONST_RE = re.compile(
    r"(?:#define\s+([A-Za-z_]\w*)\s+\(?(\d+)u?\)?|"
    r"constant\s+(?:constexpr\s+)?\w+\s+([A-Za-z_]\w*)\s*=\s*(\d+)u?\s*;|"
    r"constexpr\s+\w+\s+([A-Za-z_]\w*)\s*=\s*(\d+)u?\s*;)"
)
_MAX_THREADS_RE = re.compile(r"max_total_threads_per_threadgroup\s*\(\s*(\d+)\s*\)")


def _type_bytes(type_name: str) -> int | None:
    match = re.fullmatch(r"([a-z_0-9]+?)([234])?", type_name)
    if not match or match.group(1) not in _SCALAR_BYTES:
        return None
    lanes = int(match.group(2) or 1)
    return _SCALAR_BYTES[match.group(1)] * (4 if lanes == 3 else lanes)


def threadgroup_arrays(
    source: str, constexprs: dict[str, object] | None = None
) -> tuple[int, list[str]]:
    """Bytes of threadgroup memory the MSL source declares statically.

    Args:
        source: Metal Shading Language text.
        constexprs: values for names used as array sizes (override `#define`/`constant` ones).

    Returns:
        (total bytes, problems): problems name declarations whose size could not be worked out.
    """
    consts: dict[str, int] = {}
    for match in _CONST_RE.finditer(source):
        name = match.group(1) or match.group(3) or match.group(5)
        value = match.group(2) or match.group(4) or match.group(6)
        consts[name] = int(value)
    for name, value in (constexprs or {}).items():
        if isinstance(value, int):
            consts[name] = value
    total = 0
    problems: list[str] = []
    for type_name, var, dims_text in _DECL_RE.findall(source):
        size = _type_bytes(type_name)
        if size is None:
            problems.append(f"threadgroup {type_name} {var}: unknown element type")
            continue
        count = 1
        for dim in re.findall(r"\[([^\]]+)\]", dims_text):
            dim = dim.strip()
            value = int(dim.rstrip("u")) if dim.rstrip("u").isdigit() else consts.get(dim)
            if value is None:
                value = _const_expr(dim, consts)
            if value is None:
                problems.append(
                    f"threadgroup {type_name} {var}[{dim}]: size {dim!r} is not a known constant"
                )
                count = 0
                break
            count *= value
        total += size * count
    return total, problems


def _const_expr(text: str, consts: dict[str, int]) -> int | None:
    """An array size such as `THREADS / 32` or `TILE * BK` from known integer constants (+ - *
    / and parentheses, C integer division); None for anything else."""
    tokens = re.findall(r"\s*(\d+u?|[A-Za-z_]\w*|[-+*/()])", text)
    if "".join(t.strip() for t in tokens) != re.sub(r"\s+", "", text):
        return None
    expr = []
    for t in tokens:
        t = t.strip()
        if t[0].isdigit():
            expr.append(t.rstrip("u"))
        elif t[0].isalpha() or t[0] == "_":
            if t not in consts:
                return None
            expr.append(str(consts[t]))
        else:
            expr.append("//" if t == "/" else t)
    try:
        value = eval("".join(expr), {"__builtins__": {}}, {})  # noqa: S307 - digits/operators only
    except (SyntaxError, ZeroDivisionError):
        return None
    return value if isinstance(value, int) and value >= 0 else None


class MetalBackend(TargetBackend):
    """Apple GPUs through Metal Shading Language, e.g. m4 (arch "apple-m4", 32-wide simdgroups)."""

    name = "metal"
    known_knobs: frozenset[str] = frozenset()

    def capabilities(self) -> Capabilities:
        """Metal source, emitted and checked statically; checked for correctness on the CPU
        Metal executor ("emulator", tier emulated) where a C++ compiler is present, else not
        checked here (None); a Triton kernel does not run on it."""
        from targets.metal_exec import available

        return Capabilities(language="metal", compiles_here=False,
                            cpu_check="emulator" if available()[0] else None,
                            runs_existing_kernels=False)

    def candidate(self, source: str, hw: HardwareModel | None = None) -> MetalCandidate:
        """Generated Metal `source` as a judge candidate, `candidate(*inputs, out=out)`, run on
        the CPU executor (with `hw`'s threadgroup memory as the limit, 32 KB when None).

        Raises:
            targets.metal_host.DispatchError: the source has no `// porter-dispatch:` line.
            targets.metal_exec.MetalExecError: it does not build for the executor.
            targets.metal_exec.executor.CompilerMissingError: no C++ compiler here.
        """
        from targets.metal_exec.candidate import MetalCandidate

        limit = int(hw.limits.shared_memory_per_block_bytes.value) if hw is not None else 32768
        return MetalCandidate(source, threadgroup_memory_limit=limit)

    def supports(self, hw: HardwareModel) -> bool:
        """True for models built with Metal (hw.build.backend == "metal")."""
        return hw.build.backend == self.name

    def validate_config(self, config: LaunchConfig, hw: HardwareModel) -> list[str]:
        """Reasons `config` cannot run on `hw`; e.g. num_warps=64 on m4 -> threads > 1024."""
        reasons: list[str] = []
        if not self.supports(hw):
            reasons.append(f"{self.name} does not build for {hw.name} (it uses {hw.build.backend})")
        reasons += knob_reasons(config, self.name, self.known_knobs)
        reasons += launch_reasons(config, hw)
        return reasons

    def compile(self, kernel: KernelRef, config: LaunchConfig, hw: HardwareModel) -> CompileReport:
        """Check MSL source statically; tier "emitted", with a note that nothing was compiled.

        Raises:
            CompileError: no source, the device is not Apple, or an unknown knob.
        """
        if not re.search(r"\bkernel\s+void\b", kernel.source):
            what = "a Triton kernel" if kernel.fn is not None else "no Metal source"
            raise CompileError(
                f"metal builds Metal Shading Language source, and {kernel.name!r} is {what}: "
                f"give KernelRef.source with `kernel void {kernel.name}(...)` (Metal is emitted "
                f"by the code generator, not translated from Triton)"
            )
        blocking = []
        if not self.supports(hw):
            blocking.append(
                f"{self.name} does not build for {hw.name} (it uses {hw.build.backend})"
            )
        blocking += knob_reasons(config, self.name, self.known_knobs)
        if blocking:
            raise CompileError(f"cannot emit {kernel.name} for {hw.name}: " + "; ".join(blocking))

        if not re.search(rf"\bkernel\s+void\s+{re.escape(kernel.name)}\s*\(", kernel.source):
            raise CompileError(
                f"metal: no `kernel void {kernel.name}(` in the source given for {kernel.name!r}"
            )
        tg_bytes, problems = threadgroup_arrays(kernel.source, dict(kernel.constexprs))
        declared_threads = _THREADS_RE.search(kernel.source)
        threads = (int(declared_threads.group(1)) if declared_threads
                   else config.num_warps * hw.warp_size)
        declared = _MAX_THREADS_RE.search(kernel.source)
        reasons: list[str] = []
        if declared and threads > int(declared.group(1)):
            reasons.append(
                f"threads {threads} per threadgroup > {declared.group(1)} declared by "
                f"max_total_threads_per_threadgroup in the source"
            )
        resources = ResourceUsage(
            registers_per_thread=None,
            shared_memory_bytes=tg_bytes,
            spill_bytes=0,
            threads_per_block=threads,
            extra={"source": "static scan of MSL threadgroup declarations"},
        )
        occ = occupancy_mod.compute(resources, hw)
        reasons = fit_reasons(resources, occ, hw) + reasons
        reasons += [r for r in launch_reasons(config, hw) if "threads" not in r]
        notes = [NO_COMPILER_NOTE] + [f"unsized: {p}" for p in problems]
        return CompileReport(
            target=hw.name,
            backend=self.name,
            arch=hw.build.arch,
            tier=Tier.EMITTED,
            fits=not reasons,
            reasons=tuple(reasons),
            resources=resources,
            occupancy=occ,
            artifacts={"metal": kernel.source},
            binary=None,
            notes=tuple(notes),
        )


