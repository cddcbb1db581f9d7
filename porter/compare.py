"""Compare one op across devices: measured where we have the device, projected where we don't.

For each device and each of the op's shapes, the best kernel the porter has for it:

1. **measured** - the fastest passing measured record in the results store (`store.best`), else a
   pack bucket whose numbers were measured on that device;
2. **projected, transferred** - a measured time on another device carried over with
   `harness.transfer.transfer`: the calibration device's copy curve (from `device_copy` records
   in the store) fitted to a `CopyModel` and moved to the target's LLC and copy ceiling, the
   latency-bound branch fitted on the calibration device's rows of the op. Without a copy curve,
   the calibration time scaled by the ratio of the two devices' ceilings. This is the model
   `python -m bench.validate_projection` validated H100 <-> H200; its error bar comes from the
   JSON that validation wrote (`results/projection-validation.json`), never from a constant here;
3. **projected, first principles** - the pack's own projected numbers for the target (written by
   `porter port` from the hardware model), else `harness.projection.project` from bytes and FLOPs.

Each row carries % of that device's peak (the measured ceiling where the hardware model has one,
the datasheet otherwise, and which), GB/s or TFLOP/s, speedup over eager PyTorch where measured,
the tier, and for a projection its expected error and whether that error was validated.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import hwmodels
from harness import projection
from harness import transfer
from harness.roofline import analyze
from harness.store import Record
from harness.store import ResultsStore
from porter.errors import PorterError
from porter.fleet import Fleet
from porter.fleet import fleet_summary

log = logging.getLogger(__name__)

COPY_OP = "device_copy"  # store op name of a same-size device copy (shape: [bytes])
DEFAULT_STORE = Path("runs/results.sqlite")
DEFAULT_PACKS = Path("packs")
DEFAULT_VALIDATION = Path(__file__).resolve().parents[1] / "results" / \
    "projection-validation.json"
ALL_DEVICES = ("a100", "h100", "h200", "b200", "mi300x", "mi355x", "m4")

Key = tuple[tuple[int, ...], str]  # (shape, dtype)


class CompareError(PorterError):
    """`porter compare` cannot run: no such op, pack or validation file (the message says)."""


@dataclass
class Row:
    """One device at one shape and dtype."""

    device: str
    shape: tuple[int, ...]
    dtype: str
    label: str  # "measured" | "projected"
    time_ms: float | None
    tier: str = ""
    kernel: str = ""  # the config, as text
    source: str = ""  # where the number comes from
    bound: str = ""
    gbps: float | None = None
    tflops: float | None = None
    pct_peak: float | None = None
    peak_basis: str = ""  # "measured ceiling" | "datasheet"
    speedup_vs_eager: float | None = None
    error_pct: float | None = None  # expected error of a projection (p90, percent)
    validated: bool | None = None  # was that error measured on this device pair?
    calibration: str | None = None  # the measured device a transfer started from

    @property
    def projected(self) -> bool:
        return self.label == "projected"


@dataclass
class Comparison:
    op: str
    devices: list[str]
    keys: list[Key]
    rows: list[Row]
    portability: float | None  # geometric mean over devices of each device's % of peak
    per_device_pct: dict[str, float | None]
    validation_source: str
    fleet: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def row(self, device: str, key: Key) -> Row | None:
        for r in self.rows:
            if r.device == device and (r.shape, r.dtype) == key:
                return r
        return None

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "devices": self.devices,
                "shapes": [{"shape": list(s), "dtype": d} for s, d in self.keys],
                "portability_pct": self.portability, "per_device_pct": self.per_device_pct,
                "validation_source": self.validation_source, "fleet": self.fleet,
                "notes": self.notes,
                "rows": [{**asdict(r), "shape": list(r.shape)} for r in self.rows]}


# -- expected error (from the validation's JSON) -----------------------------------------------

def load_expected_error(path: str | Path = DEFAULT_VALIDATION) -> dict[str, Any]:
    """The `expected_error` object `python -m bench.validate_projection` wrote.

    Raises:
        CompareError: the file is missing or has no `expected_error`.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text())
        return dict(data["expected_error"])
    except FileNotFoundError:
        raise CompareError(f"{p}: no projection validation; run `python -m "
                           f"bench.validate_projection` to write it") from None
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CompareError(f"{p}: not a projection validation ({exc})") from None


