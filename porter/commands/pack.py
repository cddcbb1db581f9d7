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
