"""Reading a pack and checking its integrity: the manifest parsed and pinned by its sha256, every
path inside the pack, every file with its listed sha256 (the bytes that were checked are the
bytes handed out). Used by the loader, `porter pack show` and `porter pack verify` alike."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from pathlib import PurePosixPath
from pathlib import PureWindowsPath
from typing import TYPE_CHECKING
from typing import Any

import yaml

from porter.packs.format import FORMAT
from porter.packs.format import MANIFEST
from porter.packs.format import PackError
from porter.packs.format import PackIntegrityError
from porter.packs.format import PackPathError
from porter.packs.format import sha256_bytes

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)


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
        raise PackError(
            f"{path}: no manifest; is {pack_dir} a pack folder written by `porter port`?"
        )
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
        for j, b in enumerate(buckets):
            if (why := config_problem(b.get("config"))) is not None:
                raise PackError(f"{path}: entries[{i}].buckets[{j}].config: {why}")
    return manifest


# Config knobs a launcher does arithmetic with: an int there and nowhere else (`BLOCK_N: "lots"`
# passed every check and failed inside the launcher with a bare TypeError, issue 48).
INT_KNOBS = frozenset({"num_warps", "num_stages", "maxnreg", "waves_per_eu",
                       "matrix_instr_nonkdim", "ROWS", "SPLIT", "PROGRAMS_PER_SM", "LANES",
                       "GROUP_M", "RESIDENT_BYTES", "VEC", "STAGES"})


def config_problem(config: Any) -> str | None:
    """Why a bucket's config cannot be a launcher's (a key of the wrong type), or None."""
    if config is None:
        return None
    if not isinstance(config, dict):
        return f"expected a mapping of knob -> value, got {type(config).__name__}"
    for key, value in config.items():
        if not isinstance(key, str):
            return f"knob {key!r}: expected a name"
        if value is not None and not isinstance(value, (bool, int, float, str)):
            return f"{key}: expected a number, a flag or a name, got {type(value).__name__}"
        if (key in INT_KNOBS or key.startswith("BLOCK_")) and (
                isinstance(value, bool) or not isinstance(value, int)):
            return f"{key}: expected an integer, got {value!r}"
    return None


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