def expected_error_for(device: str, expected: dict[str, Any], *, calibration: str | None,
                       method: str) -> tuple[float, bool]:
    """(expected error in percent, validated?) for a projected row.

    Args:
        device: the projected device.
        expected: `load_expected_error()`.
        calibration: the measured device a transfer starts from (None for first principles).
        method: "copy-model transfer", "ceiling-ratio transfer" or "first principles".

    The validated figure applies only when both devices are a validated pair and the method is a
    transfer; everything else is the validated figure widened by the stated factor for the vendor,
    and labelled unvalidated.
    """
    base = float(expected["naive_ceiling_ratio_p90_pct" if method == "ceiling-ratio transfer"
                          else "hwmodel_only_p90_pct"])
    pair = set(expected["validated_devices"])
    if method != "first principles" and device in pair and calibration in pair:
        return base, True
    vendor = hwmodels.get(device).vendor
    factor = float(expected["widen_same_vendor"] if vendor in expected["validated_vendors"]
                   else expected["widen_other_vendor"])
    return base * factor, False


# -- where the numbers come from ----------------------------------------------------------------

@dataclass
class _Source:
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


def _gather(op: str, pack_dir: Path | None, store: ResultsStore | None,
            devices: Sequence[str]) -> _Source:
    from porter.packs.verify import read_manifest

    manifest = read_manifest(pack_dir) if pack_dir is not None else None
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
    return _Source(op=op, pack=manifest, pack_dir=pack_dir, measured=measured, eager=eager,
                   copies=copies, costs=costs)


def _pack_bucket(src: _Source, device: str, key: Key) -> tuple[dict[str, Any], str] | None:
    if src.pack is None:
        return None
    for entry in src.pack["entries"]:
        if entry["target"] != device:
            continue
        for b in entry.get("buckets") or ():
            if (tuple(b.get("shape") or ()), str(b.get("dtype", ""))) == key:
                return b, str(entry.get("tier", ""))
    return None


def _spec_costs(src: _Source, keys: Sequence[Key]) -> None:
    """Fill bytes/FLOPs the store and pack lack from the op's spec (examples/<op>/spec.py or the
    pack's spec path), computed on the meta device."""
    missing = [k for k in keys if k not in src.costs]
    if not missing:
        return
    spec_path = None
    if src.pack is not None and src.pack.get("spec") and Path(src.pack["spec"]).is_file():
        spec_path = Path(src.pack["spec"])
    else:
        guess = Path(__file__).resolve().parents[1] / "examples" / src.op / "spec.py"
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


# -- the comparison -----------------------------------------------------------------------------

def _geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def _fill_roofline(row: Row, hw: hwmodels.HardwareModel, cost: tuple[int, int] | None) -> None:
    if row.time_ms is None or cost is None:
        return
    nbytes, flops = cost
    roof = analyze(nbytes, flops, row.time_ms, hw, row.dtype)
    if row.projected and roof.floor_ms > row.time_ms:
        # A projection never beats the datasheet speed of light (a measurement that did would
        # be flagged by the judge); hold it there and say so.
        row.time_ms = roof.floor_ms
        row.source += " (held at the speed of light)"
        roof = analyze(nbytes, flops, row.time_ms, hw, row.dtype)
    row.bound = roof.bound
    row.gbps = roof.achieved_gbps
    row.tflops = roof.achieved_tflops
    meas = roof.pct_measured_peak
    if meas is not None:
        row.pct_peak, row.peak_basis = meas, "measured ceiling"
    else:
        row.pct_peak, row.peak_basis = roof.pct_peak, "datasheet"


