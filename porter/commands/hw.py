"""`porter hw`: list, show, validate and detect hardware models.

Errors a user can cause (an unknown device name, a broken YAML) print one line and exit 2;
no traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any
from typing import TypeVar

import click

import hwmodels
from hwmodels import HardwareModel
from hwmodels import HardwareModelError
from hwmodels import UnknownDeviceError
from hwmodels.descriptor import format_bytes
from hwmodels.descriptor import format_number

EXIT_USER_ERROR = 2

F = TypeVar("F", bound=Callable[..., Any])


def _user_errors(fn: F) -> F:
    """Turns the hardware-model errors a user can cause into one line on stderr and exit 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (UnknownDeviceError, HardwareModelError) as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(EXIT_USER_ERROR)

    return wrapper  # type: ignore[return-value]


@click.group("hw")
def hw() -> None:
    """Hardware models: the facts about each device (bandwidth, FLOP/s, limits, sources)."""


@hw.command("list")
@_user_errors
def list_cmd() -> None:
    """A table of every hardware model with its headline numbers.

    A file that did not load is a row marked BROKEN, and its error (file and field) follows the
    table; the other models are listed as usual and the exit status stays 0 (`porter hw
    validate` is the check that fails).
    """
    from tabulate import tabulate

    rows = []
    for m in hwmodels.all_models():
        copy = m.measured_value("copy_bandwidth_gbps")
        bf16 = m.peak_tflops("bf16")
        rows.append(
            [
                m.name,
                m.vendor,
                m.architecture,
                m.build.backend,
                m.warp_size,
                format_number(m.peak_bandwidth_gbps),
                format_number(copy) if copy is not None else "-",
                format_number(bf16) if bf16 is not None else "-",
                format_number(m.compute_units.value),
                format_number(round(m.llc_bytes / (1 << 20), 1)),
            ]
        )
    headers = [
        "name",
        "vendor",
        "arch",
        "backend",
        "warp",
        "bandwidth GB/s",
        "measured copy GB/s",
        "bf16 TFLOP/s",
        "SMs/CUs",
        "LLC MiB",
    ]
    broken = hwmodels.broken()
    for err in broken:
        rows.append([Path(err.path).stem, "BROKEN", *["-"] * (len(headers) - 2)])
    click.echo(tabulate(rows, headers=headers, disable_numparse=True, stralign="right"))
    for err in broken:
        click.echo(f"broken: {err}")


def _fact_line(label: str, fact: hwmodels.Fact, unit: str = "") -> str:
    value = (
        format_bytes(fact.value)
        if unit == "bytes"
        else f"{format_number(fact.value)}{(' ' + unit) if unit else ''}"
    )
    return f"  {label}: {value}  [{fact.kind}] {fact.source}"


def _show_text(m: HardwareModel) -> str:
    out = [
        f"{m.name}: {m.full_name}",
        f"  file: {m.source_file}",
        f"  sha256: {hwmodels.model_hash(m)}",
        f"  vendor: {m.vendor}   architecture: {m.architecture}",
        f"  build: backend {m.build.backend}, arch {m.build.arch}, warp width {m.build.warp_size}",
        f"  aliases: {', '.join(m.aliases)}",
        "memory:",
        _fact_line("bandwidth", m.memory.bandwidth_gbps, "GB/s"),
        _fact_line("capacity", m.memory.capacity_gb, "GB"),
        _fact_line("last-level cache", m.memory.last_level_cache_bytes, "bytes"),
        "dense TFLOP/s (no sparsity):",
        *(_fact_line(d, f) for d, f in m.dense_tflops.items()),
        "compute:",
        _fact_line("compute units", m.compute_units),
        _fact_line("boost clock", m.boost_clock_mhz, "MHz"),
        "per-unit limits:",
    ]
    for f in fields(m.limits):
        fact = getattr(m.limits, f.name)
        out.append(_fact_line(f.name, fact, "bytes" if f.name.endswith("_bytes") else ""))
    out.append(f"features: {', '.join(sorted(m.features))}")
    out.append("measured:")
    if m.measured:
        for e in sorted(m.measured, key=lambda e: (e.name, e.date)):
            versions = ", ".join(f"{k} {v}" for k, v in sorted(e.versions.items()))
            out.append(
                f"  {e.name}: {format_number(e.value)} ({e.date}; {versions or 'no versions'})"
            )
            out.append(f"    method: {e.method}")
    else:
        out.append("  none yet (run `python -m harness.measure_ceilings --write` on the device)")
    if m.notes:
        out.append(f"notes: {m.notes}")
    out.append("")
    out.append("descriptor (as given to agents):")
    out.append(hwmodels.descriptor(m).rstrip("\n"))
    return "\n".join(out)


@hw.command("show")
@click.argument("name")
@_user_errors
def show_cmd(name: str) -> None:
    """Every field of one model with its source, the measured ceilings, then the descriptor.

    NAME is a name, full name or alias (h100, "NVIDIA H100 80GB HBM3", sm_90, gfx942), or the
    path of a YAML file, which is then validated and shown.
    """
    if name.endswith((".yaml", ".yml")):
        m = hwmodels.load_file(name)
    else:
        m = hwmodels.get(name)
    click.echo(_show_text(m))


@hw.command("validate")
@click.argument("paths", nargs=-1, type=click.Path(dir_okay=False))
@_user_errors
def validate_cmd(paths: tuple[str, ...]) -> None:
    """Validate device YAML files (default: every model in the registry's folder, aliases included).

    Every file is checked, one line each; exits 2 when any is broken, naming it.
    """
    errors: list[HardwareModelError] = []
    if paths:
        for p in paths:
            try:
                m = hwmodels.load_file(p)
            except HardwareModelError as e:
                errors.append(e)
                continue
            click.echo(f"ok: {p} ({m.name})")
    else:
        hwmodels.clear_cache()
        models = hwmodels.all_models()
        errors = hwmodels.broken()
        where = hwmodels.devices_dir()
        if errors:
            not_ = "does not" if len(errors) == 1 else "do not"
            click.echo(f"{len(models)} models in {where} load, {len(errors)} {not_}:")
        else:
            click.echo(f"ok: {len(models)} models in {where}")
    for e in errors:
        click.echo(f"error: {e}", err=True)
    if errors:
        sys.exit(EXIT_USER_ERROR)


@hw.command("detect")
def detect_cmd() -> None:
    """What accelerator this machine has, and which model describes it (never fails)."""
    d = hwmodels.detect()
    click.echo(f"device: {d.device_name or '-'}")
    click.echo(f"via: {d.via}")
    click.echo(f"model: {d.model.name if d.model else '-'}")
    click.echo(f"reason: {d.reason}")
