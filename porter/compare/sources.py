"""Where the numbers come from: the op's best measured records, eager times and copy curves in
the results store, its pack's buckets, and bytes and FLOPs per shape (store, pack, else the
op's spec)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.store import Record
from harness.store import ResultsStore
from porter.compare.table import COPY_OP
from porter.compare.table import DEFAULT_PACKS
from porter.compare.table import CompareError
from porter.compare.table import Key


@dataclass
class Sources:
    op: str
    pack: dict[str, Any] | None  # the manifest
    pack_dir: Path | None
    measured: dict[str, dict[Key, Record]]  # device -> key -> best measured record
    eager: dict[str, dict[Key, float]]  # device -> key -> eager ms
    copies: dict[str, list[tuple[float, float]]]  # device -> (bytes, ms) copy samples
    costs: dict[Key, tuple[int, int]]  # key -> (bytes, flops)


def resolve_op(op_or_pack: str, packs_dir: Path = DEFAULT_PACKS) -> tuple[str, Path | None]:
    """An op name or a pack folder -> (op name, pack folder or None)."""
    from porter.packs.verify import read_manifest

    p = Path(op_or_pack)
    if (p / "manifest.yaml").is_file():
        return str(read_manifest(p)["op"]), p
    if p.exists() and not p.is_dir():
        raise CompareError(f"{p}: not a pack folder (no manifest.yaml) nor an op name")
    candidate = packs_dir / op_or_pack
    if (candidate / "manifest.yaml").is_file():
        return str(read_manifest(candidate)["op"]), candidate
    return op_or_pack, None


def gather(op: str, pack_dir: Path | None, store: ResultsStore | None,
           devices: Sequence[str]) -> Sources:
    from porter.packs.verify import read_verified_pack

    # verified as load_pack verifies it: a tampered pack's numbers are evidence of nothing
    manifest = read_verified_pack(pack_dir).manifest if pack_dir is not None else None
    measured: dict[str, dict[Key, Record]] = {}
    eager: dict[str, dict[Key, float]] = {}
    copies: dict[str, list[tuple[float, float]]] = {}
    costs: dict[Key, tuple[int, int]] = {}
    if store is not None:
        wanted = set(devices) | {r.device for r in store.history(op)}
        for dev in sorted(wanted):
            for rec in store.best(op, dev):
                if rec.tier != "measured":
                    continue
                key = (tuple(rec.shape), rec.dtype)
                measured.setdefault(dev, {})[key] = rec
                b, f = rec.metrics.get("bytes_moved"), rec.metrics.get("flops")
                if b:
                    costs.setdefault(key, (int(b), int(f or 0)))
            for rec in store.history(f"{op}@eager", dev):
                if rec.passed and rec.median_ms:
                    eager.setdefault(dev, {})[(tuple(rec.shape), rec.dtype)] = rec.median_ms
            for rec in store.history(COPY_OP, dev):
                if rec.passed and rec.median_ms and rec.shape:
                    copies.setdefault(dev, []).append((float(rec.shape[0]), rec.median_ms))
    if manifest is not None:
        for entry in manifest["entries"]:
            for b in entry.get("buckets") or ():
                n = b.get("numbers") or {}
                key = (tuple(b.get("shape") or ()), str(b.get("dtype", "")))
                if n.get("bytes_moved"):
                    costs.setdefault(key, (int(n["bytes_moved"]), int(n.get("flops") or 0)))
    return Sources(op=op, pack=manifest, pack_dir=pack_dir, measured=measured, eager=eager,
                   copies=copies, costs=costs)


def pack_bucket(src: Sources, device: str, key: Key) -> tuple[dict[str, Any], str] | None:
    if src.pack is None:
        return None
    for entry in src.pack["entries"]:
        if entry["target"] != device:
            continue
        for b in entry.get("buckets") or ():
            if (tuple(b.get("shape") or ()), str(b.get("dtype", ""))) == key:
                return b, str(entry.get("tier", ""))
    return None


def spec_costs(src: Sources, keys: Sequence[Key]) -> None:
    """Fill bytes/FLOPs the store and pack lack from the op's spec (examples/<op>/spec.py or the
    pack's spec path), computed on the meta device."""
    missing = [k for k in keys if k not in src.costs]
    if not missing:
        return
    spec_path = None
    if src.pack is not None and src.pack.get("spec") and Path(src.pack["spec"]).is_file():
        spec_path = Path(src.pack["spec"])
    else:
        guess = Path(__file__).resolve().parents[2] / "examples" / src.op / "spec.py"
        spec_path = guess if guess.is_file() else None
    if spec_path is None:
        return
    from porter.planner import op_cost
    from porter.specs import load_spec
    from targets.dtypes import FLOAT_NAMES
    from targets.dtypes import torch_dtype

    problem = load_spec(spec_path).problem()
    for shape, dtype in missing:
        if dtype in FLOAT_NAMES:
            src.costs[(shape, dtype)] = op_cost(problem, shape, torch_dtype(dtype))
