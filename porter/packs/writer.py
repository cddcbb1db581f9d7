"""Writing a pack from a port's result: one file per distinct kernel source (named by its content),
every file's sha256; merged into an existing pack of the same op (other targets kept and
re-verified) or replacing it, swapped in whole."""

from __future__ import annotations

import datetime as _dt
import json
import logging
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

import yaml

from porter.packs.format import FORMAT
from porter.packs.format import MANIFEST
from porter.packs.format import REFERENCE
from porter.packs.format import PackError
from porter.packs.format import PackIntegrityError
from porter.packs.format import entry_files
from porter.packs.format import file_lock
from porter.packs.format import sha256_bytes
from porter.packs.format import sha256_file
from porter.packs.format import tier_rank
from porter.packs.format import vendor_dir
from porter.packs.verify import read_verified_pack

if TYPE_CHECKING:
    from porter.results import PortResult

log = logging.getLogger(__name__)


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
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    # Two ports writing into one pack read, merge and swap in turn: without the lock the later
    # swap could drop the earlier one's entry (a lost update)
    with file_lock(root.with_name(f".{root.name}.lock")):
        return _write_locked(result, root, replace)


def _write_locked(result: PortResult, root: Path, replace: bool) -> WrittenPack:
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
            "leading_dims": result.leading_dims,
            "files": files,
            "entries": entries,
        }
        # A JSON round trip turns str subclasses (torch's TorchVersion), tuples and paths into
        # plain YAML-safe values.
        manifest = json.loads(json.dumps(manifest, default=str))
        # Leaf mappings and lists on one line each (a bucket's config, shape and numbers): a
        # reviewer reads a bucket in a few lines instead of a screen.
        (staging / MANIFEST).write_text(yaml.safe_dump(manifest, sort_keys=False, width=100,
                                                       default_flow_style=None))
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
        ext = ".metal" if _language(tr.backend) == "metal" else ".py"
        # Named by content: buckets whose kernel module is the same (the config lives in the
        # manifest, not the source) share one file, so a reviewer reads each source once.
        data = choice.source.encode()
        rel = folder / f"{result.op}.{sha256_bytes(data)[:12]}{ext}"
        if not (staging / rel).exists():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_bytes(data)
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
        if _language(tr.backend) == "metal":
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


def _language(backend: str) -> str:
    """What a backend emits ("triton", "metal"), asked of the backend (its capabilities)."""
    import targets

    return targets.get_backend(backend).capabilities().language
