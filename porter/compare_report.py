"""Render a `porter.compare.Comparison`: terminal table, CSV, JSON, a PNG chart, an HTML report.

The chart needs matplotlib (`pip install kernel-porter[compare]`); everything else does not.
Left panel: each device's % of peak (geometric mean over the shapes, a dot per shape), solid for
measured, hatched for projected with its expected error (black: validated, grey: unvalidated).
Right panel: time per call across the shapes, one line per device, solid for measured, dashed
with a shaded expected-error band for projected.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from porter.compare import Comparison
    from porter.compare import Row

CHART_EXTRA = "pip install kernel-porter[compare]"
TABLE_HEADERS = ("device", "shape", "dtype", "time", "GB/s | TFLOP/s", "% peak", "x eager",
                 "tier", "number", "expected error", "kernel / source")


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def _rate(r: Row) -> str:
    if r.bound == "compute" and r.tflops is not None:
        return f"{r.tflops:.0f} TFLOP/s"
    return "-" if r.gbps is None else f"{r.gbps:.0f} GB/s"


def _err(r: Row) -> str:
    if not r.projected or r.error_pct is None:
        return "-"
    return f"±{r.error_pct:.0f}% " + ("validated" if r.validated else "unvalidated")


def table_rows(c: Comparison) -> list[list[str]]:
    out = []
    for r in c.rows:
        basis = "meas" if r.peak_basis == "measured ceiling" else "datasheet"
        out.append([
            r.device, _shape(r.shape), r.dtype,
            "-" if r.time_ms is None else f"{r.time_ms * 1e3:.1f} us",
            _rate(r),
            "-" if r.pct_peak is None else f"{r.pct_peak:.0f}% ({basis})",
            "-" if r.speedup_vs_eager is None else f"{r.speedup_vs_eager:.2f}x",
            r.tier, r.label, _err(r),
            (r.kernel if r.label == "measured" else r.source)[:48],
        ])
    return out


def summary_lines(c: Comparison) -> list[str]:
    lines = []
    per = ", ".join(f"{d} {v:.0f}%" if v else f"{d} -" for d, v in c.per_device_pct.items())
    score = "-" if c.portability is None else f"{c.portability:.1f}%"
    lines.append(f"portability score ({c.op}): {score} (geometric mean over devices of % of "
                 f"peak; per device: {per})")
    if c.fleet:
        cur = c.fleet["currency"]
        for s in c.fleet["per_shape"]:
            cost = s["cost_per_million_calls"]
            lines.append(
                f"fleet {c.fleet['name']} at {_shape(tuple(s['shape']))} {s['dtype']}: "
                f"{s['calls_per_s']:.3g} calls/s"
                + (f", {cost:.4g} {cur} per million calls" if cost is not None else
                   ", cost: give every device an hourly_price"))
    lines.append(f"expected errors: from {c.validation_source} (bench/validate_projection.py); "
                 "'unvalidated' = the validated H100<->H200 error widened by a stated factor")
    lines.extend(c.notes)
    return lines


def render_table(c: Comparison) -> str:
    from tabulate import tabulate

    return tabulate(table_rows(c), headers=TABLE_HEADERS) + "\n" + "\n".join(summary_lines(c))


def write_csv(c: Comparison, path: str | Path | io.TextIOBase) -> None:
    fields = ["op", "device", "shape", "dtype", "label", "time_ms", "tier", "gbps", "tflops",
              "pct_peak", "peak_basis", "speedup_vs_eager", "error_pct", "validated",
              "calibration", "kernel", "source"]

    def emit(fh: Any) -> None:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for r in c.rows:
            d = {k: getattr(r, k, None) for k in fields if k not in ("op", "shape")}
            w.writerow({"op": c.op, "shape": _shape(r.shape), **d})

    if isinstance(path, (str, Path)):
        with open(path, "w", newline="") as fh:
            emit(fh)
    else:
        emit(path)


def write_json(c: Comparison, path: str | Path) -> None:
    Path(path).write_text(json.dumps(c.to_json(), indent=1, default=str) + "\n")


def chart_available() -> bool:
    """Whether matplotlib (the `compare` extra) is installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def render_png(c: Comparison) -> bytes:
    """The chart as PNG bytes (see the module docstring).

    Raises:
        ImportError: matplotlib is not installed (`pip install kernel-porter[compare]`).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    devices = c.devices
    cmap = plt.get_cmap("tab10")
    color = {d: cmap(i % 10) for i, d in enumerate(devices)}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.4), dpi=110,
                                   gridspec_kw={"width_ratios": [1, 1.3]})

    top = 0.0
    for i, d in enumerate(devices):
        rows = [r for r in c.rows if r.device == d and r.pct_peak is not None]
        mean = c.per_device_pct.get(d)
        if not rows or not mean:
            ax1.text(i, 2, "no kernel,\nno projection", ha="center", va="bottom", fontsize=8,
                     color="grey")
            continue
        projected = [r for r in rows if r.projected]
        err = max((r.error_pct or 0.0) for r in projected) if projected else 0.0
        validated = all(r.validated for r in projected)
        ax1.bar(i, mean, width=0.66, color="white" if projected else color[d],
                edgecolor=color[d], hatch="///" if projected else None, linewidth=1.6)
        if projected:
            ax1.errorbar(i, mean, yerr=mean * err / 100.0, fmt="none", capsize=5, lw=1.4,
                         ecolor="black" if validated else "#888888")
        ys = [r.pct_peak for r in rows]
        jitter = [(k - (len(ys) - 1) / 2) * 0.5 / max(1, len(ys)) for k in range(len(ys))]
        ax1.scatter([i + j for j in jitter], ys, s=10, color="#333333", alpha=0.55, zorder=3)
        note = "measured" if not projected else (
            f"±{err:.0f}%" + ("" if validated else "\nunval."))
        ax1.text(i, 3, f"{mean:.0f}%\n{note}", ha="center", va="bottom", fontsize=8.5,
                 bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1.5})
        top = max(top, mean * (1 + err / 100.0), max(ys))
    ax1.axhline(100, color="black", lw=0.8, ls=":")
    ax1.set_xticks(range(len(devices)), [d.upper() for d in devices])
    ax1.set_ylabel("% of the device's peak (measured ceiling, else datasheet)")
    ax1.set_ylim(0, max(110.0, top) + 28)
    score = "-" if c.portability is None else f"{c.portability:.0f}%"
    ax1.set_title(f"% of peak per device (portability score {score})", fontsize=11)
    ax1.legend(handles=[
        Patch(facecolor="#777777", label="measured"),
        Patch(facecolor="white", edgecolor="#777777", hatch="///", label="projected"),
        Line2D([0], [0], color="black", lw=1.4, label="expected error, validated"),
        Line2D([0], [0], color="#888888", lw=1.4, label="expected error, unvalidated (unval.)"),
        Line2D([0], [0], marker="o", color="none", markerfacecolor="#333333", markersize=4,
               label="one shape"),
    ], fontsize=7.5, loc="upper center", ncol=3, framealpha=0.9)

    # Right: time per call across shapes (compare() sorts them by bytes moved).
    keys = list(c.keys)
    xs = range(len(keys))
    for d in devices:
        pts = [(x, c.row(d, k)) for x, k in zip(xs, keys, strict=True)]
        pts = [(x, r) for x, r in pts if r is not None and r.time_ms is not None]
        measured = [(x, r.time_ms * 1e3) for x, r in pts if not r.projected]
        projected = [(x, r.time_ms * 1e3, r.error_pct or 0.0) for x, r in pts if r.projected]
        if measured:
            ax2.plot([p[0] for p in measured], [p[1] for p in measured], "-o", color=color[d],
                     lw=2, ms=5, label=f"{d.upper()} measured")
        if projected:
            px = [p[0] for p in projected]
            py = [p[1] for p in projected]
            lo = [y * (1 - e / 100.0) for _, y, e in projected]
            hi = [y * (1 + e / 100.0) for _, y, e in projected]
            ax2.plot(px, py, "--o", color=color[d], lw=1.5, ms=5, mfc="white",
                     label=f"{d.upper()} projected")
            ax2.fill_between(px, lo, hi, color=color[d], alpha=0.12, lw=0)
    ax2.set_yscale("log")
    ax2.set_xticks(list(xs), [f"{_shape(k[0])} {k[1]}" for k in keys], fontsize=7.5,
                   rotation=30, ha="right")
    ax2.set_ylabel("time per call (us, log scale)")
    ax2.set_title("time per call at each shape (band: expected error)", fontsize=11)
    ax2.grid(axis="y", which="both", alpha=0.25)
    ax2.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.suptitle(f"porter compare {c.op}: measured where we have the device, projected "
                 "where we don't", fontsize=12)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def render_html(c: Comparison, png: bytes | None) -> str:
    """A self-contained report: summary, the chart embedded as base64, the table."""
    esc = html.escape
    img = (f'<img alt="chart" style="max-width:100%" src="data:image/png;base64,'
           f'{base64.b64encode(png).decode()}">' if png else
           f"<p><em>No chart: matplotlib is missing ({esc(CHART_EXTRA)}).</em></p>")
    head = "".join(f"<th>{esc(h)}</th>" for h in TABLE_HEADERS)
    body = []
    for r, cells in zip(c.rows, table_rows(c), strict=True):
        cls = "proj" if r.projected else "meas"
        body.append(f'<tr class="{cls}">' + "".join(f"<td>{esc(x)}</td>" for x in cells) +
                    "</tr>")
    summary = "".join(f"<li>{esc(line)}</li>" for line in summary_lines(c))
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>porter compare {esc(c.op)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #ddd; padding: 3px 7px; text-align: left; }}
th {{ background: #f2f2f2; }}
tr.proj td {{ color: #555; font-style: italic; }}
</style></head><body>
<h1>porter compare {esc(c.op)}</h1>
<ul>{summary}</ul>
{img}
<h2>Per device and shape</h2>
<p>Italic rows are projected: an estimate with its expected error, never a measurement.</p>
<table><tr>{head}</tr>
{''.join(body)}
</table>
</body></html>
"""


def write_report(c: Comparison, out_dir: str | Path) -> list[Path]:
    """Write <op>-compare.png (when matplotlib is there), .html, .csv and .json into
    `out_dir`. Returns the paths written."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    png = render_png(c) if chart_available() else None
    if png is not None:
        (d / f"{c.op}-compare.png").write_bytes(png)
        written.append(d / f"{c.op}-compare.png")
    (d / f"{c.op}-compare.html").write_text(render_html(c, png))
    written.append(d / f"{c.op}-compare.html")
    write_csv(c, d / f"{c.op}-compare.csv")
    write_json(c, d / f"{c.op}-compare.json")
    written += [d / f"{c.op}-compare.csv", d / f"{c.op}-compare.json"]
    return written
