"""Default launch configs: pure functions (no imports beyond builtins) so that their source is
embedded verbatim into every generated module, which then picks a config for each shape at run
time exactly as the porter would.
"""

from __future__ import annotations


def _next_pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def rowwise_default(n_rows, n_cols, elem_bytes, last_dim, warp_size=32, max_threads=1024):
    """Config for a rowwise kernel: a whole row in registers when it fits, else a looped pass.

    Single pass up to 32768 columns (fp32 values live in registers: with 16 warps that is 64 per
    thread); rows per program grow for short rows so each program moves about 16 KB; num_warps
    is BLOCK/256 clamped to 1..16 (8 elements per thread = one 16-byte vector of a 2-byte dtype).
    A reduction over a non-last dim takes 32-64 rows per program, because the rows are then the
    contiguous direction in memory.
    """
    block_n = _next_pow2(max(n_cols, 1))
    max_warps = max(1, max_threads // warp_size)
    if block_n <= 32768:
        if last_dim:
            rows = max(1, min(_next_pow2(max(1, 8192 // block_n)), 128))
        else:
            rows = 64 if block_n <= 64 else 32 if block_n <= 256 else 16 if block_n <= 1024 else 2
        rows = max(1, min(rows, _next_pow2(max(n_rows, 1))))
        warps = max(1, min(16, max_warps, rows * block_n // 256))
        return {"strategy": "single_pass", "ROWS": rows, "BLOCK_N": block_n,
                "num_warps": warps, "num_stages": 1}
    block = 8192 if elem_bytes <= 2 else 4096
    return {"strategy": "looped", "ROWS": 1, "BLOCK_N": block,
            "num_warps": max(1, min(16, max_warps, block // 256)), "num_stages": 2}


def flat_default(numel, elem_bytes, warp_size=32, max_threads=1024):
    """Config for a flat elementwise kernel: 16 bytes per thread per vector, 4 vectors per thread."""
    vec = max(1, 16 // elem_bytes)
    warps = 8 if numel >= (1 << 20) else 4
    warps = max(1, min(warps, max_threads // warp_size))
    block = min(max(_next_pow2(numel), 128), warp_size * warps * vec * 2)
    return {"strategy": "flat", "BLOCK": block, "num_warps": warps, "num_stages": 1}


def matmul_default(m, n, k, elem_bytes):
    """Config for the tiled matmul: 128x128x64 tiles, 8 warps, 3 stages for big 2-byte GEMMs."""
    if elem_bytes >= 4:
        bm, bn, bk, warps, stages = 64, 64, 32, 4, 3
    elif m >= 512 and n >= 512:
        bm, bn, bk, warps, stages = 128, 128, 64, 8, 3
    else:
        bm, bn, bk, warps, stages = 64, 64, 64, 4, 3
    bm = max(16, min(bm, _next_pow2(m)))
    bn = max(16, min(bn, _next_pow2(n)))
    bk = max(16, min(bk, _next_pow2(k)))
    return {"strategy": "tiled", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
            "num_warps": warps, "num_stages": stages}
