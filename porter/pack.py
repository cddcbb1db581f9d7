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

import datetime as _dt
import hashlib
import json
import logging
import math
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from pathlib import PurePosixPath
from pathlib import PureWindowsPath
from typing import TYPE_CHECKING
from typing import Any

import yaml

from porter.errors import PorterError
from targets.tiers import TIERS  # noqa: F401 - re-exported: the tier names, lowest to highest

if TYPE_CHECKING:
    from porter.results import PortResult

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
    return sum(w * abs(math.log2(x) - math.log2(y)) for w, x, y in zip(weights, da, db, strict=True))


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


# -- writing --------------------------------------------------------------------------------
@dataclass(frozen=True)
class WrittenPack:
    """What `write_pack` did: the pack folder, and one sentence per entry it kept or downgraded."""

    path: Path
    notes: tuple[str, ...] = ()


def check_out_dir(out_dir: str | Path) -> None:
    """Refuse a packs folder that cannot hold packs; cheap, so a port calls it before any work.

    Raises:
        PackError: `out_dir`, or a folder on its path, exists and is not a folder.
    """
    wanted = Path(out_dir)
    for p in (wanted, *wanted.parents):
        if p.is_dir():
            return
        if p.exists() or p.is_symlink():
            where = "exists and is not a folder" if p == wanted else f"lies under {p}, a file"
            raise PackError(f"packs folder {wanted}: {where}; give --out a folder (the pack goes "
                            f"to {wanted}/<op>/)")


def write_pack(result: PortResult, out_dir: str | Path, *, replace: bool = False) -> WrittenPack:
    """Write the pack of one ported op under `out_dir/<op>/`, merging into an existing pack.

    A merge never destroys what exists:

    - the existing pack is verified first (paths and sha256s, as the loader does): a tampered pack
      is refused rather than carried forward, and so is one for a different op under the same
      name (another input signature or reference file);
    - entries of targets this port did not cover are kept, with their verified files;
    - entries of targets it covered are replaced, except that a target for which this port kept
      no bucket at all leaves the existing entry in place, and a note says so.

    `replace=True` writes the pack from this port alone (the old behaviour). Either way the pack
    is built in a staging folder beside it and swapped in at the end, so a pack never mixes files
    from a half-finished write, and a folder that is not a pack is never deleted.

    Args:
        result: what `porter.port.port` returned.
        out_dir: the packs folder (e.g. "packs/").
        replace: replace an existing pack wholesale instead of merging into it.

    Returns:
        The pack folder and notes on what the merge kept.

    Raises:
        PackError: `out_dir` is a file; `out_dir/<op>` exists and is not a pack; (merge) the
            existing pack is for a different op.
        PackIntegrityError: (merge) the existing pack fails verification; the message names the
            file, and `porter pack verify` lists every problem.
    """
    check_out_dir(out_dir)
    root = Path(out_dir) / result.op
    old = _existing_pack(root, result, replace=replace)
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    provenance = {"created": created, "run_dir": str(result.run_dir),
                  "versions": dict(result.versions)}
    staging = root.with_name(f".{root.name}.writing-{uuid.uuid4().hex[:8]}")
    staging.mkdir(parents=True)
    try:
        shutil.copyfile(result.spec_path, staging / REFERENCE)
        fresh = {tr.target: _write_entry(staging, result, tr, provenance) for tr in result.targets}
        entries, carried, notes = _merge_entries(old.manifest["entries"] if old else [], fresh)
        for entry in carried:
            assert old is not None
            for rel in entry_files(entry):
                _put_file(staging, rel, old.files[rel])
            # The manifest's top-level run and versions will be this port's: an entry written
            # before entries carried their own keeps where it came from.
            entry.setdefault("provenance", {k: old.manifest.get(k)
                                            for k in ("created", "run_dir", "versions")})
        files = {
            p.relative_to(staging).as_posix(): sha256_file(p)
            for p in sorted(staging.rglob("*"))
            if p.is_file()
        }
        manifest = {
            "format": FORMAT,
            "op": result.op,
            "created": created,
            "spec": str(result.spec_path),
            "run_dir": str(result.run_dir),
            "reference": {"file": REFERENCE, "function": result.reference_function},
            "versions": dict(result.versions),
            "fusion": dict(result.fusion),
            "signature": list(result.signature),
            "files": files,
            "entries": entries,
        }
        # A JSON round trip turns str subclasses (torch's TorchVersion), tuples and paths into
        # plain YAML-safe values.
        manifest = json.loads(json.dumps(manifest, default=str))
        (staging / MANIFEST).write_text(yaml.safe_dump(manifest, sort_keys=False, width=100))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _swap_in(staging, root)
    for note in notes:
        log.warning("%s: %s", root, note)
    log.info("wrote pack %s (%d entries, %d files)", root, len(entries), len(files))
    return WrittenPack(root, tuple(notes))


