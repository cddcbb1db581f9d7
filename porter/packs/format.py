"""The pack format: one folder per op with a kernel per target, the reference, and the evidence.

Layout written by `write_pack(result, out_dir)`:

    <out_dir>/<op>/
        manifest.yaml                 evidence per entry (see below) + sha256 of every file
        reference.py                  the reference (a copy of the spec / KernelBench file)
        nvidia/<target>/<op>.<sha12>.py     generated Triton module (its config is the bucket's,
                                            in the manifest, passed at launch)
        amd/<target>/<op>.<sha12>.py
        apple/<target>/<op>.<sha12>.metal   Metal source, config baked in (emitted, or emulated
                                            on the CPU)

Each kernel file is named by the first 12 hex digits of its content's sha256: the buckets whose
source is the same share one file. Packs written before this (one file per bucket and dtype,
`<op>_<bucket>_<dtype>.py`) load as they are: the loader follows each bucket's `file`.

A *shape bucket* names a family of input shapes that share one tuned config: the first tensor
input's leading dimensions are collapsed into one and every dimension is rounded up to a power of
two, e.g. x of shape (3, 1000, 4000) -> "4096x4096". The loader picks the config of the input's
bucket (or of the nearest bucket of the same rank: every config passed the correctness stages at
several shapes, so the bucket only decides speed).

Manifest (YAML) keys: format, op, created, spec, reference, versions, fusion, signature, files
(relative path -> sha256), entries. Each entry: target, vendor, backend, arch, tier (the lowest
tier over its buckets, i.e. what every config of the entry reached), hw_model_hash, tolerance,
notes, provenance (created, run_dir, versions of the port that wrote the entry: entries merged
from an older pack keep theirs), buckets; each bucket: bucket, dtype, shape, config, file, tier,
numbers (time_ms, p20_ms, p80_ms, label "measured" | "projected", pct_of_peak, floor_ms).

A pack is code: loading it executes its Python. Its integrity rule, used by the loader, by
`porter pack show` and by `porter pack verify` alike: every path in the manifest resolves inside
the pack (no absolute path, no "..", no symlink leading out) and every listed file has the
manifest's sha256. A pack that breaks either is *tampered* and refused whole, naming the file;
it never falls back to the reference, since a changed file is an attack or a corruption, not a
missing entry. `manifest_sha256` pins the manifest itself (and through it every file).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
from collections.abc import Iterator
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from porter.errors import PorterError
from targets.tiers import TIERS  # noqa: F401 - re-exported: the tier names, lowest to highest

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

FORMAT = "kernel-porter-pack/1"
MANIFEST = "manifest.yaml"
REFERENCE = "reference.py"
VENDOR_DIRS = ("nvidia", "amd", "apple")


class PackError(PorterError):
    """A pack folder or manifest is missing, malformed, or was written by another format."""


class PackIntegrityError(PackError):
    """A pack file's sha256 differs from the manifest: the file was edited or corrupted."""


class PackPathError(PackIntegrityError):
    """A manifest path leads outside the pack: absolute, with "..", or through a symlink."""


