"""`compare`: the op's rows on every device and shape, the portability score (geometric mean
of each device's % of peak) and, with a fleet, its calls per second and cost per shape."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import hwmodels
from harness.store import ResultsStore
from porter.compare.expected import load_expected_error
from porter.compare.rows import device_row
from porter.compare.sources import gather
from porter.compare.sources import resolve_op
from porter.compare.sources import spec_costs
from porter.compare.table import DEFAULT_PACKS
from porter.compare.table import DEFAULT_STORE
from porter.compare.table import DEFAULT_VALIDATION
from porter.compare.table import CompareError
from porter.compare.table import Comparison
from porter.compare.table import Row
from porter.fleet import Fleet
from porter.fleet import fleet_summary


def _geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def compare(op_or_pack: str, devices: Sequence[str], *, store_path: str | Path | None = None,
            packs_dir: str | Path = DEFAULT_PACKS,
            validation_path: str | Path = DEFAULT_VALIDATION,
            shapes: Sequence[tuple[int, ...]] | None = None, dtype: str | None = None,
            fleet: Fleet | None = None) -> Comparison:
    """Build the comparison (see the module docstring).

    Args:
        op_or_pack: an op name (looked up in `packs_dir` and the store) or a pack folder.
        devices: hardware model names or aliases.
        store_path: the results store (None: `runs/results.sqlite` if it exists).
        packs_dir: where packs named by op live.
        validation_path: projection-validation.json (error bars).
        shapes: only these shapes (default: every shape the store or the pack has).
        dtype: only this dtype (default: bf16 when present, else every dtype).
        fleet: also compute the fleet's calls/s and cost per million calls per shape.

    Raises:
        CompareError: nothing is known about the op, or the validation file is missing.
        hwmodels.UnknownDeviceError: an unknown device name.
    """
    names = [hwmodels.get(d).name for d in devices]
    names = list(dict.fromkeys(names))
    op, pack_dir = resolve_op(op_or_pack, Path(packs_dir))
    expected = load_expected_error(validation_path)
    store = None
    sp = Path(store_path) if store_path is not None else DEFAULT_STORE
    if sp.is_file():
        store = ResultsStore(sp, fill_env=False)
    elif store_path is not None:
        raise CompareError(f"{sp}: no such results store")
    try:
        src = gather(op, pack_dir, store, names)
    finally:
        if store is not None:
            store.close()
    keys = sorted({k for recs in src.measured.values() for k in recs} |
                  ({(tuple(b.get("shape") or ()), str(b.get("dtype", "")))
                    for e in src.pack["entries"] for b in e.get("buckets") or ()}
                   if src.pack else set()))
    if not keys:
        where = f"pack {pack_dir}" if pack_dir else f"{packs_dir}/{op}"
        raise CompareError(f"{op}: no measured records in {sp} and no pack ({where}); port it "
                           f"(`porter port`) or import results (`porter store import`)")
    if dtype is None and any(d == "bf16" for _, d in keys):
        dtype = "bf16"
    if dtype is not None:
        keys = [k for k in keys if k[1] == dtype]
    if shapes:
        wanted = {tuple(s) for s in shapes}
        keys = [k for k in keys if k[0] in wanted]
    if not keys:
        raise CompareError(f"{op}: no shape matches --shape/--dtype")
    spec_costs(src, keys)
    keys.sort(key=lambda k: (src.costs.get(k, (math.prod(k[0]), 0))[0], k))
    rows: list[Row] = []
    notes: list[str] = []
    for dev in names:
        hw = hwmodels.get(dev)
        for key in keys:
            rows.append(device_row(src, dev, hw, key, expected))
    per_device = {d: _geomean([r.pct_peak or 0.0 for r in rows if r.device == d])
                  for d in names}
    portability = _geomean([v for v in per_device.values() if v])
    missing = [d for d, v in per_device.items() if v is None]
    if missing:
        notes.append(f"no kernel and no projection for {', '.join(missing)}: left out of the "
                     f"portability score")
    fleet_out = None
    if fleet is not None:
        fleet_out = {"name": fleet.name, "currency": fleet.currency, "source": fleet.source,
                     "devices": [asdict(d) for d in fleet.devices], "per_shape": []}
        for key in keys:
            times = {r.device: r.time_ms for r in rows if (r.shape, r.dtype) == key}
            summary = fleet_summary(fleet, times)
            fleet_out["per_shape"].append({"shape": list(key[0]), "dtype": key[1], **summary})
    return Comparison(op=op, devices=names, keys=keys, rows=rows, portability=portability,
                      per_device_pct=per_device, validation_source=_display(validation_path),
                      fleet=fleet_out, notes=notes)


def _display(path: str | Path) -> str:
    """A path relative to the working directory when it is under it (reports move)."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)
