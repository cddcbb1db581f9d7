"""Why a kernel cannot build for a target: what in its source (inline PTX or AMDGCN, a vendor's
libdevice, a TMA descriptor) keeps it from compiling there."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

_BLOCKERS = (
    # inline assembly is PTX unless it reads as AMDGCN (v_*/s_* instructions)
    (r"inline_asm_elementwise\(\s*(?:asm\s*=\s*)?[\"'](?!\s*[vs]_)",
     "nvidia", "inline PTX (tl.inline_asm_elementwise)"),
    (r"inline_asm_elementwise\(\s*(?:asm\s*=\s*)?[\"']\s*[vs]_", "amd",
     "inline AMDGCN assembly (tl.inline_asm_elementwise)"),
    (r"triton\.language\.extra\.cuda|extra\.cuda\.libdevice|libdevice\.cuda",
     "nvidia", "CUDA libdevice (triton.language.extra.cuda)"),
    (r"triton\.language\.extra\.hip|extra\.hip\.libdevice", "amd",
     "HIP libdevice (triton.language.extra.hip)"),
    (r"\btl\.extra\.cuda\b|\bconvert_custom_float8_sm\d+", "nvidia", "an NVIDIA-only intrinsic"),
    (r"_experimental_make_tensor_descriptor|tl\.make_tensor_descriptor|experimental_descriptor",
     "nvidia-tma", "a TMA tensor descriptor (sm_90 and later)"),
)


def blocker(source: str, hw: HardwareModel, error: str = "") -> str:
    """One line naming what in `source` keeps it from compiling for `hw`, or "" when nothing
    known does (the compiler's own `error`, shortened, is the fallback when given)."""
    vendor = hw.vendor
    for pattern, needs, what in _BLOCKERS:
        if not re.search(pattern, source, re.DOTALL):
            continue
        if needs == "nvidia" and vendor != "nvidia":
            return f"{what} does not build for {hw.name} ({hw.build.arch})"
        if needs == "amd" and vendor != "amd":
            return f"{what} does not build for {hw.name} ({hw.build.arch})"
        if needs == "nvidia-tma" and "tma" not in hw.features:
            return f"{what}: {hw.name} ({hw.build.arch}) has no TMA"
    if error:
        return " ".join(error.split())[:200]
    return ""