@dataclass(frozen=True)
class _OldPack:
    manifest: dict[str, Any]
    files: dict[str, bytes]  # relative path -> verified bytes


def _existing_pack(root: Path, result: PortResult, *, replace: bool) -> _OldPack | None:
    """The verified pack already at `root` to merge into; None when there is none (or replace)."""
    if not root.exists() and not root.is_symlink():
        return None
    if not root.is_dir():
        raise PackError(f"{root}: exists and is not a folder; move it away or choose another --out")
    if not (root / MANIFEST).exists():
        if any(root.iterdir()):
            raise PackError(f"{root}: exists but holds no {MANIFEST}, so it is not a pack; it is "
                            "never deleted: move it away or choose another --out")
        return None
    if replace:
        return None
    hint = "--replace writes a new pack from this port alone"
    try:
        pack = read_verified_pack(root)
    except PackIntegrityError as exc:
        raise PackIntegrityError(f"cannot merge into the existing pack: {exc} (`porter pack "
                                 f"verify {root}` lists every problem; {hint})") from None
    except PackError as exc:
        raise PackError(f"cannot merge into the existing pack: {exc} ({hint})") from None
    m = pack.manifest
    old_sig = [str(k) for k in m.get("signature") or []]
    new_sig = [str(k) for k in result.signature]
    if m["op"] != result.op or old_sig != new_sig:
        raise PackError(f"cannot merge into {root}: it holds op {m['op']!r} taking "
                        f"({', '.join(old_sig)}), this port is {result.op!r} taking "
                        f"({', '.join(new_sig)}): a different op under the same name; {hint}, "
                        "or choose another --out")
    old_ref = pack.files[m["reference"]["file"]]
    new_ref = Path(result.spec_path).read_bytes()
    if old_ref != new_ref or m["reference"].get("function") != result.reference_function:
        raise PackError(f"cannot merge into {root}: its reference {m['reference']['file']} "
                        f"(sha256 {sha256_bytes(old_ref)[:12]}) is not this port's "
                        f"{result.spec_path} (sha256 {sha256_bytes(new_ref)[:12]}), and its "
                        f"entries were checked against it; {hint}, or choose another --out")
    return _OldPack(m, pack.files)


def _write_entry(staging: Path, result: PortResult, tr: Any,
                 provenance: dict[str, Any]) -> dict[str, Any]:
    """Write one target's kernel files into the staging folder and return its manifest entry."""
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
        if tr.backend == "metal":
            _metal_bucket(buckets[-1], choice.source)
    tiers = [b["tier"] for b in buckets]
    return {
        "target": tr.target,
        "vendor": tr.vendor,
        "backend": tr.backend,
        "arch": tr.arch,
        "tier": min(tiers, key=tier_rank) if tiers else "none",
        "hw_model_hash": tr.hw_model_hash,
        "tolerance": tr.tolerance,
        "notes": list(tr.notes),
        "provenance": provenance,
        "buckets": buckets,
    }


