"""The Metal variant space: `MetalConfig` (one point of it), the configs offered for an op at its
sizes on a device, and the one tried first."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from porter.codegen.op import GeneratedOp

SIMD_WIDTH = 32


@dataclass(frozen=True)
class MetalConfig:
    """One point of the Metal variant space.

    threads: threads per threadgroup (a multiple of 32); rows: rows per threadgroup, 1 or
    threads // 32 (one SIMD-group per row); vec: vector width of loads and stores (1, 2, 4);
    index_bits: 32 or 64.
    """

    threads: int = 256
    rows: int = 1
    vec: int = 1
    index_bits: int = 64
    tile: int = 32  # matmul: output tile per threadgroup (TILE x TILE)
    bk: int = 16  # matmul: K step staged through threadgroup memory

    @staticmethod
    def of(config: dict[str, Any]) -> MetalConfig:
        threads = int(config.get("threads", 256))
        rows = int(config.get("rows", 1))
        vec = int(config.get("vec", 1))
        bits = 32 if config.get("index", "i64") == "i32" else 64
        if threads % SIMD_WIDTH or not 32 <= threads <= 1024:
            raise ValueError(f"Metal threads per threadgroup must be a multiple of 32 in "
                             f"32..1024, got {threads}")
        if rows not in (1, threads // SIMD_WIDTH):
            raise ValueError(f"Metal rows per threadgroup must be 1 or threads/32 = "
                             f"{threads // SIMD_WIDTH}, got {rows}")
        if vec not in (1, 2, 4):
            raise ValueError(f"Metal vector width must be 1, 2 or 4, got {vec}")
        tile, bk = int(config.get("tile", 32)), int(config.get("bk", 16))
        if tile not in (16, 32, 64) or bk % 8 or not 8 <= bk <= 64:
            raise ValueError(f"Metal matmul tile must be 16, 32 or 64 and bk a multiple of 8 "
                             f"up to 64, got tile={tile} bk={bk}")
        return MetalConfig(threads, rows, vec, bits, tile, bk)


def variant_space(op: GeneratedOp, hw: HardwareModel | None, sizes: dict[str, int],
                  max_elements: int) -> list[dict[str, Any]]:
    """Metal configs for `op` at these problem sizes, pruned by the device model.

    threads per threadgroup: multiples of the SIMD width up to the device's maximum, and enough
    of them that a thread walks at most 16 vectors of a row; rows per
    threadgroup: 1 (threadgroup-wide rows) or one SIMD-group per row, offered only for rows
    no wider than 8 SIMD widths (a SIMD-group walks the row alone); a threadgroup's partials
    (threads/32 floats) must fit the device's threadgroup memory; vec 1, 2 or 4 (used only when
    the host finds the rows aligned); 32-bit indices when every buffer holds < 2^31 elements.
    """
    simd = int(hw.warp_size) if hw is not None else SIMD_WIDTH
    max_threads = int(hw.limits.max_threads_per_block.value) if hw is not None else 1024
    tg_bytes = int(hw.limits.shared_memory_per_block_bytes.value) if hw is not None else 32768
    index = "i32" if max_elements < 2 ** 31 else "i64"
    out: list[dict[str, Any]] = [default_config(op, sizes, max_threads, simd, index)]
    widths = [t for t in (32, 64, 128, 256, 512, 1024) if t <= max_threads and t % simd == 0]
    if op.family == "matmul_epilogue":
        # 4 SIMD-groups (128 threads); A and B slices plus the C tile in threadgroup memory
        if 128 > max_threads:
            return []
        for tile in (32, 64):
            for bk in (8, 16, 32):
                if 4 * (2 * tile * bk + tile * tile) <= tg_bytes:
                    out.append({"strategy": "metal", "threads": 128, "tile": tile, "bk": bk,
                                "index": index})
        return _dedup(out)
    if op.plan is None:
        numel = max(1, sizes.get("numel", 1))
        for t in widths:
            if t < 64 or t > 1024:
                continue
            for vec in (1, 2, 4):
                if numel < t * vec and t > 64:
                    continue  # one partial threadgroup: a smaller one does the same
                out.append({"strategy": "metal", "threads": t, "rows": 1, "vec": vec,
                            "index": index})
        return _dedup(out)
    n_cols = max(1, sizes.get("n_cols", 1))
    for t in widths:
        if (t // simd) * 4 > tg_bytes:
            continue
        for vec in (1, 2, 4):
            if t * vec > 2 * max(n_cols, simd) and t > simd:
                continue  # most threads would have no column
            # at most 16 vectors per thread per pass over a row (or the device's widest
            # threadgroup): a narrower threadgroup leaves a wide row to a few SIMD-groups
            need = 1 << max(0, math.ceil(math.log2(max(1, -(-n_cols // (16 * vec))))))
            if t < min(need, widths[-1]):
                continue
            out.append({"strategy": "metal", "threads": t, "rows": 1, "vec": vec,
                        "index": index})
            if t > simd and n_cols <= 8 * simd * vec:
                out.append({"strategy": "metal", "threads": t, "rows": t // simd, "vec": vec,
                            "index": index})
    return _dedup(out)


def default_config(op: GeneratedOp, sizes: dict[str, int], max_threads: int = 1024,
                   simd: int = SIMD_WIDTH, index: str = "i64") -> dict[str, Any]:
    """The config tried first (the projection cannot tell threadgroup shapes apart): 4-wide
    vectors; rows up to 8 SIMD widths one SIMD-group each, 8 rows per threadgroup; wider rows
    one threadgroup each, about 16 columns per thread, 64..max threads."""
    if op.family == "matmul_epilogue":
        big = min(sizes.get("M", 1), sizes.get("N", 1)) >= 256
        return {"strategy": "metal", "threads": 128, "tile": 64 if big else 32, "bk": 16,
                "index": index}
    if op.plan is None:
        return {"strategy": "metal", "threads": min(256, max_threads), "rows": 1, "vec": 4,
                "index": index}
    n_cols = max(1, sizes.get("n_cols", 1))
    if n_cols <= 8 * simd:
        t = min(8 * simd, max_threads)
        return {"strategy": "metal", "threads": t, "rows": t // simd, "vec": 4 if n_cols >= 128
                else 1, "index": index}
    t = 64
    while t < max_threads and t * 16 < n_cols:
        t *= 2
    return {"strategy": "metal", "threads": t, "rows": 1, "vec": 4, "index": index}


def _dedup(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for c in configs:
        key = tuple(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
