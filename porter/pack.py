"""Kernel packs: one folder per op with a kernel per target, the reference, and the evidence.

Layout written by `write_pack(result, out_dir)`:

    <out_dir>/<op>/
        manifest.yaml                 evidence per entry (see below) + sha256 of every file
        reference.py                  the reference (a copy of the spec / KernelBench file)
        nvidia/<target>/<op>_<bucket>_<dtype>.py     generated Triton module, config baked in
        amd/<target>/<op>_<bucket>_<dtype>.py
        apple/<target>/<op>_<bucket>_<dtype>.metal   Metal source (emitted only)

A *shape bucket* names a family of input shapes that share one tuned config: the first tensor
input's leading dimensions are collapsed into one and every dimension is rounded up to a power of
two, e.g. x of shape (3, 1000, 4000) -> "4096x4096". The loader picks the config of the input's
bucket (or of the nearest bucket of the same rank: every config passed the correctness stages at
several shapes, so the bucket only decides speed).

Manifest (YAML) keys: format, op, created, spec, reference, versions, fusion, signature, files
(relative path -> sha256), entries. Each entry: target, vendor, backend, arch, tier (the lowest
tier over its buckets, i.e. what every config of the entry reached), hw_model_hash, tolerance,
notes, buckets; each bucket: bucket, dtype, shape, config, file, tier, numbers (time_ms, p20_ms,
p80_ms, label "measured" | "projected", pct_of_peak, floor_ms).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import math
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import yaml

from porter.errors import PorterError

if TYPE_CHECKING:
    from porter.port import PortResult

log = logging.getLogger(__name__)

FORMAT = "kernel-porter-pack/1"
MANIFEST = "manifest.yaml"
REFERENCE = "reference.py"
TIERS = ("emitted", "compiled", "interpreted", "measured")
VENDOR_DIRS = ("nvidia", "amd", "apple")


class PackError(PorterError):
    """A pack folder or manifest is missing, malformed, or was written by another format."""


class PackIntegrityError(PackError):
    """A pack file's sha256 differs from the manifest: the file was edited or corrupted."""


def sha256_file(path: str | Path) -> str:
    """sha256 hex of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


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
    return sum(w * abs(math.log2(x) - math.log2(y)) for w, x, y in zip(weights, da, db, strict=True))


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def tier_rank(tier: str) -> int:
    """Order of a tier name (emitted < compiled < interpreted < measured); -1 when unknown."""
    return TIERS.index(tier) if tier in TIERS else -1


def vendor_dir(vendor: str) -> str:
    if vendor not in VENDOR_DIRS:
        raise PackError(f"vendor {vendor!r} has no pack folder; known: {', '.join(VENDOR_DIRS)}")
    return vendor


# -- writing --------------------------------------------------------------------------------
def write_pack(result: PortResult, out_dir: str | Path) -> Path:
    """Write the pack of one ported op under `out_dir/<op>/` and return that folder.

    The folder is rebuilt from scratch (an older pack of the same op is replaced), so a pack never
    mixes files from two runs. Identical sources (e.g. two buckets with the same config) share a
    file.

    Args:
        result: what `porter.port.port` returned.
        out_dir: the packs folder (e.g. "packs/").

    Returns:
        The pack folder.
    """
    root = Path(out_dir) / result.op
    staging = root.with_name(root.name + ".tmp")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)

    shutil.copyfile(result.spec_path, staging / REFERENCE)
    entries: list[dict[str, Any]] = []
    for tr in result.targets:
        folder = Path(vendor_dir(tr.vendor)) / tr.target
        buckets: list[dict[str, Any]] = []
        for choice in tr.choices:
            ext = ".metal" if tr.backend == "metal" else ".py"
            rel = folder / f"{result.op}_{choice.bucket}_{choice.dtype}{ext}"
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_text(choice.source)
            buckets.append(
                {
                    "bucket": choice.bucket,
                    "dtype": choice.dtype,
                    "shape": list(choice.shape),
                    "config": dict(choice.config),
                    "file": rel.as_posix(),
                    "tier": choice.tier,
                    # "existing": the spec's own kernel file + launcher, wrapped (see port.py)
                    "origin": getattr(choice, "origin", "generated"),
                    "numbers": dict(choice.numbers),
                }
            )
        tiers = [b["tier"] for b in buckets]
        entries.append(
            {
                "target": tr.target,
                "vendor": tr.vendor,
                "backend": tr.backend,
                "arch": tr.arch,
                "tier": min(tiers, key=tier_rank) if tiers else "none",
                "hw_model_hash": tr.hw_model_hash,
                "tolerance": tr.tolerance,
                "notes": list(tr.notes),
                "buckets": buckets,
            }
        )

    files = {
        p.relative_to(staging).as_posix(): sha256_file(p)
        for p in sorted(staging.rglob("*"))
        if p.is_file()
    }
    manifest = {
        "format": FORMAT,
        "op": result.op,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "spec": str(result.spec_path),
        "run_dir": str(result.run_dir),
        "reference": {"file": REFERENCE, "function": result.reference_function},
        "versions": dict(result.versions),
        "fusion": dict(result.fusion),
        "signature": list(result.signature),
        "files": files,
        "entries": entries,
    }
    # A JSON round trip turns str subclasses (torch's TorchVersion), tuples and paths into plain
    # YAML-safe values.
    manifest = json.loads(json.dumps(manifest, default=str))
    (staging / MANIFEST).write_text(yaml.safe_dump(manifest, sort_keys=False, width=100))
    if root.exists():
        shutil.rmtree(root)
    staging.rename(root)
    log.info("wrote pack %s (%d entries, %d files)", root, len(entries), len(files))
    return root


# -- reading --------------------------------------------------------------------------------
def read_manifest(pack_dir: str | Path) -> dict[str, Any]:
    """Load and sanity-check `manifest.yaml` of a pack.

    Raises:
        PackError: no manifest, not YAML, another format, or a required key missing.
    """
    path = Path(pack_dir) / MANIFEST
    if not path.is_file():
        raise PackError(f"{path}: no manifest; is {pack_dir} a pack folder written by `porter port`?")
    try:
        manifest = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise PackError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise PackError(f"{path}: format: expected {FORMAT!r}, got {got!r}")
    for key in ("op", "files", "entries", "reference"):
        if key not in manifest:
            raise PackError(f"{path}: {key}: missing")
    return manifest


def verify_files(pack_dir: str | Path, manifest: dict[str, Any], rel_paths: Sequence[str]) -> None:
    """Check the sha256 of each named file against the manifest.

    Raises:
        PackIntegrityError: naming the first file that is missing, unlisted or changed.
    """
    root = Path(pack_dir)
    for rel in rel_paths:
        expected = manifest["files"].get(rel)
        path = root / rel
        if expected is None:
            raise PackIntegrityError(f"{path}: not listed in {root / MANIFEST} files:; refusing it")
        if not path.is_file():
            raise PackIntegrityError(f"{path}: listed in the manifest but missing")
        actual = sha256_file(path)
        if actual != expected:
            raise PackIntegrityError(
                f"{path}: sha256 {actual[:16]}... differs from the manifest's {expected[:16]}...; "
                "the file was changed after the pack was written. Re-run `porter port` or restore it."
            )


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
                + ")"
            )
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
                    "-" if pct is None else f"{pct:.0f}%",
                ]
            )
    return rows


SUMMARY_HEADERS = ("target", "backend", "arch", "tier", "bucket", "dtype", "config", "time",
                   "% peak")


def _config_text(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items()) or "-"
