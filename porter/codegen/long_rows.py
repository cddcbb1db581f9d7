"""The variant space of the row-wise generator's long-row families: when the search offers each,
and their knobs. All three run only on backends whose language is Triton (`capabilities()`);
the Metal backend has its own space (`porter.codegen.metal.variant_space`).

- split_row (`rowwise/split_row.py`): each row in SPLIT chunks or fewer, one program each, a
  partials kernel then an apply kernel. Offered where the rows alone fill fewer than
  FILL_WAVES programs per SM (16 rows of 4,194,304 elements: 16 programs for 132 SMs), or
  where rows are so wide that fewer than one per SM fit in half the L2 (4096 x 393216 fp32:
  16 rows; the L2-capped looped grid would leave SMs idle; then in groups of those rows only),
  for rows of MIN_SPLIT_COLS+ columns, and where the op's graph fits (`split_row.why_not`).
  Knobs: GROUP_ROWS, the rows of one partials-and-apply launch
  pair, so that a group's rows fit in half the L2 and the apply kernel re-reads them from it
  (absent: all rows in one pair); SPLIT, so that a launch's rows x SPLIT is 2, 4 or 8
  programs per SM (the SM count from the hardware model), at most MAX_SPLIT; BLOCK_N and
  warps (4 to 32 values per thread and accumulator).
- looped_l2 (the looped body in a loop over rows): where the looped kernel reads each row twice
  (reductions, then full-row outputs) and rows are wider than the default single pass holds
  (MIN_L2_COLS), in grids of FILL_WAVES+ programs per SM (fewer rows: one program per row is no
  more than the cap), with more bytes in all than half the L2 holds (else L2 keeps them anyway).
  Knobs: RESIDENT_BYTES, a share (L2_SHARES) of the L2 the hardware model states, which caps the
  grid at RESIDENT_BYTES // row bytes programs, so that the second read of a row hits L2 (DRAM
  traffic ~2N instead of 3N); PROGRAMS_PER_SM (the other cap); BLOCK_N and warps as the looped
  kernel's.
- split_coop (`rowwise/coop.py`, `_triton_rowwise_long.py.j2`): each row in chunks of one
  BLOCK_N block, one program each, co-resident (a cooperative launch). A program loads its
  chunk once and keeps it in registers, as the one-block kernels keep a row: it reduces the
  chunk to the split row's partials in a workspace, waits at a per-row counter for the row's
  other programs (release add, acquire poll), combines the row's partials and writes its
  outputs from the registers: one DRAM read of the row where the looped kernel reads it twice.
  On the H100 it ran softmax at 78-91% of copy at 4096 x 50,257-393,216 fp32 and 80% at
  151,936 bf16, where every other family reaches 48-64% and a first split_coop that re-read
  its chunk after the barrier 65-72% (bench/NOTES.md items 51-52, 58). Offered on CUDA Triton
  backends only (HIP is unverified), where split_row's graph check passes, the op writes full
  rows (a reduction-only op is read once already) and rows have MIN_COOP_COLS+ columns. Knobs:
  BLOCK_N (COOP_BLOCKS) with SPLIT = cdiv(n_cols, BLOCK_N), warps (COOP_WARPS, 4 to 64 values
  per thread), PROGRAMS_PER_SM (COOP_PER_SM), where a row's chunks fit on the device at once
  (SMs x PROGRAMS_PER_SM). The compile tier rejects a config whose compiled kernel fits fewer
  programs per SM than it asks (`coop_misfit`): the driver would refuse it.

`bench/long_rows.py` times each family against the others (split_row and looped_l2 on the
H100: docs/BENCHMARKS.md, results/h100-2026-11-26-long-rows/).
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import TYPE_CHECKING
from typing import Any

from porter.codegen import heuristics

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from porter.codegen.op import GeneratedOp

log = logging.getLogger(__name__)

FILL_WAVES = 2  # split only while the rows give fewer programs than this per SM
MIN_SPLIT_COLS = 16384  # shorter rows: one program each (single pass or looped)
SPLIT_WAVES = (2, 4, 8)  # programs per SM the split grid aims at
SPLIT_BLOCKS = (1024, 2048, 4096)
MAX_SPLIT = 1024  # the apply kernel loads a row's partials at once (SPLIT values each)
MIN_L2_COLS = 32768 + 1  # the default's widest single pass (heuristics._rowwise_tile)
L2_SHARES = (0.25, 0.5, 0.75)
L2_BLOCKS = (2048, 4096, 8192)
MIN_COOP_COLS = 16384  # shorter rows: the single pass reads them once already
COOP_BLOCKS = (4096, 8192, 16384)
COOP_WARPS = (4, 8)
COOP_PER_SM = (1, 2, 4)
# Offered first (per block and warps): the programs per SM that make COOP_SM_WARPS warps an SM.
# The search's first split_coop try is `heuristics.coop_tile`'s (search._anchor), the others
# in this order after it. The H100's best ran 16 warps an SM (8192 x 4 warps x 4 per SM in
# fp32, 90% of copy; 16384 x 8 warps x 2 in bf16, 80%; bench/NOTES.md items 58-59); one per SM
# lost to the looped kernel at 393,216 columns
COOP_SM_WARPS = 16
# A chunk of one block per program: up to 64 values per thread, as the probe's best at width
# 151,936 (16384 columns over 8 warps, bench/NOTES.md item 51); its registers and spills are
# the compile check's to judge
COOP_MAX_VALUES = 64


def offered_on(hw: HardwareModel) -> bool:
    """Whether `hw`'s backend runs the long-row kernels: those that emit Triton."""
    import targets

    return targets.for_device(hw).capabilities().language == "triton"


