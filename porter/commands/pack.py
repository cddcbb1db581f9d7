"""`porter pack show PACK`: what a kernel pack holds, per entry and shape bucket."""

from __future__ import annotations

import click


@click.group()
def pack() -> None:
    """Inspect kernel packs written by `porter port`."""


@pack.command("show")
@click.argument("pack_dir", metavar="PACK", type=click.Path(file_okay=False))
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Check every file's sha256 against the manifest.")
def show(pack_dir: str, verify: bool) -> None:
    """Print a table of PACK's entries: target, backend, tier, config and numbers."""
    from tabulate import tabulate

    from porter.pack import SUMMARY_HEADERS
    from porter.pack import PackError
    from porter.pack import read_manifest
    from porter.pack import summary_rows
    from porter.pack import verify_files

    try:
        manifest = read_manifest(pack_dir)
        integrity = "not checked"
        if verify:
            verify_files(pack_dir, manifest, sorted(manifest["files"]))
            integrity = f"all {len(manifest['files'])} files match their sha256"
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
