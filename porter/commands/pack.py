"""`porter pack show PACK` and `porter pack verify PACK`: what a kernel pack holds, and whether
it is intact (every manifest path inside the pack, every file's sha256 as listed, and, if pinned,
the manifest's own sha256)."""

from __future__ import annotations

import click


@click.group()
def pack() -> None:
    """Inspect and verify kernel packs written by `porter port`."""


@pack.command("show")
@click.argument("pack_dir", metavar="PACK", type=click.Path(file_okay=False))
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Check every path and file's sha256 against the manifest.")
def show(pack_dir: str, verify: bool) -> None:
    """Print a table of PACK's entries: target, backend, tier, config and numbers."""
    from tabulate import tabulate

    from porter.packs.format import SUMMARY_HEADERS
    from porter.packs.format import PackError
    from porter.packs.format import summary_rows
    from porter.packs.verify import manifest_sha256
    from porter.packs.verify import read_manifest
    from porter.packs.verify import verify_pack

    try:
        manifest = read_manifest(pack_dir)
        digest = manifest_sha256(pack_dir)
        integrity = "not checked"
        if verify:
            report = verify_pack(pack_dir)
            if not report.ok:
                # One line per problem, then refuse: a table of a tampered pack would read as
                # an endorsement.
                for problem in report.problems:
                    click.echo(f"error: {problem}", err=True)
                raise SystemExit(2)
            integrity = f"all {report.files_checked} files match their sha256, inside the pack"
            digest = report.manifest_sha256  # the manifest that was verified
    except PackError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc
    versions = manifest.get("versions") or {}
    click.echo(f"pack {manifest['op']} ({pack_dir}), written {manifest.get('created', '?')} with "
               f"torch {versions.get('torch', '?')}, triton {versions.get('triton', '?')}")
    click.echo(tabulate(summary_rows(manifest), headers=SUMMARY_HEADERS))
    fusion = manifest.get("fusion") or {}
    if fusion.get("text"):
        saved = fusion.get("bytes_saved")
        click.echo(f"fusion: {fusion['text']}" + (f" (saves {saved} bytes)" if saved else ""))
    click.echo(f"integrity: {integrity}")
    click.echo(f"manifest sha256: {digest} (pin it: porter pack verify {pack_dir} "
               f"--expect-sha256 {digest})")


@pack.command("verify")
@click.argument("pack_dir", metavar="PACK", type=click.Path())
@click.option("--expect-sha256", "expect", metavar="MANIFEST_HASH", default=None,
              help="The sha256 manifest.yaml must have (as `porter pack show` printed it where "
                   "the pack was made).")
def verify(pack_dir: str, expect: str | None) -> None:
    """Check PACK before loading it: loading a pack executes its Python.

    Every path in the manifest must lie inside the pack, every file must have the manifest's
    sha256, and with --expect-sha256 the manifest must be the one pinned. Prints one line per
    problem and a summary. Exit 0: intact; 1: tampered or not the pinned pack; 2: bad input.
    """
    from pathlib import Path

    from porter.packs.format import PackError
    from porter.packs.verify import normalize_sha256
    from porter.packs.verify import verify_pack

    try:
        if expect is not None:
            normalize_sha256(expect)  # a malformed hash is bad input, not a mismatch
    except PackError as exc:
        click.echo(f"error: --expect-sha256: {exc}", err=True)
        raise SystemExit(2) from exc
    try:
        if not Path(pack_dir).is_dir():
            raise PackError(f"{pack_dir}: no such folder; give a pack folder such as packs/<op>")
        report = verify_pack(pack_dir, expect_sha256=expect)
    except PackError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc
    for problem in report.problems:
        click.echo(f"FAIL {problem}")
    pinned = " and matches the pinned sha256" if expect is not None else ""
    if report.ok:
        click.echo(f"ok: {report.path}: {report.files_checked} files match the manifest, all "
                   f"inside the pack; manifest sha256 {report.manifest_sha256}{pinned}")
        return
    click.echo(f"TAMPERED: {report.path}: {len(report.problems)} problem(s); do not load this "
               f"pack (manifest sha256 {report.manifest_sha256})")
    raise SystemExit(1)


