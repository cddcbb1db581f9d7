"""What a call runs (`Choice`) and the entry's bucket that serves an input shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from porter.packs.format import bucket_distance
from porter.packs.format import tier_rank
from porter.packs.unseen import SAME_WIDTH_ROW_OCTAVES
from porter.packs.unseen import row_width
from targets.tiers import Tier


@dataclass(frozen=True)
class Choice:
    """What one call would run: an entry's bucket and config, or the reference.

    bucket is None when no entry fits (the fallback); reference_why is set when an entry fits
    but the reference op runs instead (eager measured or estimated faster at this shape).
    """

    target: str | None
    bucket: dict[str, Any] | None
    interpret: bool
    reason: str  # why this choice (or why the fallback)
    # what the launcher gets: None = its own choice for the shape (porter.codegen.heuristics)
    config: dict[str, Any] | None = None
    basis: str = ""  # where the config came from, in words (describe() says it)
    reference_why: str | None = None  # the entry fits, but the reference op runs: why
    evidence: str = ""  # at a shape with no exact bucket: the kernel-vs-eager estimate
    asked: str = ""  # the inputs' "bucket/dtype"

    @property
    def runs_kernel(self) -> bool:
        return self.bucket is not None and self.reference_why is None

    @property
    def unseen(self) -> bool:
        """The inputs' shape bucket is not one the entry was ported for."""
        return self.bucket is not None and f"{self.bucket['bucket']}/{self.bucket['dtype']}" \
            != self.asked


def cpu_eligible(entry: dict[str, Any]) -> bool:
    return entry.get("backend", "").startswith("triton") and any(
        tier_rank(b.get("tier", "")) >= tier_rank(Tier.INTERPRETED) for b in entry["buckets"]
    )


def pick_bucket(entry: dict[str, Any], bucket: str, dtype: str) -> dict[str, Any] | None:
    """The bucket whose file (and tier) serves `bucket`: the exact one, else the nearest of
    the same dtype and rank, never a narrower row before a wider one."""
    same_dtype = [b for b in entry["buckets"] if b["dtype"] == dtype]
    exact = [b for b in same_dtype if b["bucket"] == bucket]
    if exact:
        return exact[0]
    # Nearest first, but never a narrower row than asked for before a wider one: a config
    # tuned for narrower rows may hold less than a whole row (single-pass BLOCK_N).
    width = row_width(bucket)
    near = sorted(same_dtype, key=lambda b: (row_width(b["bucket"]) < width,
                                             bucket_distance(b["bucket"], bucket)))
    if near and bucket_distance(near[0]["bucket"], bucket) != float("inf"):
        return near[0]
    return None


def same_width_bucket(entry: dict[str, Any], bucket: str, dtype: str) -> dict[str, Any] | None:
    """A bucket of the same dtype, rank and row width whose row count is within
    SAME_WIDTH_ROW_OCTAVES of `bucket`'s (the nearest), or None."""
    fits = [b for b in entry["buckets"] if b["dtype"] == dtype
            and row_width(b["bucket"]) == row_width(bucket)
            and bucket_distance(b["bucket"], bucket) <= SAME_WIDTH_ROW_OCTAVES]
    return min(fits, key=lambda b: bucket_distance(b["bucket"], bucket), default=None)
