"""The offline Profiler: what the kept kernel of each (bucket, dtype) uses and what binds it.

Static resources come from the compile tier's read-out (registers, spills, shared memory per
block, occupancy and what limits it: `targets/`); the device's limits from its hardware model;
the roofline position from the judge's numbers (bytes, FLOPs, floor, time measured or projected,
% of peak). Hardware counters (Nsight Compute) are taken only where the kernel was measured and
a profiler is on the machine; otherwise `counters` is None and `counters_note` says why.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING
from typing import Any

from porter.roles.artifacts import KernelResources
from porter.roles.artifacts import UnitProfile
from porter.roles.base import RULES

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from porter.roles.base import ProfileRequest
    from porter.roles.base import TargetContext

# below this share of the roofline a memory-bound kernel has headroom worth searching for
HEADROOM_BELOW_PCT = 70.0
# occupancy below this, with a limiter named, is worth a line
LOW_OCCUPANCY = 0.25


def device_limits(hw: HardwareModel) -> dict[str, Any]:
    lim = hw.limits
    return {"registers_per_thread": int(lim.max_registers_per_thread.value),
            "shared_memory_per_block_bytes": int(lim.shared_memory_per_block_bytes.value),
            "max_threads_per_block": int(lim.max_threads_per_block.value),
            "warp_size": hw.warp_size}


def bottleneck(bound: str, pct: float | None, label: str,
               kernels: tuple[KernelResources, ...]) -> str:
    """One line: what binds and where the kernel stands against it."""
    parts = [f"{bound}-bound" if bound else "bound unknown"]
    if pct is not None:
        parts.append(f"{pct:.0f}% of the roofline ({label or 'no time'})")
        if bound == "memory" and pct < HEADROOM_BELOW_PCT:
            parts.append("headroom: fewer passes over memory or wider loads")
    low = [k for k in kernels if k.occupancy is not None and k.occupancy < LOW_OCCUPANCY]
    for k in low:
        parts.append(f"{k.kernel}: occupancy {k.occupancy:.0%}, limited by "
                     f"{k.limited_by.replace('_', ' ') or '?'}")
    spills = [k for k in kernels if k.spill_bytes]
    for k in spills:
        parts.append(f"{k.kernel}: spills {k.spill_bytes} B")
    return "; ".join(parts)


class StaticProfiler:
    name = "profiler"
    implementation = RULES

    def profile(self, ctx: TargetContext, request: ProfileRequest) -> UnitProfile:
        n = request.numbers
        kernels = tuple(
            KernelResources(kernel=str(k.get("kernel", "?")), registers=k.get("registers"),
                            spill_bytes=k.get("spill_bytes"), smem_bytes=k.get("smem_bytes"),
                            occupancy=k.get("occupancy"),
                            blocks_per_unit=k.get("blocks_per_unit"),
                            limited_by=str(k.get("limited_by", "")))
            for k in request.details.get("kernels", ()))
        bound = str(n.get("bound", "") or self._bound(ctx, request))
        roofline = {key: n.get(key) for key in ("bytes_moved", "flops", "floor_ms", "time_ms",
                                                "label", "pct_of_peak")}
        roofline["bound"] = bound
        measured = n.get("label") == "measured"
        if not measured:
            counters_note = "no counters: the kernel was not run on the device (times projected)"
        elif shutil.which("ncu") is None:
            counters_note = "no counters: Nsight Compute (ncu) is not on this machine's PATH"
        else:
            counters_note = "no counters: taking Nsight Compute counters is not wired in yet"
        return UnitProfile(
            bucket=request.bucket, dtype=request.dtype, shape=tuple(request.shape),
            config=dict(request.config), tier=request.tier, kernels=kernels,
            limits=device_limits(ctx.hw), roofline=roofline,
            bottleneck=bottleneck(bound, n.get("pct_of_peak"), str(n.get("label", "")), kernels),
            counters=None, counters_note=counters_note)

    @staticmethod
    def _bound(ctx: TargetContext, request: ProfileRequest) -> str:
        """The plan's view when the judge's numbers carry no bound (a measured kernel)."""
        plan = getattr(ctx, "plan", None)
        sp = plan.for_shape(tuple(request.shape), request.dtype) if plan is not None else None
        return sp.bound if sp is not None else ""