def _shapes(text: str) -> list[tuple[int, ...]]:
    """"4096x3000,8192x1000" -> [(4096, 3000), (8192, 1000)]; bad input is one line, exit 2."""
    out = []
    for part in text.split(","):
        dims = part.strip().lower().split("x")
        if not part.strip() or not all(d.strip().isdigit() for d in dims):
            raise click.BadParameter(f"{part.strip()!r} is not a shape like 4096x3000",
                                     param_hint="--shapes")
        out.append(tuple(int(d) for d in dims))
    return out


def _load(pack_dir: str, cache: str | None, device: str | None = None):  # noqa: ANN202
    from porter.packs.format import PackError
    from porter.packs.loader import load_pack

    try:
        return load_pack(pack_dir, device=device, tuning_cache=cache)
    except PackError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc


@pack.command("tune")
@click.argument("pack_dir", metavar="PACK", type=click.Path(file_okay=False))
@click.option("--shapes", required=True, help="Shapes to tune, in the spec's terms: "
              "4096x3000,8192x1000 (rows x width for a row-wise op).")
@click.option("--dtypes", default=None, help="bf16,fp16,fp32; default: every dtype the "
              "device's entry has buckets of.")
@click.option("--cache", default=None, type=click.Path(file_okay=False),
              help="Tuning cache folder (default PORTER_TUNING_CACHE, else the user's cache).")
@click.option("--max-candidates", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--budget-s", default=2.0, show_default=True, type=click.FloatRange(0.0),
              help="Seconds per shape after the first candidate compiles.")
def tune(pack_dir: str, shapes: str, dtypes: str | None, cache: str | None,
         max_candidates: int, budget_s: float) -> None:
    """Tune shapes PACK was not ported for on this GPU, and keep them in the tuning cache."""
    from porter.packs.tuning import TuningError

    wanted = _shapes(shapes)
    names = [d.strip() for d in dtypes.split(",")] if dtypes else None
    op = _load(pack_dir, cache)
    try:
        done = op.tune(wanted, names, max_candidates=max_candidates, budget_s=budget_s,
                       progress=lambda line: click.echo(f"  {line}"))
    except TuningError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc
    for t in done:
        runs = f"kernel {t.config}" if t.runs == "kernel" else "the reference (eager faster)"
        click.echo(f"{'x'.join(map(str, t.shape))}/{t.dtype}: {runs}; {t.describe()}")
    assert op.tuning is not None
    click.echo(f"kept in {op.tuning.path}")


@pack.group("cache")
def cache_group() -> None:
    """Carry a pack's tuning cache to other machines of the same kind."""


@cache_group.command("export")
@click.argument("pack_dir", metavar="PACK", type=click.Path(file_okay=False))
@click.option("--to", "to", required=True, type=click.Path(dir_okay=False))
@click.option("--device", default=None, help="The device the cache is for (default detected).")
@click.option("--cache", default=None, type=click.Path(file_okay=False))
def cache_export(pack_dir: str, to: str, device: str | None, cache: str | None) -> None:
    """Write PACK's tuned shapes for this device (its verified entries) to one file."""
    op = _load(pack_dir, cache, device)
    if op.tuning is None or not op.tuning.path.exists():
        click.echo(f"error: no tuning cache for this pack on {device or 'this device'} "
                   f"({op.tuning.path if op.tuning else 'no GPU detected: pass --device'})",
                   err=True)
        raise SystemExit(2)
    n = op.tuning.export(to)
    click.echo(f"wrote {n} tuned shape(s) of {op.op} on {op.tuning.device} to {to}")


@cache_group.command("import")
@click.argument("pack_dir", metavar="PACK", type=click.Path(file_okay=False))
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@click.option("--device", default=None, help="The device the cache is for (default detected).")
@click.option("--cache", default=None, type=click.Path(file_okay=False))
def cache_import(pack_dir: str, file: str, device: str | None, cache: str | None) -> None:
    """Merge an exported file's tuned shapes into this machine's cache (each entry verified)."""
    from porter.packs.tuning import TuningError

    op = _load(pack_dir, cache, device)
    if op.tuning is None:
        click.echo("error: no GPU detected: pass --device NAME", err=True)
        raise SystemExit(2)
    try:
        n, refused = op.tuning.import_(file)
    except TuningError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from exc
    for why in refused:
        click.echo(f"refused: {why}", err=True)
    click.echo(f"merged {n} tuned shape(s) into {op.tuning.path}")
    if refused:
        raise SystemExit(1)
