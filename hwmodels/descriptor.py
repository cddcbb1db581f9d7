"""`descriptor(hw)`: the hardware model as a compact text block for LLM prompts.

It becomes a cached prompt prefix, so it must be byte-stable: the same model gives the same
bytes. Hence no rendering dates, fixed field order, dtypes in `DTYPES` order, features and
measured entries sorted, and numbers formatted by one rule. Sources are left out on purpose
(they are for humans, `porter hw show` prints them); measured numbers say they were measured.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

from hwmodels.model import DTYPES

if TYPE_CHECKING:
    from hwmodels.model import Fact
    from hwmodels.model import HardwareModel

# What each vendor calls the compute unit, the on-chip scratchpad, a warp, a block, the LLC.
_TERMS: dict[str, dict[str, str]] = {
    "nvidia": {
        "unit": "SM",
        "units": "SMs",
        "smem": "shared memory",
        "warp": "warp",
        "warps": "warps",
        "block": "block",
        "blocks": "blocks",
        "llc": "L2",
    },
    "amd": {
        "unit": "CU",
        "units": "CUs",
        "smem": "LDS",
        "warp": "wavefront",
        "warps": "wavefronts",
        "block": "workgroup",
        "blocks": "workgroups",
        "llc": "Infinity Cache (MALL)",
    },
    "apple": {
        "unit": "GPU core",
        "units": "GPU cores",
        "smem": "threadgroup memory",
        "warp": "SIMD-group",
        "warps": "SIMD-groups",
        "block": "threadgroup",
        "blocks": "threadgroups",
        "llc": "system-level cache (SLC)",
    },
}


def format_number(value: float) -> str:
    """One formatting rule: whole numbers without '.0', others to 4 significant decimals."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.4f}".rstrip("0").rstrip(".")


def _tag(fact: Fact) -> str:
    """Marks numbers that are not datasheet numbers, so a prompt reader weighs them accordingly."""
    return "" if fact.kind == "spec" else f" [{fact.kind}]"


def format_bytes(n: float) -> str:
    n = int(n)
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    if n >= 1 << 20:
        return f"{format_number(round(n / (1 << 20), 1))} MiB"
    return f"{n} B"


def descriptor(hw: HardwareModel) -> str:
    """Renders `hw` as a compact, byte-stable text block for agent prompts.

    Args:
        hw: a loaded hardware model.

    Returns:
        Lines of `key: value` text ending in a newline: identity, build target, memory and
        bandwidth (datasheet and newest measured), last-level cache, dense peak TFLOP/s per
        dtype, compute units and clock, per-unit limits, features. Same model -> same bytes.
    """
    t = _TERMS[hw.vendor]
    lim = hw.limits
    lines: list[str] = []
    lines.append(f"device: {hw.name} ({hw.full_name})")
    lines.append(
        f"vendor: {hw.vendor}; architecture: {hw.architecture}; backend: {hw.build.backend} "
        f"(arch {hw.build.arch}); {t['warp']} width: {hw.build.warp_size} threads"
    )

    newest = _newest_measured(hw)
    mem = hw.memory
    bw = (
        f"memory: {format_number(mem.capacity_gb.value)} GB{_tag(mem.capacity_gb)}; "
        f"bandwidth {format_number(hw.peak_bandwidth_gbps)} GB/s "
        f"datasheet{_tag(mem.bandwidth_gbps)}"
    )
    copy = newest.get("copy_bandwidth_gbps")
    if copy is not None:
        pct = 100.0 * copy[0] / hw.peak_bandwidth_gbps
        bw += (
            f", {format_number(copy[0])} GB/s measured device-to-device copy "
            f"({pct:.0f}% of datasheet, {copy[1]})"
        )
    lines.append(bw)
    lines.append(
        f"last-level cache: {format_bytes(hw.llc_bytes)} {t['llc']}"
        f"{_tag(mem.last_level_cache_bytes)}"
    )

    peaks = ", ".join(
        f"{d} {format_number(hw.dense_tflops[d].value)}{_tag(hw.dense_tflops[d])}"
        for d in DTYPES
        if d in hw.dense_tflops
    )
    missing = [d for d in DTYPES if d not in hw.dense_tflops]
    line = f"dense peak TFLOP/s (no sparsity): {peaks}"
    if missing:
        line += f"; no native rate for: {', '.join(missing)}"
    lines.append(line)
    other = sorted((k, v) for k, v in newest.items() if k != "copy_bandwidth_gbps")
    if other:
        lines.append(
            "measured: " + ", ".join(f"{k} {format_number(v)} ({date})" for k, (v, date) in other)
        )

    lines.append(
        f"compute: {format_number(hw.compute_units.value)} {t['units']}{_tag(hw.compute_units)} "
        f"at {format_number(hw.boost_clock_mhz.value)} MHz boost{_tag(hw.boost_clock_mhz)}"
    )
    lines.append(
        f"per {t['unit']}: {t['smem']} {format_bytes(lim.shared_memory_per_unit_bytes.value)} "
        f"(max {format_bytes(lim.shared_memory_per_block_bytes.value)} per {t['block']}); "
        f"{format_number(lim.registers_per_unit.value)} 32-bit registers "
        f"(max {format_number(lim.max_registers_per_thread.value)} per thread); "
        f"max {format_number(lim.max_threads_per_unit.value)} threads, "
        f"{format_number(lim.max_warps_per_unit.value)} {t['warps']}, "
        f"{format_number(lim.max_blocks_per_unit.value)} {t['blocks']}"
    )
    lines.append(f"per {t['block']}: max {format_number(lim.max_threads_per_block.value)} threads")
    lines.append(f"features: {', '.join(sorted(hw.features)) or 'none'}")
    if any(getattr(lim, f.name).kind != "spec" for f in fields(lim)):
        lines.append("note: some per-unit limits are derived approximations, not published numbers")
    return "\n".join(lines) + "\n"


def _newest_measured(hw: HardwareModel) -> dict[str, tuple[float, str]]:
    """name -> (value, date) of the newest entry per name; ties broken by value for stability."""
    out: dict[str, tuple[float, str]] = {}
    for m in sorted(hw.measured, key=lambda m: (m.name, m.date, m.value)):
        out[m.name] = (m.value, m.date)
    return out