def not_offered(op: GeneratedOp, hw: HardwareModel, n_rows: int, n_cols: int,
                elem_bytes: int) -> dict[str, str]:
    """Each long-row family the search does not offer for this shape on `hw`, with why."""
    out: dict[str, str] = {}
    if not offered_on(hw):
        reason = f"{hw.name}'s backend does not emit Triton"
        return {"split_row": reason, "looped_l2": reason, "split_coop": reason}
    sms = int(hw.compute_units.value)
    if op.plan is None or not op._mm.get("split_row"):
        out["split_row"] = op._mm.get("split_why_not") or "not a row-wise op"
    elif n_rows >= FILL_WAVES * sms and l2_rows(hw, n_cols * elem_bytes) >= sms:
        out["split_row"] = (f"{n_rows} rows give {FILL_WAVES}+ programs per SM of {sms}, and "
                            "the L2-capped looped grid fills every SM")
    elif n_cols < MIN_SPLIT_COLS:
        out["split_row"] = f"rows of {n_cols} < {MIN_SPLIT_COLS} columns: one program holds one"
    row_bytes = n_cols * elem_bytes
    if op.plan is None or not op._mm.get("looped_l2"):
        out["looped_l2"] = "no full-row output after the reductions (one read per row), or a fold"
    elif n_cols < MIN_L2_COLS:
        out["looped_l2"] = f"rows of {n_cols} <= {MIN_L2_COLS - 1} columns: the single pass"
    elif n_rows < FILL_WAVES * sms:
        out["looped_l2"] = f"{n_rows} rows: a grid of one program per row is no larger"
    elif n_rows * row_bytes <= hw.llc_bytes // 2:
        out["looped_l2"] = "all rows fit in half the L2 already"
    if hw.build.backend != "triton-cuda":
        out["split_coop"] = (f"{hw.name}'s backend is {hw.build.backend}: the cross-program "
                             "barrier is verified on CUDA only")
    elif op.plan is None or not op._mm.get("split_row"):
        out["split_coop"] = op._mm.get("split_why_not") or "not a row-wise op"
    elif not op._mm.get("split_coop"):
        out["split_coop"] = "no full-row output: the looped kernel reads each row once already"
    elif n_cols < MIN_COOP_COLS:
        out["split_coop"] = f"rows of {n_cols} < {MIN_COOP_COLS} columns: the single pass"
    return out


