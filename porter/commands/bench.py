"""`porter bench SPEC`: time the ported kernel beside eager and torch.compile on this GPU.

On a GPU: the ported kernel (a pack written by `porter port`, given with --pack, which picks the
tuned config per shape; without --pack the generated kernel with its launcher's own per-shape
defaults) vs the spec's reference (eager) vs
torch.compile(reference), interleaved through harness.bench_op, with GB/s, % of measured and
datasheet peak, speedups, and the projection for this device beside the measurement with its
error. Without a GPU nothing is timed: CPU numbers would mean nothing for a GPU kernel; the
projected times for --target (or the detected device, or every known device) are shown,
labelled projected.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import click
import torch

from porter.commands.common import Exit
from porter.commands.common import fail
from porter.commands.common import generated_candidate
from porter.commands.common import generated_module
from porter.commands.common import meta_costs
from porter.commands.common import parse_dtypes
from porter.commands.common import parse_shape
from porter.commands.common import rows_of
from porter.commands.common import set_interpreter
from porter.errors import PorterError
from targets.dtypes import dtype_name

BASELINES = ("eager", "compile")
# The repository checkout that holds this package when it runs from one (bench/ lives there).
CHECKOUT = Path(__file__).resolve().parents[2]


@click.command("bench")
@click.argument("spec_path", metavar="SPEC", type=click.Path())
@click.option("--baselines", default="eager,compile", show_default=True,
              help="comma list of eager, compile.")
@click.option("--shape", "shape_texts", multiple=True,
              help="e.g. 4096x4096 (repeatable; default: the spec's).")
@click.option("--dtype", "dtype_names", multiple=True,
              help="fp32, fp16, bf16 (default: the spec's first).")
@click.option("--reps", default=100, show_default=True, type=click.IntRange(min=1),
              help="timed repetitions.")
@click.option("--target", default=None, help="hardware model to project for when there is no GPU.")
@click.option("--pack", "pack_path", default=None, type=click.Path(exists=True),
              help="pack folder from `porter port` (its tuned per-shape configs are used).")
@click.option("--suite", is_flag=True, help="run the whole benchmark suite (bench/suite.py, "
              "from a checkout of the repository); SPEC is then the results folder.")
@click.option("--cluster", default=None, is_flag=False, flag_value="local", metavar="[ADDRESS]",
              help="with --suite: fan the suite's ops out over Dask, one worker per GPU (a local "
              "cluster, or the scheduler at ADDRESS); needs kernel-porter[fleet].")
@click.option("--store", "store_path", default="runs/results.sqlite", show_default=True,
              help="with --cluster: the one results store every worker's results go to.")
def bench_cmd(spec_path: str, baselines: str, shape_texts: tuple[str, ...],
              dtype_names: tuple[str, ...], reps: int, target: str | None,
              pack_path: str | None, suite: bool, cluster: str | None, store_path: str) -> None:
    """Benchmark the ported kernel for SPEC against eager and torch.compile."""
    if cluster is not None:
        if not suite:
            fail("--cluster fans out the suite: use it with --suite")
        raise SystemExit(_suite_cluster(spec_path, reps, cluster, store_path))
    if suite:
        raise SystemExit(_suite_main()(["--out", spec_path, "--reps", str(reps)]))
    try:
        base = tuple(b.strip() for b in baselines.split(",") if b.strip())
        bad = [b for b in base if b not in BASELINES]
        if bad:
            raise click.BadParameter(
                f"unknown baseline(s) {bad}; choose from {', '.join(BASELINES)}",
                param_hint="--baselines")
        shapes = tuple(parse_shape(s) for s in shape_texts) or None
        code = run_bench(spec_path, baselines=base, shapes=shapes, dtypes=parse_dtypes(dtype_names),
                         reps=reps, target=target, pack_path=pack_path)
    except click.BadParameter as exc:
        fail(exc.format_message())
    except PorterError as exc:
        fail(str(exc))
    raise SystemExit(int(code))


def _suite_cluster(out: str, reps: int, cluster: str, store_path: str) -> int:
    """The suite over Dask (porter/fanout.py): one op per task, the parts merged into OUT with
    its SUMMARY.md, every record in the one store."""
    from porter import fanout

    _suite_main()  # the checkout's bench package, or one error line
    from bench.suite import OPS
    from bench.suite import summarize

    try:
        report = fanout.run_suite(out, list(OPS), reps=reps, store_path=store_path,
                                  address=None if cluster == "local" else cluster)
    except fanout.FanoutUnavailable as exc:
        fail(str(exc))
    rows = [json.loads(ln) for ln in (Path(out) / "rows.jsonl").read_text().splitlines() if ln]
    meta = json.loads((Path(out) / "meta.json").read_text())
    (Path(out) / "SUMMARY.md").write_text(summarize(rows, meta))
    click.echo(f"{out}: {len(rows)} rows from {len(report.workers)} workers in "
               f"{report.wall_s:.0f} s; {store_path}: {report.added} records added, "
               f"{report.skipped} already there")
    return 0


def _suite_main() -> Any:
    """`bench.suite.main`, from the repository checkout this porter runs from.

    The suite is deliberately not installed with the package: it ports the checkout's examples/
    and writes results/ beside them. The `porter` script does not put the working folder on the
    import path, so the checkout's `bench` package is looked up beside the `porter` package (an
    editable install), then on the import path (`python -m porter.cli` from the repository
    root). Anywhere else: one error line, exit 2.
    """
    if "bench" not in sys.modules:
        found = importlib.machinery.PathFinder.find_spec("bench", [str(CHECKOUT)])
        if found is not None and found.loader is not None:
            package = importlib.util.module_from_spec(found)
            sys.modules["bench"] = package
            found.loader.exec_module(package)
    try:
        from bench.suite import main
    except ModuleNotFoundError as exc:
        if exc.name not in ("bench", "bench.suite"):
            raise
        fail("porter bench --suite: the suite lives in the repository checkout (bench/ is not "
             "installed with the package); run it from a checkout of the repository")
    return main


def run_bench(spec_path: str, *, baselines: tuple[str, ...],
              shapes: tuple[tuple[int, ...], ...] | None,
              dtypes: tuple[torch.dtype, ...] | None, reps: int, target: str | None,
              pack_path: str | None) -> Exit:
    """Benchmark (GPU) or project (CPU) and print. Returns the exit code; raises PorterError."""
    import hwmodels
    from porter.specs import load_spec

    has_gpu = torch.cuda.is_available()
    if has_gpu:
        set_interpreter(False)  # compiled kernels; before the spec imports any kernel module
    spec = load_spec(spec_path)
    shapes = shapes or spec.shapes
    dts = dtypes or spec.dtypes[:1]
    if not has_gpu:
        return _project_only(spec, shapes, dts, target)

    detection = hwmodels.detect()
    hw = hwmodels.get(target) if target else detection.model
    if hw is None:
        raise PorterError(f"GPU {detection.device_name!r} has no hardware model "
                          f"({detection.reason}); pass --target with the nearest known device")
    _op, module = generated_module(spec, interpret=False)
    if pack_path is not None:
        from porter.packs.loader import load_pack

        providers: dict[str, Any] = {"ported": load_pack(pack_path)}
    else:
        providers = {"ported": generated_candidate(module, None)}
    if "eager" in baselines:
        providers["eager"] = spec.reference
    if "compile" in baselines:
        providers["compile"] = torch.compile(spec.reference)

    from harness.bench_op import bench_op
    from harness.bench_op import format_table
    from harness.projection import error_pct
    from harness.projection import project

    rows = bench_op(spec.problem(), providers, hw=hw, shapes=shapes, dtypes=dts, reps=reps,
                    baselines=[b for b in baselines if b in providers])
    click.echo(f"{spec.name} on {hw.name} ({detection.device_name}); kernel: "
               f"{'pack ' + str(pack_path) if pack_path else 'generated, launcher defaults'}")
    click.echo(format_table(rows))
    click.echo("\nprojection vs measurement (ported kernel; grid assumed one program per row):")
    for row in rows:
        if row.provider != "ported" or row.median_ms is None:
            continue
        dtype = next((d for d in dts if dtype_name(d) == row.dtype), dts[0])
        proj = project(row.bytes_moved, row.flops, hw, dtype, grid=rows_of(row.shape),
                       math_unit=math_unit(_op))
        error = error_pct(proj, row.median_ms)
        click.echo(f"  {'x'.join(map(str, row.shape)):>16} {row.dtype}: "
                   f"measured {row.median_ms:.4f} ms, "
                   f"projected {proj.time_ms:.4f} ms ({proj.bound}-bound), error {error:+.1f}%")
    return Exit.OK


def math_unit(op: Any) -> str:
    """Matrix units for a matmul; element-wise and reduction math runs in fp32 on SIMT units."""
    # matmul_epilogue and matmul_rowwise: the matmul's FLOPs run on the matrix units
    return "matrix" if str(getattr(op, "family", "")).startswith("matmul_") else "simt"


def _project_only(spec: Any, shapes: tuple[tuple[int, ...], ...], dts: tuple[torch.dtype, ...],
                  target: str | None) -> Exit:
    import hwmodels
    from harness.projection import project

    # The op's family decides the math units of the projection; generating it (tracing) does
    # not import the Triton module, so this process's interpreter state is left alone.
    from porter.codegen import generate

    example = spec.make_inputs(spec.smoke_shape, torch.float32, torch.device("cpu"),
                               torch.Generator().manual_seed(0))
    op = generate(spec.reference, tuple(example), name=spec.name)
    click.echo("No GPU on this machine: timing needs a GPU (CUDA events on the device; "
               "CPU wall-clock numbers would say nothing about a GPU kernel). "
               "Nothing was measured.")
    if target:
        models = [hwmodels.get(target)]
    else:
        detected = hwmodels.detect().model
        models = [detected] if detected is not None else hwmodels.all_models()
    click.echo("Projected times instead (labelled projected; from bytes/FLOPs and the hardware "
               "model, grid assumed one program per row):")
    for hw in models:
        for shape in shapes:
            for dtype in dts:
                nbytes, flops = meta_costs(spec, shape, dtype)
                try:
                    proj = project(nbytes, flops, hw, dtype, grid=rows_of(shape),
                                   math_unit=math_unit(op))
                except ValueError as exc:  # e.g. a device with no FLOP rate for this dtype
                    click.echo(f"  {hw.name:<10} {spec.describe_shape(shape):>24} "
                               f"{dtype_name(dtype)}: no projection ({exc})")
                    continue
                gbps = nbytes / (proj.time_ms * 1e-3) / 1e9
                click.echo(f"  {hw.name:<10} {spec.describe_shape(shape):>24} "
                           f"{dtype_name(dtype)}: {proj.time_ms:9.4f} ms projected "
                           f"({proj.bound}-bound, {nbytes / 1e6:.1f} MB, {gbps:.0f} GB/s)")
    return Exit.OK