def _config_text(config: dict[str, Any]) -> str:
    cfg = {k: v for k, v in config.items() if k != "dtype"}
    return " ".join(f"{k}={v}" for k, v in cfg.items()) or "-"


def _calibration_for(target: str, key: Key, src: _Source) -> str | None:
    """The measured device to transfer from: a validated partner first, then the same vendor,
    then any, preferring one with a copy curve."""
    have = [d for d, recs in src.measured.items() if key in recs and d != target]
    if not have:
        return None
    vendor = hwmodels.get(target).vendor

    def rank(d: str) -> tuple[int, int, str]:
        hw = hwmodels.get(d)
        return (0 if hw.vendor == vendor else 1, 0 if d in src.copies else 1, d)

    return sorted(have, key=rank)[0]


def _ceilings(hw: hwmodels.HardwareModel) -> tuple[float, float | None]:
    bw = (hw.measured_value("copy_bandwidth_gbps") or
          hw.peak_bandwidth_gbps * projection.DEFAULT_BW_EFFICIENCY)
    peak = hw.peak_tflops("bf16")
    fl = hw.measured_value("matmul_bf16_tflops") or (
        peak * projection.DEFAULT_FLOP_EFFICIENCY if peak else None)
    return bw, fl


def _transfer(src: _Source, cal: str, target: str, key: Key, cost: tuple[int, int] | None
              ) -> tuple[float, str, str] | None:
    """(time ms, method, source text) of the cal device's measured kernel carried to target."""
    rec = src.measured[cal][key]
    t_cal = rec.median_ms
    if t_cal is None or cost is None:
        return None
    cal_hw, tgt_hw = hwmodels.get(cal), hwmodels.get(target)
    nbytes, flops = cost
    bw_cal, fl_cal = _ceilings(cal_hw)
    bw_tgt, fl_tgt = _ceilings(tgt_hw)
    roof = analyze(nbytes, flops, t_cal, cal_hw, key[1])
    if roof.bound == "compute":
        if not (fl_cal and fl_tgt):
            return None
        return (t_cal * fl_cal / fl_tgt, "ceiling-ratio transfer",
                f"{cal} measured x matmul ceilings {fl_cal:.0f}/{fl_tgt:.0f} TFLOP/s")
    samples = src.copies.get(cal) or []
    if len({b for b, _ in samples}) >= 3:
        cal_curve = transfer.SizeCurve.from_samples(cal, samples, source=f"{cal} copies")
        model = transfer.fit_copy_model(cal_curve, cal_hw.llc_bytes)
        note = ""
        if tgt_hw.vendor != cal_hw.vendor:
            # The dirty-LLC term was validated between two caches of one design (H100, H200
            # L2). Another vendor's last-level cache (AMD's memory-side Infinity Cache, Apple's
            # system cache) follows another policy: leave the term out rather than promise a
            # 256 MB cache behaves like a 50 MB L2.
            model = dataclasses.replace(model, dirty_fraction=0.0)
            note = ", no LLC term (other vendor)"
        tgt_curve = model.for_device(tgt_hw, bw_tgt / bw_cal).curve(
            [b for b, _ in cal_curve.points] + [nbytes], source=f"{cal} copy model on {target}")
        rows = [(src.op, float(r.metrics.get("bytes_moved") or src.costs.get(k, (0, 0))[0]),
                 float(r.median_ms or 0.0)) for k, r in src.measured[cal].items()]
        rows = [r for r in rows if r[1] > 0 and r[2] > 0]
        fit = transfer.fit_transfer(rows, cal_curve, llc_bytes=cal_hw.llc_bytes, device=cal)
        p = transfer.transfer(t_cal, nbytes, op=src.op, cal_curve=cal_curve,
                                target_curve=tgt_curve, fit=fit, cal_hw=cal_hw,
                                target_hw=tgt_hw)
        return p.time_ms, "copy-model transfer", f"{cal} measured, copy-model transfer{note}"
    return (t_cal * bw_cal / bw_tgt, "ceiling-ratio transfer",
            f"{cal} measured x copy ceilings {bw_cal:.0f}/{bw_tgt:.0f} GB/s")


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
        src = _gather(op, pack_dir, store, names)
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
    _spec_costs(src, keys)
    keys.sort(key=lambda k: (src.costs.get(k, (math.prod(k[0]), 0))[0], k))
    rows: list[Row] = []
    notes: list[str] = []
    for dev in names:
        hw = hwmodels.get(dev)
        for key in keys:
            rows.append(_row(src, dev, hw, key, expected))
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


