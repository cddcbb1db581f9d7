"""The artifacts a target's run leaves in its folder, each recorded in the ledger: what the
Kernel Writer, Benchmark, Debugger and Profiler produced over the whole target (the kept kernel,
bench_results.csv, debug_report.json and kernel_fixed, profile_report.json). `porter.loop`
writes them when a target is done."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from porter.results import BucketChoice
from porter.roles import artifacts as art
from porter.roles.base import TargetContext

if TYPE_CHECKING:
    from porter.roles.base import Role
    from porter.roles.base import Team


def save_artifact(ctx: TargetContext, role: Role, path: Path) -> Path:
    """Record `path`, written by `role` for this target, in the ledger."""
    ctx.session.ledger.artifact(target=ctx.target, role=role.name,
                                implementation=role.implementation, path=path)
    return path


def write_target_artifacts(ctx: TargetContext, team: Team, choices: list[BucketChoice],
                           written: list[art.KernelSource], diagnoses: list[art.Diagnosis],
                           fixed: list[art.KernelSource], profiles: list[art.UnitProfile]
                           ) -> None:
    """The per-target artifacts of the Kernel Writer, Benchmark, Debugger and Profiler."""
    from porter.roles.benchmark import bench_row

    tdir, target = ctx.target_dir, ctx.target
    language = ctx.capabilities().language
    if choices:  # the source kept for the most units, with those units named
        common, _ = Counter(c.source for c in choices).most_common(1)[0]
        mine = [c for c in choices if c.source == common]
        kernel = art.KernelSource(
            target=target, language="triton" if mine[0].origin == "existing" else language,
            source=common, config=dict(mine[0].config), origin=mine[0].origin,
            bucket=mine[0].bucket, dtype=mine[0].dtype,
            note="kept for " + ", ".join(f"{c.bucket}/{c.dtype}" for c in mine))
    elif written:
        kernel = art.KernelSource(**{**written[0].__dict__,
                                     "note": "no candidate passed; the first one written"})
    else:
        kernel = None
    if kernel is not None:
        save_artifact(ctx, team.writer, kernel.write_file(tdir / kernel.filename))
    rows = [bench_row(e) for e in ctx.session.ledger if e.target == target]
    save_artifact(ctx, team.benchmark, art.write_bench_csv(rows, tdir / art.BENCH_RESULTS))
    save_artifact(ctx, team.debugger, art.DebugReport(target, tuple(diagnoses)).write(
        tdir / art.DEBUG_REPORT))
    if fixed:
        name = art.KERNEL_FIXED if fixed[0].language != "metal" else "kernel_fixed.metal"
        save_artifact(ctx, team.debugger, fixed[0].write_file(tdir / name))
    save_artifact(ctx, team.profiler, art.ProfileReport(target, tuple(profiles)).write(
        tdir / art.PROFILE_REPORT))