def _merge_entries(
    old: list[dict[str, Any]], fresh: dict[str, dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Entries of the merged pack (the old order, new targets after), the old ones it carries,
    and notes on what was kept or downgraded."""
    fresh = dict(fresh)
    merged: list[dict[str, Any]] = []
    carried: list[dict[str, Any]] = []
    notes: list[str] = []
    untouched: list[str] = []
    for entry in old:
        target = entry["target"]
        new = fresh.pop(target, None)
        if new is None:
            untouched.append(target)
            carried.append(entry)
            merged.append(entry)
        elif not new["buckets"] and entry.get("buckets"):
            # Nothing passed this time (a budget ran out, a new compiler broke it): that is no
            # reason to lose a kernel that passed before.
            carried.append(entry)
            merged.append(entry)
            notes.append(f"{target}: this port kept no kernel, so the pack's existing {target} "
                         f"entry stays (tier {entry.get('tier', '?')}, "
                         f"{len(entry['buckets'])} bucket(s))")
        else:
            merged.append(new)
            if tier_rank(new["tier"]) < tier_rank(entry.get("tier", "")):
                notes.append(f"{target}: replaced the pack's {entry.get('tier')} entry with "
                             f"this port's {new['tier']} one")
    merged.extend(fresh.values())
    if untouched:
        notes.insert(0, f"kept the pack's existing entries of {', '.join(untouched)} (this "
                        "port wrote none for them; their files verified and carried over)")
    return merged, carried, notes


def _put_file(staging: Path, rel: str, data: bytes) -> None:
    """Write a carried file into the staging folder; two different contents for one path is a
    conflict between the old pack and the new entries, refused rather than overwritten."""
    path = staging / rel
    if path.exists():
        if path.read_bytes() != data:
            raise PackError(f"{rel}: the existing pack and this port both write it with different "
                            "contents; pass --replace to keep only this port's")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _swap_in(staging: Path, root: Path) -> None:
    """Put the staged pack at `root`; the old folder goes only once the new one is in place."""
    if not root.exists() and not root.is_symlink():
        staging.rename(root)
        return
    trash = root.with_name(f".{root.name}.old-{uuid.uuid4().hex[:8]}")
    root.rename(trash)
    staging.rename(root)
    if trash.is_symlink():
        trash.unlink()
    else:
        shutil.rmtree(trash)


# -- reading and verifying ------------------------------------------------------------------
def normalize_sha256(text: str) -> str:
    """A sha256 hex digest as given by a user ("sha256:" prefix and case allowed), normalized.

    Raises:
        PackError: not 64 hex digits.
    """
    digest = text.strip().lower().removeprefix("sha256:")
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise PackError(f"{text!r} is not a sha256 (64 hex digits, as `porter pack show` prints)")
    return digest


def _manifest_bytes(pack_dir: Path) -> bytes:
    path = pack_dir / MANIFEST
    if not path.is_file():
        raise PackError(f"{path}: no manifest; is {pack_dir} a pack folder written by `porter port`?")
    return path.read_bytes()


def manifest_sha256(pack_dir: str | Path) -> str:
    """sha256 of a pack's manifest.yaml: it lists every file's sha256, so it pins the whole pack.

    Raises:
        PackError: no manifest.
    """
    return sha256_bytes(_manifest_bytes(Path(pack_dir)))


def read_manifest(pack_dir: str | Path) -> dict[str, Any]:
    """Load and sanity-check `manifest.yaml` of a pack.

    Raises:
        PackError: no manifest, not YAML, another format, or a required key missing or malformed.
    """
    path = Path(pack_dir) / MANIFEST
    return parse_manifest(path, _manifest_bytes(Path(pack_dir)))


def parse_manifest(path: Path, data: bytes) -> dict[str, Any]:
    """Parse and sanity-check a manifest's bytes (`path` names it in messages).

    Raises:
        PackError: as `read_manifest`.
    """
    try:
        manifest = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise PackError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise PackError(f"{path}: format: expected {FORMAT!r}, got {got!r}")
    for key in ("op", "files", "entries", "reference"):
        if key not in manifest:
            raise PackError(f"{path}: {key}: missing")
    # The shapes every reader relies on, so a malformed manifest is one line, not a KeyError.
    files = manifest["files"]
    if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise PackError(f"{path}: files: expected a mapping of relative path -> sha256")
    ref = manifest["reference"]
    if not isinstance(ref, dict) or not isinstance(ref.get("file"), str):
        raise PackError(f"{path}: reference.file: expected a relative path")
    if not isinstance(manifest["entries"], list):
        raise PackError(f"{path}: entries: expected a list")
    for i, e in enumerate(manifest["entries"]):
        if not isinstance(e, dict) or not isinstance(e.get("target"), str):
            raise PackError(f"{path}: entries[{i}].target: expected a target name")
        buckets = e.setdefault("buckets", [])
        if not isinstance(buckets, list) or not all(
                isinstance(b, dict) and isinstance(b.get("file"), str) for b in buckets):
            raise PackError(f"{path}: entries[{i}].buckets: expected a list of buckets, each "
                            "with a file")
    return manifest


def manifest_paths(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """Every path a manifest names, with its field: ("files", rel), ("reference.file", rel),
    ("entries[0].buckets[1].file", rel), ..."""
    paths = [("files", rel) for rel in manifest["files"]]
    paths.append(("reference.file", manifest["reference"]["file"]))
    for i, e in enumerate(manifest["entries"]):
        paths.extend((f"entries[{i}].buckets[{j}].file", b["file"])
                     for j, b in enumerate(e["buckets"]))
    return paths


def resolve_in_pack(pack_dir: str | Path, rel: str, field: str) -> Path:
    """The real path of the manifest path `rel`, checked to lie inside the pack.

    Args:
        pack_dir: the pack folder.
        rel: a path from the manifest, relative to the pack, "/"-separated.
        field: the manifest field holding it, for the message (e.g. "entries[0].buckets[1].file").

    Raises:
        PackPathError: naming the field and the path: empty, absolute, with "..", or resolving
            (through a symlink) outside the pack.
    """
    where = f"{Path(pack_dir) / MANIFEST}: {field}: {rel!r}"
    if not rel.strip() or "\\" in rel or "\0" in rel:
        raise PackPathError(f"{where}: not a '/'-separated path relative to the pack")
    if PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).drive:
        raise PackPathError(f"{where}: an absolute path leads out of the pack; a pack names "
                            "its files relative to its own folder")
    if ".." in PurePosixPath(rel).parts:
        raise PackPathError(f"{where}: '..' leads out of the pack")
    root = Path(pack_dir).resolve()
    real = (root / rel).resolve()
    if not real.is_relative_to(root):
        raise PackPathError(f"{where}: a symlink leads out of the pack, to {real}")
    return real


def path_problems(pack_dir: str | Path, manifest: dict[str, Any]) -> list[PackIntegrityError]:
    """Every manifest path that leads out of the pack, or that a reader would load although the
    manifest lists no sha256 for it; empty when all are fine."""
    fields_of: dict[str, list[str]] = {}  # one problem per path, naming the fields that hold it
    for field, rel in manifest_paths(manifest):
        fields_of.setdefault(rel, []).append(field)
    problems: list[PackIntegrityError] = []
    for rel, fields in fields_of.items():
        field = ", ".join(fields[:2]) + (f" and {len(fields) - 2} more" if len(fields) > 2 else "")
        try:
            resolve_in_pack(pack_dir, rel, field)
        except PackPathError as exc:
            problems.append(exc)
            continue
        if rel not in manifest["files"]:
            problems.append(PackIntegrityError(
                f"{Path(pack_dir) / MANIFEST}: {field}: {rel!r} is not listed under files:, so "
                "its sha256 is unknown; refusing it"))
    return problems


def read_verified(pack_dir: str | Path, manifest: dict[str, Any], rel: str) -> bytes:
    """Read one pack file once, check it against the manifest, and return those very bytes.

    Whoever runs or copies a pack file uses the returned bytes, never the file again: a file
    changed after this check is never used.

    Raises:
        PackPathError: `rel` leads out of the pack.
        PackIntegrityError: the file is unlisted, missing, or its sha256 differs.
    """
    real = resolve_in_pack(pack_dir, rel, "files")
    path = Path(pack_dir) / rel
    expected = manifest["files"].get(rel)
    if expected is None:
        raise PackIntegrityError(f"{path}: not listed in {Path(pack_dir) / MANIFEST} files:; "
                                 "refusing it")
    try:
        data = real.read_bytes()
    except OSError:
        raise PackIntegrityError(f"{path}: listed in the manifest but missing") from None
    actual = sha256_bytes(data)
    if actual != expected:
        raise PackIntegrityError(
            f"{path}: sha256 {actual[:16]}... differs from the manifest's {expected[:16]}...; "
            "the file was changed after the pack was written. Re-run `porter port` or restore it."
        )
    return data


def verify_files(pack_dir: str | Path, manifest: dict[str, Any], rel_paths: Sequence[str]) -> None:
    """Check the sha256 of each named file against the manifest.

    Raises:
        PackIntegrityError: naming the first file that is missing, unlisted, changed or outside.
    """
    for rel in rel_paths:
        read_verified(pack_dir, manifest, rel)


@dataclass(frozen=True)
class VerifiedPack:
    """A pack read once and checked whole: its manifest and the exact bytes of every file."""

    path: Path
    manifest: dict[str, Any]
    manifest_sha256: str
    files: dict[str, bytes]  # relative path -> the bytes whose sha256 matched


def read_verified_pack(pack_dir: str | Path, *, expect_sha256: str | None = None) -> VerifiedPack:
    """Read a pack for use: the manifest (checked against a pinned sha256 if given) and every
    file it lists, each path checked to lie inside the pack and each sha256 checked.

    Raises:
        PackError: no manifest, or a malformed one.
        PackIntegrityError: the manifest is not the pinned one; a path leads outside the pack
            (`PackPathError`); a file is missing, unlisted or changed. Names the first problem.
    """
    root = Path(pack_dir)
    data = _manifest_bytes(root)
    digest = sha256_bytes(data)
    if expect_sha256 is not None and digest != normalize_sha256(expect_sha256):
        raise PackIntegrityError(_pin_mismatch(root, digest, expect_sha256))
    manifest = parse_manifest(root / MANIFEST, data)
    problems = path_problems(root, manifest)
    if problems:
        raise problems[0]
    files = {rel: read_verified(root, manifest, rel) for rel in sorted(manifest["files"])}
    return VerifiedPack(root, manifest, digest, files)


def _pin_mismatch(root: Path, digest: str, expected: str) -> str:
    return (f"{root / MANIFEST}: sha256 {digest} is not the expected "
            f"{normalize_sha256(expected)}: this is not the pack you pinned")


@dataclass(frozen=True)
class VerifyReport:
    """What `verify_pack` found: one sentence per problem; no problems means the pack is intact."""

    path: Path
    manifest_sha256: str
    files_checked: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_pack(pack_dir: str | Path, *, expect_sha256: str | None = None) -> VerifyReport:
    """Check a whole pack as the loader would, listing every problem instead of the first.

    Raises:
        PackError: no manifest, or a malformed one that was not pinned (a pinned manifest that
            differs is reported as a problem instead); a malformed `expect_sha256`.
    """
    root = Path(pack_dir)
    expected = normalize_sha256(expect_sha256) if expect_sha256 is not None else None
    data = _manifest_bytes(root)
    digest = sha256_bytes(data)
    problems: list[str] = []
    if expected is not None and digest != expected:
        problems.append(_pin_mismatch(root, digest, expected))
    try:
        manifest = parse_manifest(root / MANIFEST, data)
    except PackError:
        if problems:
            return VerifyReport(root, digest, 0, tuple(problems))
        raise
    problems.extend(str(p) for p in path_problems(root, manifest))
    checked = 0
    for rel in sorted(manifest["files"]):
        try:
            resolve_in_pack(root, rel, "files")
        except PackPathError:
            continue  # reported above; a file outside the pack is never read
        checked += 1
        try:
            read_verified(root, manifest, rel)
        except PackIntegrityError as exc:
            problems.append(str(exc))
    return VerifyReport(root, digest, checked, tuple(problems))


def entry_files(entry: dict[str, Any]) -> list[str]:
    """Relative paths of every file an entry uses (one per bucket, de-duplicated)."""
    return sorted({b["file"] for b in entry.get("buckets", ())})


def _metal_bucket(bucket: dict[str, Any], source: str) -> None:
    """A Metal bucket carries what a host needs to dispatch it (porter.mps reads the same line
    from the verified source), and its time says its expected error is not known."""
    from targets.metal_host import DispatchError
    from targets.metal_host import manifest_entry

    try:
        bucket["dispatch"] = manifest_entry(source, bucket["shape"])
    except DispatchError as exc:
        log.warning("%s: no dispatch info for the manifest: %s", bucket["file"], exc)
    if bucket["numbers"].get("label") == "projected":
        bucket["numbers"].setdefault(
            "expected_error", "unknown until measured: no Apple GPU has run these kernels")


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
