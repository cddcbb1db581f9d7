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


def rowwise_default(n_rows, n_cols, elem_bytes, last_dim, warp_size=32, max_threads=1024,
                    full_output=True, one_round_variance=False, unmeasured=False, coop=False,
                    cuda=True, sms=132, form=None):
    """Config for a rowwise kernel: a whole row in registers when it fits, else a looped pass.

    From a sweep of the whole variant space on an H100 (bench/sweep.py, bench/NOTES.md):
    - one row per program for rows of 1024+ columns; narrower rows are packed so a program
      covers about 1024 elements;
    - about 16 fp32 values per thread up to 4096 columns and 32 beyond (8192 -> 8 warps,
      32768 -> 32 warps), which beat 8 per thread by 3-35%;
    - single pass up to 32768 columns when the op writes full rows (softmax: the looped form
      reads the row twice), but a looped pass over 8192-column chunks for longer rows and for
      ops that only reduce (cross-entropy: the loop keeps loads in flight; 1.35x faster).
    A reduction over a non-last dim takes 32-64 rows per program, because the rows are then the
    contiguous direction in memory. A kernel with a mean and a variance (one_round_variance:
    layernorm) takes both from one reduction (VAR1) for rows of 16384+ columns, which the port
    chose at width 32768 on the H100 and H200 (bench/NOTES.md items 37, 40); at 4096-5120 it
    was slower on the H200.

    Where nothing was measured (`unmeasured`: the generated launcher called with no config, as
    at a shape no bucket was ported for; the port's search starts from the rules above and
    measures these forms beside them), more rules from sweeps at such shapes (items 57-59):
    - rows wider than 4096 that are not a power of two are held as a head and a tail block
      with about 40 values per thread (5120 = 4096 + 1024 at 4 warps, 20000 in 16384 + 4096
      at 16 warps), where the single pass masks up to half its lanes: the port's pick at 5120
      on the H100 and H200 (items 27, 49), and at 4096 x 20000 bf16 softmax 108.9 us against
      the single pass's 131.4. With a mean and a variance (layernorm) in fp32, rows wider
      than 16384 keep the single pass: two blocks ran 143 us at 4096 x 20000 bf16 (165 with
      VAR1) against the single pass's 147 (item 58; the looped kernel's 120.5 there is the
      16-bit rule below);
    - with a mean and a variance (layernorm), 16-bit rows of 8193-40960 columns that are not
      a power of two (or wider than 32768), 2048 rows or more, take the looped kernel with
      VAR1, in blocks of the largest power of two up to half the row, 16 values a thread: the
      best looped config at 8000 x 9000 (4096 x 8), 4096 x 20000 and 2500 x 24000 (8192 x 16)
      and 3000 x 40000 (16384 x 32), 86-93% of a same-size copy where the one-block configs
      ran 75-84% and split_coop 0.90x eager; 6000 x 11000's best was 4096 x 16 warps; at 1000
      x 12288 (under 8 rows an SM) the looped kernel's best ran 81% of copy, the one-block
      config 83% (items 59-60). The loader's evidence for it: this rule's looped configs,
      which the port times at its buckets where it keeps one-block kernels (item 61);
    - ops that only reduce take 64 values per thread in single-pass rows of 4096-8192
      columns: cross-entropy 10000 x 4096 bf16 at 2 warps 36.2 us, at 8 warps 42.3; and
      looped rows take 4096-column blocks at 4 warps (32 values a thread), within 5% of each
      sweep's best at four shapes, where the 8192 x 8 warps default lost 14%+ at 8000 x 9000
      (its second block 90% masked) and 64 values a thread (2 warps) 6%+ at 2500 x 24000 (too
      few warps for 2500 rows): cross-entropy bf16 at 8000 x 9000 59.9 us (best 56.9), 2500 x
      24000 48.3 (48.2), 4096 x 50257 165.3 (160.7), 1024 x 151936 112.3 (the best; item 59);
    - rows too wide for the single pass, of an op that writes them, where the module has the
      split_coop kernel (`coop`), on an NVIDIA GPU (`cuda`), and its chunks load 16 bytes at a
      time (4-byte elements, or 2-byte rows of a multiple of 8), split over co-resident
      programs, one chunk each in registers (`sms`: the device's SMs, so that a row's chunks
      are all resident), in `coop_tile`'s blocks; at 50,257 wide in bf16 (2-byte loads) it ran
      55%, eager's own kernel 68% (item 58).

    `form` asks for this rule's config of one kernel form ("one-block": the whole row in
    registers, where the rule itself would hold it so; "looped"; "split_coop": a row of two
    chunks or more, with the module's `coop` on an NVIDIA GPU), None where that form has no
    config here: the port times each form's config at its buckets, the loader's evidence of
    that form's speed at shapes no bucket was ported for (porter/packs/unseen.py).
    """
    cfg = _rowwise_tile(n_rows, n_cols, elem_bytes, last_dim, warp_size, max_threads, full_output)
    if form == "one-block" and cfg["strategy"] == "looped":
        return None
    if form == "looped" and cfg["strategy"] != "looped":
        cfg = _rowwise_tile(n_rows, n_cols, elem_bytes, last_dim, warp_size, max_threads,
                            full_output, looped=True)
    max_warps = max(1, max_threads // warp_size)
    block = cfg["BLOCK_N"]
    head, tail = block // 2, _next_pow2(max(n_cols - block // 2, 1))
    coop_cfg = _coop_config(n_cols, elem_bytes, warp_size, sms) \
        if coop and cuda and full_output and last_dim and form in (None, "split_coop") else None
    if form == "split_coop":
        if coop_cfg is None or coop_cfg["SPLIT"] < 2:
            return None
        cfg = coop_cfg
    elif unmeasured and last_dim and full_output and one_round_variance and elem_bytes <= 2 \
            and n_rows >= 2048 and n_cols <= 40960 and (
                (form == "looped" and n_cols > 4096) or (form is None and 8192 < n_cols and (
                    n_cols & (n_cols - 1) or n_cols > 32768))):
        block = _next_pow2(n_cols // 2 + 1) // 2  # the largest power of two <= half the row
        cfg = {"strategy": "looped", "ROWS": 1, "BLOCK_N": block,
               "num_warps": max(1, min(max_warps, block // (16 * warp_size))), "num_stages": 1,
               "VAR1": True}
    elif unmeasured and last_dim and full_output and cfg["strategy"] == "single_pass" \
            and n_cols > 4096 and head + tail < block \
            and not (one_round_variance and n_cols > 16384):
        warps = 1
        while warps * 2 <= min(max_warps, (head + tail) // (40 * warp_size)):
            warps *= 2
        cfg = {"strategy": "two_block", "ROWS": 1, "BLOCK_N": head, "BLOCK_TAIL": tail,
               "num_warps": warps, "num_stages": 1}
    elif unmeasured and coop_cfg and cfg["strategy"] == "looped":
        cfg = coop_cfg
    elif unmeasured and not full_output and last_dim and cfg["strategy"] == "single_pass" \
            and block >= 4096:
        cfg["num_warps"] = max(1, min(max_warps, cfg["ROWS"] * block // (64 * warp_size)))
    elif unmeasured and not full_output and last_dim and cfg["strategy"] == "looped":
        cfg["BLOCK_N"] = min(block, 4096)
        cfg["num_warps"] = max(1, min(max_warps, cfg["BLOCK_N"] // (32 * warp_size)))
    if one_round_variance and n_cols > 8192:
        cfg["VAR1"] = True
    return cfg


def _rowwise_tile(n_rows, n_cols, elem_bytes, last_dim, warp_size, max_threads, full_output,
                  looped=None):
    block_n = _next_pow2(max(n_cols, 1))
    max_warps = max(1, max_threads // warp_size)
    if looped is None:
        looped = block_n > 32768 or (block_n > 8192 and not full_output)
    if not looped:
        if last_dim:
            rows = max(1, min(_next_pow2(max(1, 1024 // block_n)), 128))
        else:
            rows = 64 if block_n <= 64 else 32 if block_n <= 256 else 16 if block_n <= 1024 else 2
        rows = max(1, min(rows, _next_pow2(max(n_rows, 1))))
        per_thread = 16 if block_n <= 4096 else 32
        warps = max(1, min(max_warps, rows * block_n // (per_thread * warp_size)))
        return {"strategy": "single_pass", "ROWS": rows, "BLOCK_N": block_n,
                "num_warps": warps, "num_stages": 1}
    block = min(8192 if elem_bytes <= 2 else 4096, block_n)
    return {"strategy": "looped", "ROWS": 1, "BLOCK_N": block,
            "num_warps": max(1, min(max_warps, block // (32 * warp_size))), "num_stages": 1}


def _coop_config(n_cols, elem_bytes, warp_size, sms):
    """The split_coop config of a row (`coop_tile`'s chunks), or None where its chunks would
    not load 16 bytes at a time (2-byte rows not a multiple of 8), not all be resident at once
    on `sms` SMs, or hold under 4 values a thread."""
    if elem_bytes < 4 and n_cols * elem_bytes % 16:
        return None
    block, warps, per_sm = coop_tile(elem_bytes)
    split = -(-n_cols // block)
    if split > sms * per_sm or block // (warps * warp_size) < 4:
        return None
    return {"strategy": "split_coop", "ROWS": 1, "BLOCK_N": block, "SPLIT": split,
            "num_warps": warps, "num_stages": 1, "PROGRAMS_PER_SM": per_sm}


def looped_lanes(block_n, num_warps, elem_bytes, warp_size=32):
    """Lane positions of an online softmax's per-thread (max, sum): the elements one pass of
    the program's threads loads, 16 bytes each, so that each position belongs to one thread
    and the max and sum over its repetitions stay inside it (the looped kernel's running
    values, bench/NOTES.md item 39; the one-block kernels' pairs, item 47)."""
    return min(block_n, num_warps * warp_size * max(1, 16 // elem_bytes))


def looped_vec(lanes, elem_bytes):
    """Elements of one 16-byte load (at most `lanes`): the innermost dim of the looped VAR1
    pass's view of a chunk, summed inside each thread (bench/NOTES.md item 40)."""
    vec = max(1, 16 // elem_bytes)
    return vec if lanes % vec == 0 else 1


def thread_lanes(lanes, elem_bytes, last_dim, align, data_ptr):
    """(LANES, VEC) of the one-block kernels' per-thread (max, sum) pairs (bench/NOTES.md item
    47). Where rows are 16-byte aligned (the reduced dim last, the kernel's ALIGN, from the
    row's length and strides, `rowwise_align`, a multiple of VEC, and the data 16-byte aligned)
    a thread loads VEC contiguous elements at a time; elsewhere one at a time, so the view
    takes VEC = 1 and LANES = threads, or each thread's max would need shuffles. A wrong guess
    costs speed, not correctness (at width 3000, bf16, the VEC = 1 view of 16-byte loads took
    4 KB of shared memory and 61 registers against 32 in an sm_90 compile)."""
    vec = looped_vec(lanes, elem_bytes)
    aligned = last_dim and align % vec == 0 and data_ptr % 16 == 0
    return (lanes, vec) if aligned else (lanes // vec, 1)


def one_block_sizes(strategy, n_cols):
    """Size knobs of a strategy that holds the whole row, for rows of n_cols: one block of the
    next power of two, or for two_block a head block (the largest power of two below the row)
    and a tail block (the smallest power of two holding the rest): 5120 -> 4096 + 1024."""
    if strategy == "two_block":
        head = max(1, _next_pow2(max(n_cols, 1)) // 2)
        return {"BLOCK_N": head, "BLOCK_TAIL": _next_pow2(max(n_cols - head, 1))}
    return {"BLOCK_N": _next_pow2(max(n_cols, 1))}


def rowwise_full_blocks(strategy, n_rows, n_cols, config):
    """Whether a rowwise config masks no lane: every block of rows and of columns is full.

    The launcher passes it as the kernels' EVEN; its masks are then constant, and the compiler
    drops them with the selects that fill masked lanes (bench/NOTES.md item 37).
    """
    if n_rows % config.get("ROWS", 1):
        return False
    if strategy in ("looped", "looped_l2", "split_row", "split_coop"):  # BLOCK_N-wide blocks
        return n_cols % config["BLOCK_N"] == 0
    tail = config.get("BLOCK_TAIL", 0) if strategy == "two_block" else 0
    return n_cols == config["BLOCK_N"] + tail


def rowwise_align(n_cols, strides, cap=16):
    """The row kernels' ALIGN: the largest power of two, at most `cap`, dividing n_cols and
    every runtime row stride (elements).

    Triton's JIT marks an int argument divisible only when it is a multiple of 16, so at a
    width of 3000 (8 x 375) neither the mask `cols < n_cols` nor a row's start `row * stride`
    is known to be a multiple of 8, and bf16 rows load 2 bytes at a time, not 16 (70% of copy
    bandwidth at 10000x3000, issue 31). The kernels restate both as multiples of ALIGN. The
    cap is in elements, the unit of the ints themselves: 16 is what the JIT would have marked
    anyway, and it covers a 16-byte vector of every dtype down to 1 byte (bf16 needs 8, fp32
    4); a larger ALIGN would only compile more variants. A stride of 0 (a broadcast) divides
    by anything.
    """
    align = cap
    for v in (n_cols, *strides):
        while align > 1 and v % align:
            align //= 2
    return align


def row_shift(rows, align, tensors):
    """The looped kernel's SHIFT: elements of one 16-byte load of the narrowest row tensor
    where rows do not start on a 16-byte boundary, else 1.

    With SHIFT > 1 the kernel's blocks start at the row's first 16-byte boundary at or before
    its first element, so that every block but the row's first and last loads and stores 16
    bytes at a time, unmasked (`rowwise.looped`, `shifted`); at 50,257 wide (bf16) every load
    was 2 bytes. It applies with one row per program (`rows`), where `align`
    (`rowwise_align`) leaves rows unaligned, and only where every tensor taking the shifted
    addresses (`tensors`: the row inputs and outputs) has a unit column stride, 16-byte
    aligned data and a row stride congruent to the first's modulo SHIFT: each row then starts
    equally far (`skew`) past a 16-byte boundary in all of them."""
    if rows != 1 or not tensors:
        return 1
    shift = 16 // min(t.element_size() for t in tensors)
    if shift <= 1 or align % shift == 0:
        return 1
    first = tensors[0].stride(0)
    for t in tensors:
        if t.dim() != 2 or t.stride(1) != 1 or t.data_ptr() % 16 or (t.stride(0) - first) % shift:
            return 1
    return shift


def flat_default(numel, elem_bytes, warp_size=32, max_threads=1024):
    """Config for a flat elementwise kernel: one 16-byte vector per thread.

    From sweeps on an H100 (bench/NOTES.md): with GELU's cheaper 16-bit erf formula, one vector
    per thread (bf16 2048 x 8 warps) beat two (4096 x 8 warps) by 1-3% at 16M-134M elements,
    and by ~1.5x at 6M, where fewer, fatter programs leave SMs idle.
    """
    vec = max(1, 16 // elem_bytes)
    warps = 8 if numel >= (1 << 20) else 4
    warps = max(1, min(warps, max_threads // warp_size))
    block = min(max(_next_pow2(numel), 128), warp_size * warps * vec)
    return {"strategy": "flat", "BLOCK": block, "num_warps": warps, "num_stages": 1}


# Threads of a scan kernel: at 1024 a thread may hold 64 registers (65536 per SM), and the
# generated scans spilled there at 32 values per thread (sm_90, Triton 3.9 cross-compiles); at
# 512 (128 registers) they did not.
SCAN_MAX_THREADS = 512
# The longest row a scan kernel holds in one block: 512 threads x 32 values. A 32768-wide block
# took 109-128 registers at 16 warps where no lane is masked (the reversed scan spilled 16 B),
# and spilled 128-408 B at width 32767.
SCAN_ONE_BLOCK = 16384


def scan_default(n_rows, n_cols, elem_bytes, warp_size=32, max_threads=1024):
    """Config for a scan kernel (porter/codegen/generation/scan.py), values held in fp32
    whatever the I/O dtype (elem_bytes does not change the tile).

    The whole row in one block, short rows packed so a program covers ~1024 elements, at 16
    values per thread up to 4096 columns, and at 32 for a row of exactly 8192 or 16384 (no
    lane masked: 63-80 registers at 16384 in sm_90 cross-compiles; masked lanes load one
    element at a time and take more); every other row in a loop over 4096-column chunks at 16
    values per thread, carrying the running total (98-100 registers at width 32767, 54-63 at
    32768).
    """
    block_n = _next_pow2(max(n_cols, 1))
    max_warps = max(1, min(max_threads, SCAN_MAX_THREADS) // warp_size)
    if block_n <= 4096 or (n_cols == block_n and block_n <= SCAN_ONE_BLOCK):
        rows = max(1, min(_next_pow2(max(1, 1024 // block_n)), 128, _next_pow2(max(n_rows, 1))))
        per_thread = 16 if block_n <= 4096 else 32
        warps = max(1, min(max_warps, rows * block_n // (per_thread * warp_size)))
        return {"strategy": "single_pass", "ROWS": rows, "BLOCK_N": block_n,
                "num_warps": warps, "num_stages": 1}
    return {"strategy": "looped", "ROWS": 1, "BLOCK_N": 4096,
            "num_warps": max(1, min(max_warps, 4096 // (16 * warp_size))), "num_stages": 1}


def fold_config(n_rows, beside_grid=True):
    """Block and warps of the one-program kernel that folds per-row values (a loss's mean).

    beside_grid: the fold was launched early and polls each block of per-row words until the
    main grid has stamped them all, so its time after the grid ends is the last block's poll and
    sum: blocks of up to 2048 rows. 4096-8192 made that last poll 1.5-2% slower on the H200,
    512 and 256 (polls one after another) 2-14% slower (bench/NOTES.md item 41).
    Otherwise (no early launch, or a captured call that waits for the grid) it runs after the
    grid, and a block as wide as the rows (up to 8192) issues all loads at once instead of one
    block after another.
    MAX_SPINS: its polls of one block of words before it gives up and returns NaN, ~4 s (a
    poll is an L2 round trip): far past any main grid, short of a hang.
    """
    block = min(max(_next_pow2(n_rows), 1024), 2048 if beside_grid else 8192)
    return {"BLOCK": block, "num_warps": min(max(block // 512, 4), 16), "MAX_SPINS": 1 << 22}


def tma_transposed(stride_r, stride_c, elem_bytes):
    """How a TMA descriptor can describe a 2-D operand viewed as [R, C] with strides (r, c).

    TMA wants the last (contiguous) dim at stride 1 and every other stride a multiple of 16
    bytes (8 elements of a 2-byte dtype). False: describe it as [R, C] (C contiguous); True:
    describe the transpose [C, R] (R contiguous, e.g. the weight of `x @ w.t()`); None: neither
    layout qualifies.
    """
    if stride_c == 1 and (stride_r * elem_bytes) % 16 == 0:
        return False
    if stride_r == 1 and (stride_c * elem_bytes) % 16 == 0:
        return True
    return None


def matmul_default(m, n, k, elem_bytes, tma=False, tf32x3=False, sms=132):
    """Config for the matmul with a fused epilogue.

    Big 2-byte GEMMs: 128x256x64 tiles, 8 warps, 4 stages (the fastest tiled config in a sweep
    of all 162 on an H100, 1.24x the 128x128x64/3-stage one; bench/NOTES.md). With `tma` (the
    device has TMA) the persistent TMA kernel with the same tiles, whose epilogue runs on two
    N halves (at 128 fp32 accumulator values per thread one pass spills); the generated
    launcher runs the tiled kernel wherever TMA cannot describe the operands.

    fp32 operands run as three tf32 products (`tf32x3`, where the device offers it): 128x128x64
    tiles, 8 warps, 3 stages where they make >= 256 tiles, else 64x64x32 with 4 warps, 4 stages
    (a sweep of 12 tiles on an H100, bench/NOTES.md item 49: 1.8-1.9x cuBLAS's exact fp32 at
    4096^3, 1024x8192x8192 and 16384x4096x2048; 1.0x at 128x4096x4096, where the 128-row tiles
    leave SMs idle). A K long enough for partial accumulators keeps the small tile, unless
    the tiles leave most of the `sms` SMs idle: then split-K (`split_k`) at 128x128x32 tiles, 8
    warps, at least one wave of programs and at most 8192 of K per split (KernelBench 6,
    256 x 256 x 524288: 64 splits 1.36x cuBLAS, 64x64 tiles at 16 splits 1.00x; bench/NOTES.md
    item 55). A K of one block (<= 32) makes
    the output's store the bound: exact fp32 (no tensor cores) at 64x64 tiles, 2 stages
    (KernelBench 9, 32768 x 32 @ 32 x 32768: 1.07x cuBLAS, the tf32x3 default 0.94x).
    """
    if elem_bytes >= 4 and tf32x3 and k <= 32:
        return {"strategy": "tiled", "BLOCK_M": max(16, min(64, _next_pow2(m))),
                "BLOCK_N": max(16, min(64, _next_pow2(n))), "BLOCK_K": max(16, _next_pow2(k)),
                "GROUP_M": 8, "num_warps": 4, "num_stages": 2, "ieee": True, "tf32x3": False}
    split = split_k(m, n, k, 128, 128, 32, sms) if elem_bytes >= 4 and tf32x3 else 1
    if split > 1:
        # splits of <= 8192 of K: one accumulator each (`acc_chunk`), where a second 128x128
        # one spilled on sm_90 (at 6: 64 splits 0.96 ms, 33 with two accumulators 0.90 ms)
        split = min(max(split, -(-k // 8192)), max(1, k // (16 * 32)))
        return {"strategy": "tiled", "BLOCK_M": max(16, min(128, _next_pow2(m))),
                "BLOCK_N": max(16, min(128, _next_pow2(n))), "BLOCK_K": 32, "GROUP_M": 8,
                "num_warps": 8, "num_stages": 3, "SPLIT_K": split}
    if elem_bytes >= 4 and tf32x3 and acc_chunk(k, 32, elem_bytes) == 0:
        if -(-m // 128) * -(-n // 128) >= 256:
            bm, bn, bk, warps, stages = 128, 128, 64, 8, 3
        else:
            bm, bn, bk, warps, stages = 64, 64, 32, 4, 4
    elif elem_bytes >= 4:
        bm, bn, bk, warps, stages = 64, 64, 32, 4, 3
    elif m >= 512 and n >= 512:
        bm, bn, bk, warps, stages = 128, 256, 64, 8, 4
        if tma:
            return {"strategy": "tma_persistent", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk,
                    "GROUP_M": 8, "FLATTEN": True, "SUBTILE": True, "num_warps": warps,
                    "num_stages": stages}
    else:
        bm, bn, bk, warps, stages = 64, 64, 64, 4, 3
    bm = max(16, min(bm, _next_pow2(m)))
    bn = max(16, min(bn, _next_pow2(n)))
    bk = max(16, min(bk, _next_pow2(k)))
    return {"strategy": "tiled", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
            "num_warps": warps, "num_stages": stages}


def b_kmajor_copy(m, stride_bk):
    """Whether a tf32x3 matmul first copies B into a K-contiguous scratch (the launcher's rule
    where the config names no B_KMAJOR).

    The tensor cores take 32-bit operands K-major only (sm_90's wgmma transposes 16-bit ones
    alone), so a row-major B (N contiguous, `stride_bk` != 1) is reordered inside every K step:
    KernelBench's 1, 2, 13 and 16 ran 0.93-0.96x cuBLAS where B^T (17, 18) ran 1.85-1.94x
    (bench/NOTES.md, issue 31). The copy reads and writes B once, 2 * K * N elements: about
    130 / M of the matmul's own time at H100 rates, so it pays where M >= 1024.
    """
    return stride_bk != 1 and m >= 1024


def swap_ab(m, stride_ak, stride_bk):
    """Whether a tf32x3 matmul computes its tiles as C^T = B^T A^T (the launcher's rule where
    the config names no SWAP_AB and does not ask for B_KMAJOR): with A K-contiguous
    (`stride_ak` 1) and B row-major (`stride_bk` != 1), the operand in B's place of the dot is
    then A^T, which is K-major, and no copy of B is made (the tensor cores take 32-bit operands
    K-major only).

    B^T, in A's place, is still reordered: in sm_90 cross-compiles (Triton 3.9, 64x64x32 and
    128x128x32 tiles) its tile went to shared memory by 4-byte cp.async (4 per 16-byte one of
    the unswapped kernel), where unswapped it goes through registers and 4-byte shared stores.
    Not yet measured against either (`b_kmajor_copy`'s copy ran 1.7-1.8x cuBLAS at 4096^3), so
    the rule takes it only where the copy does not pay (M < 1024: KernelBench's 6, 256 rows);
    bench/matmul_knobs.py measures all three.
    """
    return stride_ak == 1 and stride_bk != 1 and not b_kmajor_copy(m, stride_bk)


def pad_k(m, n, k, a_strides, b_strides):
    """Whether a tf32x3 matmul first copies A and B into zero-padded K-major scratches of
    K rounded up to BLOCK_K (the launcher's rule where the config names no PAD_K), so that its
    K loop runs unmasked (EVEN_K) over 16-byte aligned rows.

    `a_strides` / `b_strides`: (row, col) strides of A [M, K] and B [K, N]. Where K is not a
    multiple of 16 (the JIT cannot prove the K mask whole 16-byte vectors) or an operand's
    row stride is not a multiple of 4 elements, every load is one element wide: KernelBench's
    8 (8205 x 2949 x 5921) ran 8.5 ms against cuBLAS's 6.4. The copies read and write A and B
    once: by `b_kmajor_copy`'s model 130 / N (A) + 130 / M (B) of the matmul's time, 3.8% at
    KernelBench's 8; taken where that is at most 5%.
    """
    def aligned(r, c):
        return (c == 1 and r % 4 == 0) or (r == 1 and c % 4 == 0)

    ragged = k % 16 != 0 or not aligned(*a_strides) or not aligned(*b_strides)
    return ragged and k > 0 and m > 0 and n > 0 and 130 / m + 130 / n <= 0.05


def split_k(m, n, k, block_m, block_n, block_k, sms=132):
    """Programs per output tile of the tiled matmul, each summing one range of K into an fp32
    workspace that a second kernel adds up in a fixed order (the launcher's rule where the
    config names no SPLIT_K; `sms`: the device's SMs).

    Where the tiles fill less than half the SMs and K is long (>= 4096 and >= 8 x max(M, N):
    KernelBench's 6 is 256 x 256 x 524288, 4 tiles of 128 x 128 for 132 SMs), one program per
    SM, each keeping at least 16 BLOCK_K steps (at 6: 33 splits 0.90 ms, 66 0.96 ms on an
    H100).
    """
    tiles = -(-m // block_m) * -(-n // block_n)
    if tiles == 0 or 2 * tiles >= sms or k < 4096 or k < 8 * max(m, n):
        return 1
    return max(1, min(sms // tiles, k // (16 * block_k)))


def split_k_range(k, split, block_k):
    """(k_per, splits): the K range each split sums, a multiple of block_k (so a split's range
    is whole K blocks and the JIT sees a multiple of 16), and how many splits that makes
    (at most `split`: none is empty); one split of K rounded up where split is 1."""
    per = -(-max(k, 1) // max(split, 1))
    per = -(-per // block_k) * block_k
    return per, max(1, -(-k // per))


def acc_chunk(k, block_k, elem_bytes):
    """K blocks per partial accumulator of an fp32 matmul's tiled kernel (0: one accumulator;
    always for 16-bit operands, whose kernels stay as they were).

    One fp32 accumulator over a long K rounds every step at the size of the whole sum: at
    K = 524288 of torch.rand operands (sum ~1.3e5, ulp 1/64) the error reached 9e-5 relative
    against fp32's 1e-5 tolerance (a numpy model of the sequential sum; KernelBench's
    6_Matmul_with_large_K_dimension_ failed on the H100 with 8.6e-5), where 64 partial sums
    leave 3e-7. Past K = 8192 (KernelBench's largest K that passed with one accumulator) each
    partial sums ~4096 of K, added into a second accumulator.
    """
    if elem_bytes < 4 or k <= 8192:
        return 0
    return max(1, 4096 // block_k)


def columns_default(n_outer, n_inner, n_cols, elem_bytes, sms=132, warp_size=32,
                    max_threads=1024, min_reduced=128):
    """Config for the column kernel (a reduced dim that is not the last; porter/codegen/rowwise/
    columns.py): BLOCK_I positions of the last dim per program, BLOCK_R steps of the reduced
    dim per loop step; None where the last dim holds less than one 32-byte sector (nothing to
    coalesce: the row kernels' config then).

    Not yet tuned on a device (bench/column_reductions.py measures it). The rules: 4 warps; a
    block of 256 positions of 4-byte elements (512 of 2-byte ones), 1 KB contiguous per step,
    so that each warp's 16-byte loads cover whole 128-byte lines; about 16 values per thread
    and step (BLOCK_R = 16 x threads / BLOCK_I), the loads a thread keeps in flight; narrower
    blocks (more programs) while the grid would give fewer than 8 programs per SM (`sms`),
    down to 256 bytes (two 128-byte lines), so that every SM has loads in flight; and fewer
    warps where the tile holds less than one 16-byte load per thread.

    None also where the reduced dim is short (<= `min_reduced` steps): the row kernel's
    single pass then holds a tile of many positions x the whole reduced dim in registers, its
    loads whole lines along the positions, and reads the input once where the column kernel's
    looped body reads it twice. On an H100 (results/h100-2026-11-26-column-reductions/)
    KernelBench 36_RMSNorm's 64 channels ran at 94.7% of copy in the row kernel (64 positions
    x 64 channels, 8 warps) against 78% in the best column config; a reduced dim of 4096 ran
    30% in rows against 101% in columns. Between the two the crossing was not measured.
    """
    if n_inner * elem_bytes < 32 or n_cols <= min_reduced:
        return None
    vec = max(1, 16 // elem_bytes)
    warps = max(1, min(4, max_threads // warp_size))
    threads = warps * warp_size
    block_i = min(_next_pow2(max(n_inner, 1)), 1024 // elem_bytes)
    while block_i > 256 // elem_bytes and n_outer * -(-n_inner // block_i) < 8 * sms:
        block_i //= 2
    block_r = min(_next_pow2(max(n_cols, 1)), max(1, 16 * threads // block_i))
    while warps > 1 and block_i * block_r < threads * vec:
        warps //= 2
        threads = warps * warp_size
    return {"strategy": "columns", "BLOCK_I": block_i, "BLOCK_R": block_r, "num_warps": warps,
            "num_stages": 1}


def columns_full_blocks(n_inner, n_cols, config):
    """Whether a column config masks no lane: BLOCK_I divides the last dim and BLOCK_R the
    reduced dim (the kernel's EVEN, as `rowwise_full_blocks` is the other kernels')."""
    return n_inner % config["BLOCK_I"] == 0 and n_cols % config["BLOCK_R"] == 0


def split_chunks(n_cols, split, block_n):
    """(columns per chunk, chunks per row) of a split row (strategy split_row): about
    n_cols / split columns a chunk, rounded up to a multiple of block_n (the kernels' loop
    step), so at most `split` chunks; a chunk never starts past the row's end."""
    n = max(n_cols, 1)
    per_chunk = -(-n // split)  # ceil(n / split)
    chunk = -(-per_chunk // block_n) * block_n  # rounded up to a multiple of block_n
    return chunk, -(-n // chunk)


def coop_tile(elem_bytes):
    """(BLOCK_N, warps, programs per SM) of a split_coop chunk: 64 values a thread, 16 warps an
    SM. On the H100 (bench/NOTES.md items 58-59), softmax in fp32 at 8192 x 4 warps x 4 per SM:
    89.6% of copy at 393,216 wide (4096 x 4 x 4: 72%), 90.8% at 151,936, and at 50,257 (odd
    width: its kernel fits 2 per SM, as the launcher then runs it) within 1% of the best; in
    16-bit at 16384 x 8 warps x 2 per SM: 80% at 151,936 and within 2% of the best at 128,256."""
    return (8192, 4, 4) if elem_bytes >= 4 else (16384, 8, 2)


def coop_groups(n_rows, n_chunks, resident):
    """Row groups of a split_coop launch: each group is one program per chunk of the row, and
    every program must be resident at once (`resident`: SMs x PROGRAMS_PER_SM), so
    resident // n_chunks groups, at most one per row; 0 where a row's chunks cannot all be
    resident (the variant space does not offer it; the launcher refuses it)."""
    return min(n_rows, resident // max(n_chunks, 1))
