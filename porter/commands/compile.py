"""`porter compile FILE::KERNEL --targets a100,h100,...`: cross-compile a Triton kernel per device.

For each target: the hardware model (hwmodels.get), its backend (targets.for_device), a CPU
cross-compile, and one table row with what the artifact says it uses (registers, shared
memory/LDS, spills), the occupancy that allows, and whether it fits. Exit 0 when every target
compiled (whether or not it fits: fit is a finding, not a failure), 1 on any compile error, 2 on
bad input (unknown target, bad FILE::KERNEL, unset constexpr).
"""

from __future__ import annotations

import os
import sys
import time
from enum import IntEnum
from pathlib import Path

import click


class ExitCode(IntEnum):
    OK = 0
    COMPILE_ERROR = 1
    BAD_INPUT = 2


def _split_kernel_spec(spec: str) -> tuple[Path, str]:
    if "::" not in spec:
        raise click.UsageError(
            "expected FILE::KERNEL (e.g. examples/rmsnorm/kernel.py::_rmsnorm_fwd_kernel), "
            f"got {spec!r}"
        )
    file, kernel = spec.rsplit("::", 1)
    if not file or not kernel:
        raise click.UsageError(f"expected FILE::KERNEL, got {spec!r}")
    return Path(file), kernel


def _parse_pairs(values: tuple[str, ...], flag: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise click.UsageError(f"{flag} expects NAME=VALUE, got {item!r}")
        pairs[name.strip()] = value.strip()
    return pairs


def _fmt_row(report: object) -> list[object]:
    from targets.base import CompileReport

    assert isinstance(report, CompileReport)
    res = report.resources
    occ = report.occupancy
    regs = "-" if res is None or res.registers_per_thread is None else res.registers_per_thread
    occ_text = "-" if occ is None else (
        f"{occ.blocks_per_unit} blk, {occ.warps_per_unit} w, {occ.fraction:.0%} ({occ.limited_by})"
    )
    fit = "fits" if report.fits else "NO: " + "; ".join(report.reasons)
    return [
        report.target,
        report.backend,
        report.arch,
        report.tier,
        regs,
        "-" if res is None else res.shared_memory_bytes,
        "-" if res is None else res.spill_bytes,
        occ_text,
        fit,
    ]


HEADERS = ["target", "backend", "arch", "tier", "regs/thread", "smem/LDS B", "spill B",
           "occupancy per SM/CU", "fit"]


@click.command("compile")
@click.argument("kernel_spec", metavar="FILE::KERNEL")
@click.option("--targets", "targets_csv", required=True,
              help="Comma-separated device names or aliases, e.g. a100,h100,b200,mi300x.")
@click.option("--constexpr", "constexpr_pairs", multiple=True, metavar="NAME=VALUE",
              help="Value of a tl.constexpr parameter (repeatable).")
@click.option("--num-warps", type=int, default=4, show_default=True,
              help="Warps (NVIDIA) / wavefronts (AMD) per block.")
@click.option("--num-stages", type=int, default=2, show_default=True,
              help="Software-pipelining stages.")
@click.option("--dtype", default="fp32", show_default=True,
              help="Element type of every *_ptr argument (fp32, fp16, bf16, ...).")
@click.option("--arg-type", "arg_type_pairs", multiple=True, metavar="NAME=TYPE",
              help="Triton type of a runtime argument the naming rule gets wrong (e.g. n=i64).")
@click.option("--divisible", "divisible", multiple=True, metavar="NAME",
              help="Integer argument whose launch value is a multiple of 16 (repeatable).")
@click.option("--knob", "knob_pairs", multiple=True, metavar="NAME=VALUE",
              help="Backend-specific option, e.g. waves_per_eu=2 (AMD); unknown ones are errors.")
def compile_cmd(
    kernel_spec: str,
    targets_csv: str,
    constexpr_pairs: tuple[str, ...],
    num_warps: int,
    num_stages: int,
    dtype: str,
    arg_type_pairs: tuple[str, ...],
    divisible: tuple[str, ...],
    knob_pairs: tuple[str, ...],
) -> None:
    """Cross-compile FILE::KERNEL for each target and report registers, memory, occupancy, fit."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    sys.exit(int(_run(kernel_spec, targets_csv, constexpr_pairs, num_warps, num_stages, dtype,
                      arg_type_pairs, divisible, knob_pairs)))


def _run(
    kernel_spec: str,
    targets_csv: str,
    constexpr_pairs: tuple[str, ...],
    num_warps: int,
    num_stages: int,
    dtype: str,
    arg_type_pairs: tuple[str, ...],
    divisible: tuple[str, ...],
    knob_pairs: tuple[str, ...],
) -> ExitCode:
    from tabulate import tabulate

    import hwmodels
    import targets
    from targets.loading import parse_constexpr_value

    path, kernel_name = _split_kernel_spec(kernel_spec)
    names = [n.strip() for n in targets_csv.split(",") if n.strip()]
    if not names:
        raise click.UsageError("--targets is empty; give e.g. --targets h100,mi300x")
    try:
        models = [hwmodels.get(n) for n in names]
    except hwmodels.UnknownDeviceError as exc:
        click.echo(f"error: {exc}", err=True)
        return ExitCode.BAD_INPUT

    constexpr_texts = _parse_pairs(constexpr_pairs, "--constexpr")
    constexprs = {k: parse_constexpr_value(v) for k, v in constexpr_texts.items()}
    for k, v in constexprs.items():
        # a block size is an integer: "abc" is bad input, not a kernel that failed to compile
        if k.upper().startswith("BLOCK") and (isinstance(v, bool) or not isinstance(v, int)):
            click.echo(f"error: --constexpr {k}={constexpr_texts[k]}: a block size must be an "
                       "integer", err=True)
            return ExitCode.BAD_INPUT
    knobs = {k: parse_constexpr_value(v) for k, v in _parse_pairs(knob_pairs, "--knob").items()}
    arg_types = _parse_pairs(arg_type_pairs, "--arg-type")
    try:
        fn = targets.load_kernel(path, kernel_name)
        ref = targets.kernel_ref_for(fn, dtype=dtype, constexprs=constexprs, arg_types=arg_types,
                                     divisible_by_16=set(divisible))
    except targets.KernelLoadError as exc:
        click.echo(f"error: {exc}", err=True)
        return ExitCode.BAD_INPUT

    config = targets.LaunchConfig(num_warps=num_warps, num_stages=num_stages, extra=knobs)
    cexpr = ", ".join(f"{k}={v}" for k, v in constexprs.items()) or "none"
    click.echo(f"{path}::{kernel_name}  constexprs: {cexpr}  num_warps={num_warps} "
               f"num_stages={num_stages} dtype={dtype}")
    rows: list[list[object]] = []
    notes: list[str] = []
    failures: list[str] = []
    for hw in models:
        backend = targets.for_device(hw)
        click.echo(f"  {hw.name} ({backend.name} {hw.build.arch}) ...", nl=False, err=True)
        start = time.perf_counter()
        try:
            report = backend.compile(ref, config, hw)
        except targets.CompileError as exc:
            click.echo(" failed", err=True)
            failures.append(f"{hw.name}: {exc}")
            rows.append([hw.name, backend.name, hw.build.arch, "failed", "-", "-", "-", "-",
                         "compile error (below)"])
            continue
        click.echo(f" {time.perf_counter() - start:.1f} s", err=True)
        rows.append(_fmt_row(report))
        notes += [f"{hw.name}: {n}" for n in report.notes]

    click.echo(tabulate(rows, headers=HEADERS, tablefmt="simple"))
    for note in notes:
        click.echo(f"note: {note}")
    if failures:
        for failure in failures:
            click.echo(f"error: {failure}", err=True)
        return ExitCode.COMPILE_ERROR
    return ExitCode.OK