def sha256_file(path: str | Path) -> str:
    """sha256 hex of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def sha256_bytes(data: bytes) -> str:
    """sha256 hex of some bytes."""
    return hashlib.sha256(data).hexdigest()


def shape_bucket(shape: Sequence[int]) -> str:
    """Bucket name of a tensor shape: leading dims collapsed and rounded up to a power of two;
    the last (row) dim rounded up to an eighth of its power of two.

    The row width keeps three significant bits because it decides how much of a power-of-two
    block is masked off, and with it the best config: on an H100, layernorm rows of 5120 ran
    9% faster with 8 warps than with 16, rows of 8192 the other way round, and one bucket for
    both picked 16 for both (bench/NOTES.md). Row counts only change the grid.

    Examples: (4096, 4096) -> "4096x4096"; (2, 3, 1000) -> "8x1024"; (16384, 5120) ->
    "16384x5120"; (4097, 1537) -> "8192x1792"; (7,) -> "7"; () -> "1".
    """
    dims = [int(d) for d in shape]
    if not dims:
        return "1"
    if len(dims) > 2:
        dims = [math.prod(dims[:-1]), dims[-1]]
    return "x".join([str(_pow2_ceil(d)) for d in dims[:-1]] + [str(_width_bucket(dims[-1]))])


def _width_bucket(n: int) -> int:
    """n rounded up to a multiple of an eighth of its power-of-two ceiling (>= 1)."""
    p = _pow2_ceil(n)
    step = max(1, p // 8)
    return max(1, -(-n // step) * step)


def bucket_distance(a: str, b: str) -> float:
    """Weighted log2 distance between two buckets of the same rank; inf when the ranks differ."""
    da = [int(x) for x in a.split("x")]
    db = [int(x) for x in b.split("x")]
    if len(da) != len(db):
        return math.inf
    # The last (row) dimension decides block sizes and strategy, the leading ones only the grid:
    # weigh it 4x so a row width match wins over a row count match.
    weights = [1.0] * (len(da) - 1) + [4.0]
    return sum(w * abs(math.log2(x) - math.log2(y))
               for w, x, y in zip(weights, da, db, strict=True))


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def tier_rank(tier: str) -> int:
    """Order of a tier name (targets.tiers: emitted < compiled < interpreted < emulated <
    measured); -1 when unknown."""
    return TIERS.index(tier) if tier in TIERS else -1


def vendor_dir(vendor: str) -> str:
    if vendor not in VENDOR_DIRS:
        raise PackError(f"vendor {vendor!r} has no pack folder; known: {', '.join(VENDOR_DIRS)}")
    return vendor


def entry_files(entry: dict[str, Any]) -> list[str]:
    """Relative paths of every file an entry uses (one per bucket, de-duplicated)."""
    return sorted({b["file"] for b in entry.get("buckets", ())})


def summary_rows(manifest: dict[str, Any]) -> list[list[Any]]:
    """One row per (entry, bucket) for `porter pack show`."""
    rows: list[list[Any]] = []
    for e in manifest["entries"]:
        buckets = e.get("buckets") or [{}]
        for b in buckets:
            n = b.get("numbers") or {}
            t = n.get("time_ms")
            time_txt = "-" if t is None else (
                f"{t * 1e3:.1f} us ({n.get('label', '?')}"
                + (f", p20-p80 {n['p20_ms'] * 1e3:.1f}-{n['p80_ms'] * 1e3:.1f}"
                   if n.get("p20_ms") is not None and n.get("p80_ms") is not None else "")
                + (", error unknown" if str(n.get("expected_error", "")).startswith("unknown")
                   else "")
                + ")"
            )
            call = n.get("call_us")
            call_txt = "-" if call is None else (
                f"{call:.1f} us" + (f" (eager {n['eager_call_us']:.1f})"
                                    if n.get("eager_call_us") is not None else ""))
            pct = n.get("pct_of_peak")
            rows.append(
                [
                    e["target"],
                    e["backend"],
                    e.get("arch", ""),
                    b.get("tier", e.get("tier", "")),
                    b.get("bucket", "-"),
                    b.get("dtype", "-"),
                    _config_text(b.get("config") or {}),
                    time_txt,
                    call_txt,
                    "-" if pct is None else f"{pct:.0f}%",
                ]
            )
    return rows


# time: the kernel's device time; call: a Python caller's time per call back to back (the pack's
# bound launch), beside eager's
SUMMARY_HEADERS = ("target", "backend", "arch", "tier", "bucket", "dtype", "config", "time",
                   "call", "% peak")


def _config_text(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items()) or "-"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing) across processes, held for the block:
    the pack writer's read-merge-swap and the tuning cache's writes take it (POSIX flock)."""
    import fcntl

    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