def _row(src: _Source, dev: str, hw: hwmodels.HardwareModel, key: Key,
         expected: dict[str, Any]) -> Row:
    shape, dtype = key
    cost = src.costs.get(key)
    rec = src.measured.get(dev, {}).get(key)
    if rec is not None:
        row = Row(device=dev, shape=shape, dtype=dtype, label="measured", time_ms=rec.median_ms,
                  tier="measured", kernel=_config_text(rec.config),
                  source=f"store run {rec.run_id}")
        sp = rec.metrics.get("speedup_vs_eager")
        eager = src.eager.get(dev, {}).get(key)
        row.speedup_vs_eager = (float(sp) if sp else
                                (eager / rec.median_ms if eager and rec.median_ms else None))
        _fill_roofline(row, hw, cost)
        return row
    bucket = _pack_bucket(src, dev, key)
    if bucket is not None and (bucket[0].get("numbers") or {}).get("label") == "measured":
        b, _tier = bucket
        n = b["numbers"]
        row = Row(device=dev, shape=shape, dtype=dtype, label="measured", time_ms=n["time_ms"],
                  tier=str(b.get("tier", "measured")), kernel=_config_text(b.get("config") or {}),
                  source=f"pack {src.pack_dir}", speedup_vs_eager=n.get("speedup_vs_eager"))
        _fill_roofline(row, hw, cost)
        return row
    tier = str(bucket[0].get("tier", bucket[1])) if bucket else "none"
    kernel = _config_text(bucket[0].get("config") or {}) if bucket else "-"
    cal = _calibration_for(dev, key, src)
    moved = _transfer(src, cal, dev, key, cost) if cal else None
    if moved is not None:
        t, method, text = moved
        err, validated = expected_error_for(dev, expected, calibration=cal, method=method)
        row = Row(device=dev, shape=shape, dtype=dtype, label="projected", time_ms=t, tier=tier,
                  kernel=kernel, source=text, error_pct=err, validated=validated,
                  calibration=cal)
        _fill_roofline(row, hw, cost)
        return row
    t = None
    text = ""
    if bucket is not None and (bucket[0].get("numbers") or {}).get("time_ms"):
        t = float(bucket[0]["numbers"]["time_ms"])
        text = f"pack {src.pack_dir}: first-principles projection"
    elif cost is not None:
        nbytes, flops = cost
        try:
            t = projection.project(nbytes, flops, hw, dtype, grid=1 << 20).time_ms
            text = "first-principles projection (harness.projection.project)"
        except ValueError as exc:
            log.info("compare: no projection for %s at %s: %s", dev, key, exc)
    if t is None:
        return Row(device=dev, shape=shape, dtype=dtype, label="projected", time_ms=None,
                   tier=tier, kernel=kernel, source="no kernel, no projection")
    err, validated = expected_error_for(dev, expected, calibration=None,
                                        method="first principles")
    row = Row(device=dev, shape=shape, dtype=dtype, label="projected", time_ms=t, tier=tier,
              kernel=kernel, source=text, error_pct=err, validated=validated)
    _fill_roofline(row, hw, cost)
    return row