def l2_rows(hw: HardwareModel, row_bytes: int) -> int:
    """Rows that fit in half of `hw`'s L2 (at least one): a split row's launch group, and
    about the L2-capped looped kernel's grid."""
    return max(1, (hw.llc_bytes // 2) // max(1, row_bytes))


def configs(op: GeneratedOp, hw: HardwareModel, n_rows: int, n_cols: int, elem_bytes: int,
            warps_ok: list[int]) -> list[dict[str, Any]]:
    """The long-row families' configs for this shape on `hw` (logs why a family is not
    offered)."""
    skip = not_offered(op, hw, n_rows, n_cols, elem_bytes)
    for family, why in skip.items():
        log.info("%s: %s not offered at %d x %d: %s", op.name, family, n_rows, n_cols, why)
    out: list[dict[str, Any]] = []
    if "split_row" not in skip:
        out += _split_row(op, hw, n_rows, n_cols, elem_bytes, warps_ok)
    if "looped_l2" not in skip:
        out += _looped_l2(op, hw, n_rows, n_cols, elem_bytes, warps_ok)
    if "split_coop" not in skip:
        out += _split_coop(op, hw, n_rows, n_cols, elem_bytes, warps_ok)
    return out


def _values_per_thread_ok(block: int, warps: int, warp: int) -> bool:
    """4 to 32 values per thread and accumulator, in programs of 4 to 16 warps (a long row's
    program keeps many loads in flight; more warps than 16 wait on one barrier)."""
    return 4 <= warps <= 16 and 4 <= block / (warps * warp) <= 32


def _split_row(op: GeneratedOp, hw: HardwareModel, n_rows: int, n_cols: int,
               elem_bytes: int, warps_ok: list[int]) -> list[dict[str, Any]]:
    sms, warp = int(hw.compute_units.value), hw.warp_size
    # rows per launch pair: all, or as many as fill half the L2; only the latter where the
    # rows alone fill the device (then the groups keep the apply kernel's re-reads in L2)
    group = l2_rows(hw, n_cols * elem_bytes)
    groups = [None] if group >= n_rows else [group] if n_rows >= FILL_WAVES * sms \
        else [None, group]
    out = []
    for g, block, w in itertools.product(groups, SPLIT_BLOCKS, warps_ok):
        if not _values_per_thread_ok(block, w, warp):
            continue
        # chunks per row so that one launch's grid is SPLIT_WAVES programs per SM
        rows = g or n_rows
        splits = {min(MAX_SPLIT, heuristics._next_pow2(-(-waves * sms // rows)))
                  for waves in SPLIT_WAVES}
        for split in sorted(splits):
            if n_cols < split * block // 2:
                continue  # chunks so short that rounding them to blocks drops most of them
            cfg = {"strategy": "split_row", "ROWS": 1, "BLOCK_N": block, "SPLIT": split,
                   "num_warps": w, "num_stages": 1}
            if g is not None:
                cfg["GROUP_ROWS"] = g
            if op._mm.get("online"):
                cfg["LANES"] = heuristics.looped_lanes(block, w, elem_bytes, warp)
            out.append(cfg)
    return out


def _looped_l2(op: GeneratedOp, hw: HardwareModel, n_rows: int, n_cols: int,
               elem_bytes: int, warps_ok: list[int]) -> list[dict[str, Any]]:
    warp = hw.warp_size
    lanes = op._mm.get("online") or op._mm.get("one_round_variance")
    var1 = (False, True) if op._mm.get("one_round_variance") else (False,)
    out = []
    for share, block, w, per_sm, v in itertools.product(L2_SHARES, L2_BLOCKS, warps_ok, (1, 2),
                                                        var1):
        if not _values_per_thread_ok(block, w, warp):
            continue
        cfg = {"strategy": "looped_l2", "ROWS": 1, "BLOCK_N": block, "num_warps": w,
               "num_stages": 1, "RESIDENT_BYTES": int(share * hw.llc_bytes),
               "PROGRAMS_PER_SM": per_sm}
        if lanes:
            cfg["LANES"] = heuristics.looped_lanes(block, w, elem_bytes, warp)
        if v:
            cfg["VAR1"] = True
        out.append(cfg)
    return out


def coop_misfit(config: dict[str, Any], blocks_per_unit: int) -> str | None:
    """Why a split_coop config cannot launch (None: it can, or it is not split_coop): its
    cooperative grid asks PROGRAMS_PER_SM programs on every SM at once, and the compiled
    kernel's occupancy (`blocks_per_unit`, from its registers and shared memory) fits fewer,
    so that the driver refuses the launch ("too many blocks in cooperative launch")."""
    want = config.get("PROGRAMS_PER_SM", 1)
    if config.get("strategy") != "split_coop" or blocks_per_unit >= want:
        return None
    return (f"split_coop asks {want} co-resident programs per SM (PROGRAMS_PER_SM) and its "
            f"kernel fits {blocks_per_unit}: the cooperative launch would be refused")


def _split_coop(op: GeneratedOp, hw: HardwareModel, n_rows: int, n_cols: int,
                elem_bytes: int, warps_ok: list[int]) -> list[dict[str, Any]]:
    sms, warp = int(hw.compute_units.value), hw.warp_size
    out = []
    for block, w in itertools.product(COOP_BLOCKS, COOP_WARPS):
        if w not in warps_ok or not 4 <= block / (w * warp) <= COOP_MAX_VALUES:
            continue
        for per_sm in sorted(COOP_PER_SM, key=lambda p: (abs(math.log2(p * w / COOP_SM_WARPS)),
                                                         -p)):
            split = -(-n_cols // block)  # one block per chunk
            if heuristics.coop_groups(max(n_rows, 1), split, sms * per_sm) == 0:
                continue  # a row's programs would not all be resident: the launcher refuses
            cfg = {"strategy": "split_coop", "ROWS": 1, "BLOCK_N": block, "SPLIT": split,
                   "num_warps": w, "num_stages": 1, "PROGRAMS_PER_SM": per_sm}
            if op._mm.get("online"):
                cfg["LANES"] = heuristics.looped_lanes(block, w, elem_bytes, warp)
            out.append(cfg)
    return out
