"""Variant spaces per target, pruned by the hardware model before anything is compiled.

Pruning rules (each names the limit it enforces):
- threads per block: num_warps * warp width <= max_threads_per_block (AMD wavefronts are 64
  wide, so num_warps <= 16 there; Apple threadgroups hold 1024 threads).
- registers: a single-pass row keeps ROWS*BLOCK_N fp32 values live; more than 128 per thread
  spills (255 registers, a few live temporaries each); 32 for argmax / argmin, whose values
  each keep an index beside them (sm_90, 32 warps: 32 x 4096 spilled 872 B, 16 x 4096 112 B,
  8 x 4096 none).
- persistent: the single-pass tile in a grid of PROGRAMS_PER_SM programs per SM, each loading
  what needs no row (weights) once and looping over row blocks with 3 or 4 stages so the next
  blocks' loads are in flight (2 stages measured slower than 3 wherever 3 fit, bench/NOTES.md
  item 16); whether the stages' shared memory fits
  is left to the compile check (which loads Triton pipelines, and so how much shared memory a
  stage takes, is the compiler's choice).
- two_block: where the row is not a power of two wide and a head and a tail block hold it
  in fewer lanes than one block (5120 = 4096 + 1024, not 8192), the single pass over those two
  blocks, beside each single-pass tile (same rows and warps).
- HOIST: single-pass configs of a kernel with loads that need no reduction (weights, biases,
  targets) come also with those loads first; which order wins depends on the shape.
- LANES: looped configs of an online softmax (softmax, cross-entropy) or a one-pass variance
  (layernorm) name the lane positions of their running values: threads x the elements of one
  16-byte load, with the target's warp width (64 on AMD), so that each position stays in one
  thread.
- VAR1: configs of a kernel with a mean and a variance (layernorm) come also with both from
  one reduction of shifted sums (looped: one pass, the sums kept per thread); faster at width
  32768, slower at 4096-5120 on the H200 (bench/NOTES.md items 36-37, 40).
- split_row, looped_l2 and split_coop (long rows: too few rows to fill the device, rows whose
  second read should hit L2, or rows read once by co-resident programs): offered, with their
  knobs, by `long_rows.configs` (Triton backends; split_coop on CUDA only).
- looped configs have one stage: at num_stages 2 their plain range loops compile to the same
  kernel (bench/NOTES.md item 39).
- waste: fewer elements than threads leaves lanes idle (dropped unless it is the only option).
- shared memory: matmul stages*(BM*BK + BK*BN)*bytes <= shared memory per block (64 KB LDS on
  MI300X, 32 KB threadgroup memory on Apple).
- columns: where the reduced dim is not the last (the op has a column kernel) and the backend
  runs Triton source (its capabilities' language; the Metal generator has none), BLOCK_I
  positions of the last dim (32 up to its next power of two) x BLOCK_R steps of the reduced dim
  (up to its next power of two) x warps, with every thread holding at least one 16-byte load
  of the tile and at most a quarter of the device's registers per thread in tile values (the
  per-position accumulators and the loaded tile, a few live copies each).
- AMD-only knobs (waves_per_eu, matrix_instr_nonkdim) appear only for the triton-hip backend.
- fp32 matmuls: every config keeps its fp32 operands off plain tf32 (a 10-bit mantissa fails
  an fp32 judge): IEEE (exact fp32 on the SIMT units) or, where the backend's Triton takes it
  (its capabilities' fp32_dot_precisions) and the device has tf32 tensor cores (a tf32 rate in
  its hardware model), TF32X3 (three tf32 products, hi*hi + hi*lo + lo*hi: close to fp32's
  accuracy on the tensor cores, 495 against 67 TFLOP/s of exact fp32 on an H100), offered first
  and the default; `tf32x3_offered`.
- split-K: tiled matmul configs whose tiles fill less than half the SMs over a long K
  (heuristics.split_k, with the device's compute units) come with the rule's SPLIT_K, half it,
  and 1; the default names the rule's where it splits.
- fp32 matmuls over a long K (heuristics.acc_chunk: partial accumulators) keep tiles of at most
  32 accumulator values per thread and BLOCK_K 32: the partials' sum is a second tile of
  registers.
- TMA: "tma_persistent" matmul configs (host TMA descriptors, a persistent grid) are offered
  only when hw.has("tma") (h100, h200, b200; never a100 or AMD), on the triton-cuda backend, for
  2-byte dtypes, and when both operands' strides suit TMA (one unit stride, the other a
  multiple of 16 bytes). They also keep the fp32 accumulator at <= 128 registers per thread
  (BM*BN / threads), which drops 128x256 tiles with 4 warps; at exactly 128 the epilogue runs
  on two N halves (SUBTILE), which is what kept it from spilling on sm_90 and sm_100.
- tma_ws: the same kernel with its tile loop warp-specialized (4 warps per consumer group, no
  SUBTILE: the pass fails with it) and its TMA descriptors made in the kernel, offered where
  the installed Triton builds it (`warp_specialization_builds`: 3.6, the device's version, for
  sm_90; not 3.9, not sm_100) and only under PORTER_OFFER_TMA_WS=1 (`OFFER_TMA_WS`): measured
  6% slower than tma_persistent on the H100 (bench/NOTES.md item 26).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

import sympy
import torch

from porter.codegen import heuristics
from porter.codegen import long_rows
from targets.dtypes import dtype_name

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from porter.codegen.op import GeneratedOp

# The device whose limits size a config when none is named (`default_config(None, ...)`): its
# numbers come from its hardware model like any other device's.
REFERENCE_DEVICE = "h100"


def _reference() -> HardwareModel:
    import hwmodels

    return hwmodels.get(REFERENCE_DEVICE)


def _limits(hw: HardwareModel | None) -> tuple[int, int, int, str]:
    """(warp width, max threads per block, shared memory per block, backend) of `hw`, or of
    REFERENCE_DEVICE when None."""
    if hw is None:
        import hwmodels

        hw = hwmodels.get(REFERENCE_DEVICE)
    return (hw.warp_size, int(hw.limits.max_threads_per_block.value),
            int(hw.limits.shared_memory_per_block_bytes.value), hw.build.backend)


def _elem(inputs: Sequence[Any], dtype: torch.dtype | None) -> tuple[int, torch.dtype]:
    t = next(x for x in inputs if isinstance(x, torch.Tensor) and x.dtype.is_floating_point)
    dt = dtype or t.dtype
    return torch.empty((), dtype=dt).element_size(), dt


def _tma_ok(op: GeneratedOp, hw: HardwareModel | None, inputs: Sequence[Any], eb: int) -> bool:
    """Whether the persistent TMA matmul may be offered: a TMA device, 2-byte operands whose
    strides TMA can describe (`GeneratedOp.tma_layout_ok`)."""
    if hw is None or not hw.has("tma") or hw.build.backend != "triton-cuda" or eb != 2:
        return False
    return op.tma_layout_ok(inputs, eb)


# tma_ws runs on the H100 (with in-kernel descriptors; host ones hung) but lost to
# tma_persistent by 6% (bench/NOTES.md item 26): offered only under PORTER_OFFER_TMA_WS=1, to
# re-measure on a later Triton.
OFFER_TMA_WS = os.environ.get("PORTER_OFFER_TMA_WS") == "1"


def tf32x3_offered(op: GeneratedOp, hw: HardwareModel | None, eb: int) -> bool:
    """Whether fp32 operands of op's tiled matmul may run as tf32x3 on `hw`: 4-byte operands, a
    module whose tiled kernel takes the TF32X3 constexpr (without it, IEEE off would be plain
    tf32), a backend whose Triton takes tf32x3 (not HIP's) and tf32 tensor cores."""
    if eb != 4 or hw is None or not hw.peak_tflops("tf32"):
        return False
    if not any("TF32X3" in k.constexprs for k in op.kernels if "tiled" in k.strategies):
        return False
    import targets

    try:
        caps = targets.for_device(hw).capabilities()
    except targets.UnknownTargetError:
        return False
    return "tf32x3" in caps.fp32_dot_precisions


def with_tf32x3(configs: list[dict[str, Any]], warp: int) -> list[dict[str, Any]]:
    """The tiled configs as tf32x3, at most 64 accumulator values and 64 operand values of a
    K step per thread: the operands' hi and lo halves take registers too (sm_90, Triton 3.9
    cross-compile: 128x128 tiles with 4 warps spilled, with 8 warps did not; 128x64x64 with 4
    warps, 96 operand values, spilled 520 B; 128x128x64 with 8 warps, 64, took 244 registers)."""
    return [{**c, "ieee": False, "tf32x3": True} for c in configs if c.get("strategy") == "tiled"
            and c["BLOCK_M"] * c["BLOCK_N"] <= 64 * c["num_warps"] * warp
            and (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] <= 64 * c["num_warps"] * warp]


def warp_specialization_builds(hw: HardwareModel) -> bool:
    """Whether the installed Triton builds the warp-specialized TMA matmul (strategy tma_ws)
    for `hw`.

    Cross-compiled on the CPU (bench/NOTES.md item 25): for sm_90 triton 3.6 splits the tile
    loop into a TMA producer and two MMA consumer groups (12 warps, setmaxnreg); its pass fails
    for sm_100 (b200), and triton 3.9's fails on this kernel for sm_90 too. Other versions and
    architectures are untested, so not offered.
    """
    import triton

    version = tuple(int(p) for p in triton.__version__.split(".")[:2])
    return version == (3, 6) and hw.build.backend == "triton-cuda" and hw.build.arch == "90"


def columns_offered(op: GeneratedOp, hw: HardwareModel | None) -> bool:
    """Whether the column kernel is offered: the op has one (its reduced dim is not the last)
    and `hw`'s backend runs Triton source (REFERENCE_DEVICE's when None)."""
    if not op._mm.get("columns"):
        return False
    import targets

    return targets.for_device(hw or _reference()).capabilities().language == "triton"


def _column_sizes(op: GeneratedOp, inputs: Sequence[Any]) -> tuple[int, int, int]:
    """(outer, inner, reduced): the column kernel's index over the row dims but the last, the
    last dim's length and the reduced dim's."""
    assert op.plan is not None
    sizes = op.problem_sizes(inputs)
    inner = int(sympy.sympify(op.plan.space[-1]).subs(op._subs(inputs)))
    return sizes["n_rows"] // max(inner, 1), inner, sizes["n_cols"]


def _column_configs(op: GeneratedOp, hw: HardwareModel, inputs: Sequence[Any], eb: int,
                    warp: int, warps_ok: list[int]) -> list[dict[str, Any]]:
    """The column kernel's configs (see the module docstring's `columns` rule)."""
    _, inner, n_cols = _column_sizes(op, inputs)
    vec = max(1, 16 // eb)
    budget = int(hw.limits.max_registers_per_thread.value) // 4
    out = []
    last = heuristics._next_pow2(max(inner, 1))
    for block_i in (8, 16, 32, 64, 128, 256, 512, 1024):
        if block_i > max(last, 8) or block_i < min(last, 32):
            continue  # past the last dim, or narrower than a warp where it is wider
        for block_r in (1, 2, 4, 8, 16, 32):
            if block_r > heuristics._next_pow2(max(n_cols, 1)):
                continue
            for w in warps_ok:
                per_thread = block_i * block_r / (w * warp)
                if w > 8 or per_thread < vec or per_thread > budget:
                    continue
                out.append({"strategy": "columns", "BLOCK_I": block_i, "BLOCK_R": block_r,
                            "num_warps": w, "num_stages": 1})
    return out


def _sms(hw: HardwareModel | None) -> int:
    """The SMs (compute units) of `hw`, or of REFERENCE_DEVICE when None."""
    return int((hw or _reference()).compute_units.value)


def _split_k_variants(cfg: dict[str, Any], sizes: dict[str, int], sms: int
                      ) -> list[dict[str, Any]]:
    """A tiled matmul config where `heuristics.split_k` splits K at its tile: with the rule's
    SPLIT_K (about two programs per SM), half it (one) and 1 (no split); elsewhere the config
    as it is. Three per tile: KernelBench's 6 has 32 tiled configs (bench/matmul_knobs.py
    sweeps more)."""
    if cfg.get("strategy") != "tiled":
        return [cfg]
    m, n, k = sizes["M"], sizes["N"], sizes["K"]
    rule = heuristics.split_k(m, n, k, cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], sms)
    if rule == 1:
        return [cfg]
    splits = [rule] + ([rule // 2] if rule // 2 > 1 else []) + [1]
    return [{**cfg, "SPLIT_K": s} for s in splits]


def default_config(op: GeneratedOp, hw: HardwareModel | None, inputs: Sequence[Any],
                   dtype: torch.dtype | None) -> dict[str, Any]:
    """The generated launcher's own choice for these inputs, plus the I/O dtype."""
    warp, max_threads, _, _ = _limits(hw)
    eb, dt = _elem(inputs, dtype)
    sizes = op.problem_sizes(inputs)
    if op.family == "matmul_epilogue":
        tf32x3 = tf32x3_offered(op, hw, eb)
        # a batched matmul (sizes["B"]): B times the tiles, sized as one of B * M rows; split-K
        # and TMA are 2-D only
        cfg = heuristics.matmul_default(sizes.get("B", 1) * sizes["M"], sizes["N"], sizes["K"],
                                        eb, tma=_tma_ok(op, hw, inputs, eb), tf32x3=tf32x3,
                                        sms=_sms(hw))
        if "B" in sizes:
            cfg.pop("SPLIT_K", None)
        _, _, smem, _ = _limits(hw)
        tile_bytes = (cfg["BLOCK_M"] + cfg["BLOCK_N"]) * cfg["BLOCK_K"] * eb
        while cfg["num_stages"] > 2 and cfg["num_stages"] * tile_bytes > smem:
            cfg["num_stages"] -= 1  # fewer pipeline stages where shared memory is smaller
        if tf32x3 and "ieee" not in cfg:  # the rule's exact fp32 (a K of one block) stays
            cfg = (with_tf32x3([cfg], warp) or [cfg])[0]
        if cfg["strategy"] == "tiled" and _limits(hw)[3] != "metal" and "SPLIT_K" not in cfg \
                and "B" not in sizes:
            # split-K with this device's SMs, named so the compile check builds what runs
            split = heuristics.split_k(sizes["M"], sizes["N"], sizes["K"], cfg["BLOCK_M"],
                                       cfg["BLOCK_N"], cfg["BLOCK_K"], _sms(hw))
            if split > 1:
                cfg["SPLIT_K"] = split
    elif op.plan is not None and columns_offered(op, hw) and heuristics.columns_default(
            *_column_sizes(op, inputs), eb, warp_size=warp) is not None:
        # the launcher's own rule (None where the last dim is shorter than a warp), with the
        # device's SMs
        sms = int((hw or _reference()).compute_units.value)
        cfg = heuristics.columns_default(*_column_sizes(op, inputs), eb, sms, warp, max_threads)
    elif op.plan is not None:
        cfg = heuristics.rowwise_default(sizes["n_rows"], sizes["n_cols"], eb,
                                         op._mm.get("last_dim", True), warp, max_threads,
                                         full_output="full" in op.plan.out_kind,
                                         one_round_variance=op._mm.get("one_round_variance",
                                                                       False))
        _add_lanes(cfg, op, eb, warp)
    else:
        cfg = heuristics.flat_default(sizes["numel"], eb, warp, max_threads)
    cfg["dtype"] = dtype_name(dt)
    if hw is not None and hw.build.backend == "triton-hip":
        cfg["waves_per_eu"] = 0  # 0 = no occupancy hint (the compiler's choice)
        if op.family == "matmul_epilogue":
            cfg["matrix_instr_nonkdim"] = 16
    return cfg


def _add_lanes(cfg: dict[str, Any], op: GeneratedOp, eb: int, warp: int) -> None:
    """A looped config of an op with an online softmax or a one-pass variance, and a single-pass
    or persistent config of an online softmax (its per-thread pairs), gets its LANES for this
    warp width (the launcher's own default assumes 32-wide warps)."""
    online = bool(op._mm.get("online"))
    if (cfg["strategy"] == "looped" and (online or op._mm.get("one_round_variance"))) or \
            (cfg["strategy"] in ("single_pass", "persistent") and online):
        cfg["LANES"] = heuristics.looped_lanes(cfg["BLOCK_N"], cfg["num_warps"], eb, warp)


def space(op: GeneratedOp, hw: HardwareModel, inputs: Sequence[Any],
          dtype: torch.dtype | None) -> list[dict[str, Any]]:
    """All configs worth trying for these inputs on `hw`, the default first."""
    warp, max_threads, smem, backend = _limits(hw)
    eb, dt = _elem(inputs, dtype)
    sizes = op.problem_sizes(inputs)
    warps_ok = [w for w in (1, 2, 4, 8, 16, 32) if w * warp <= max_threads]
    out: list[dict[str, Any]] = []
    if op.family == "matmul_epilogue":
        for bm in (64, 128, 256):
            for bn in (64, 128, 256):
                for bk in (32, 64, 128):
                    for st in (2, 3, 4, 5):
                        if st * (bm * bk + bk * bn) * eb > smem:
                            continue
                        for w in (4, 8):
                            if w not in warps_ok or bm * bn // (w * warp) > 256:
                                continue
                            out.append({"strategy": "tiled", "BLOCK_M": bm, "BLOCK_N": bn,
                                        "BLOCK_K": bk, "GROUP_M": 8, "num_warps": w,
                                        "num_stages": st})
        if _tma_ok(op, hw, inputs, eb):
            for bn in (128, 256):
                for bk in (64, 128):
                    for st in (3, 4):
                        if st * (128 * bk + bk * bn) * eb > smem:
                            continue
                        for w in (4, 8):
                            if w not in warps_ok or 128 * bn // (w * warp) > 128:
                                continue  # the fp32 accumulator alone would take > 128 registers
                            for flat, group in itertools.product((True, False), (8, 4, 16)):
                                # SUBTILE: at 128 accumulator values per thread the
                                # epilogue runs on two N halves (one pass spilled on sm_90
                                # and sm_100 with a GELU epilogue; halves did not)
                                out.append({"strategy": "tma_persistent", "BLOCK_M": 128,
                                            "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group,
                                            "FLATTEN": flat,
                                            "SUBTILE": 128 * bn // (w * warp) >= 128,
                                            "num_warps": w, "num_stages": st})
                        if OFFER_TMA_WS and warp_specialization_builds(hw) and 4 in warps_ok:
                            # two consumer groups of 4 warps share the 128-row tile, so the
                            # accumulator takes 128 * bn / 256 registers per thread
                            out.append({"strategy": "tma_ws", "BLOCK_M": 128, "BLOCK_N": bn,
                                        "BLOCK_K": bk, "GROUP_M": 8, "FLATTEN": False,
                                        "SUBTILE": False, "num_warps": 4, "num_stages": st})
        if heuristics.acc_chunk(sizes["K"], 32, eb) > 0:
            # a long fp32 K sums into partial accumulators (heuristics.acc_chunk): a second
            # [BLOCK_M, BLOCK_N] tile, so at most 32 values of each per thread and BLOCK_K 32
            # (sm_90 cross-compile: 64 of each spilled 192-232 B at 128x128x64 and 256x64 with 8
            # warps; BLOCK_K 128 spilled 80-256 B at 32)
            out = [c for c in out if c["strategy"] != "tiled"
                   or (c["BLOCK_M"] * c["BLOCK_N"] <= 32 * c["num_warps"] * warp
                       and c["BLOCK_K"] <= 32)]
        if tf32x3_offered(op, hw, eb):
            out = with_tf32x3(out, warp) + out  # fp32 on the tensor cores first
        if backend != "metal" and "B" not in sizes:
            out = [v for c in out for v in _split_k_variants(c, sizes, _sms(hw))]
            rule = heuristics.matmul_default(sizes["M"], sizes["N"], sizes["K"], eb,
                                             tf32x3=tf32x3_offered(op, hw, eb), sms=_sms(hw))
            if "SPLIT_K" in rule:
                # the rule's split-K tile (one accumulator per split, so not the long-K
                # filter's case above) in exact fp32 too: the default's twin should tf32x3
                # miss the tolerance
                out.append({**rule, "ieee": True, "tf32x3": False})
    elif op.plan is not None:
        n_cols = sizes["n_cols"]
        p2 = heuristics._next_pow2(max(n_cols, 1))
        two = heuristics.one_block_sizes("two_block", n_cols)
        head, tail = two["BLOCK_N"], two["BLOCK_TAIL"]
        # argmax / argmin keep an index beside each value: half the values per thread
        live = 32 if op._mm.get("arg_reduction") else 128
        for strategy in ("single_pass", "looped"):
            blocks = [p2] if strategy == "single_pass" else [b for b in (1024, 2048, 4096, 8192,
                                                                          16384) if b < p2]
            for block in blocks:
                for rows in (1, 2, 4, 8, 16, 32, 64, 128):
                    if rows > heuristics._next_pow2(max(sizes["n_rows"], 1)):
                        continue
                    for w in warps_ok:
                        threads = w * warp
                        per_thread = rows * block / threads
                        if strategy == "single_pass" and per_thread > live:
                            continue  # registers: would spill
                        if per_thread < 1 or (strategy == "looped" and rows > 1):
                            continue  # idle lanes / looped keeps one row per program
                        # one stage: the looped kernels' plain range loops compile alike at
                        # num_stages 1 and 2 (Triton 3.6 pipelines loads that feed no dot only
                        # in loops that name their stages, and such loops were no faster,
                        # bench/NOTES.md item 39)
                        out.append({"strategy": strategy, "ROWS": rows, "BLOCK_N": block,
                                    "num_warps": w, "num_stages": 1})
                        _add_lanes(out[-1], op, eb, warp)
                        if strategy == "single_pass" and op._mm.get("hoist"):
                            out.append({**out[-1], "HOIST": True})
                        if strategy == "single_pass":
                            # the same tile, each program walking row blocks with the next
                            # block's loads pipelined (stages) while this one is reduced
                            for st, per_sm in itertools.product((3, 4), (1, 2)):
                                out.append({"strategy": "persistent", "ROWS": rows,
                                            "BLOCK_N": block, "num_warps": w, "num_stages": st,
                                            "PROGRAMS_PER_SM": per_sm})
                                _add_lanes(out[-1], op, eb, warp)
                            if head + tail < p2 and rows * (head + tail) / threads <= live \
                                    and rows * head >= threads:
                                # the same row as a head and a tail block, no masked lanes
                                # in registers (5120 = 4096 + 1024 instead of 8192)
                                out.append({"strategy": "two_block", "ROWS": rows,
                                            "BLOCK_N": head, "BLOCK_TAIL": tail,
                                            "num_warps": w, "num_stages": 1})
        if columns_offered(op, hw):
            out += _column_configs(op, hw, inputs, eb, warp, warps_ok)
        if op._mm.get("one_round_variance"):
            # each config also with its mean and variance from one reduction (the looped
            # kernel: one pass of shifted sums per thread)
            out = [v for c in out for v in (c, {**c, "VAR1": True})]
        # the split row and the L2-resident looped kernel, where they apply (long_rows.py)
        out += long_rows.configs(op, hw, sizes["n_rows"], n_cols, eb, warps_ok)
    else:
        for block in (256, 512, 1024, 2048, 4096, 8192):
            for w in warps_ok:
                if w > 16 or block < w * warp:
                    continue
                out.append({"strategy": "flat", "BLOCK": block, "num_warps": w, "num_stages": 1})
    if backend == "triton-hip":
        amd = []
        for cfg in out:
            for wpe in (0, 1, 2):
                extra = {"waves_per_eu": wpe}
                if op.family == "matmul_epilogue":
                    for nk in (16, 32):
                        amd.append({**cfg, **extra, "matrix_instr_nonkdim": nk})
                else:
                    amd.append({**cfg, **extra})
        out = amd
    if backend == "metal":
        # threads per threadgroup x rows per threadgroup x vector width x index width, pruned
        # by the device model (porter.codegen.metal.variant_space)
        from porter.codegen import metal

        extent = max((x.numel() for x in inputs if isinstance(x, torch.Tensor)), default=1)
        out = metal.variant_space(op, hw, sizes, 4 * extent)
    default = default_config(op, hw, inputs, dtype)
    for cfg in out:
        cfg["dtype"] = dtype_name(dt)
    if backend != "metal":
        key = {k: v for k, v in default.items()}
        out = [key] + [c for c in out if c != key]
    return out
