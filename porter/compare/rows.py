"""One row per device and shape: measured (store, else a pack's measured bucket), else a
measured time on another device transferred to this one, else a first-principles projection;
each placed on the device's roofline."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import hwmodels
from harness import projection
from harness import transfer
from harness.roofline import analyze
from porter.compare.expected import expected_error_for
from porter.compare.sources import Sources
from porter.compare.sources import pack_bucket
from porter.compare.table import Key
from porter.compare.table import Row

log = logging.getLogger(__name__)


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


def _calibration_for(target: str, key: Key, src: Sources) -> str | None:
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


def _transfer(src: Sources, cal: str, target: str, key: Key, cost: tuple[int, int] | None
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


def device_row(src: Sources, dev: str, hw: hwmodels.HardwareModel, key: Key,
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
    bucket = pack_bucket(src, dev, key)
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
