"""`porter store merge A B --into C` and `porter store import RUN_DIR`: one results store from
several machines, without duplicates (a record's identity is its content)."""

from __future__ import annotations

import click

from porter.commands.common import fail


@click.group("store")
def store() -> None:
    """Merge results stores and import suite results."""


@store.command("merge")
@click.argument("sources", nargs=-1, required=True, type=click.Path())
@click.option("--into", "into", required=True, type=click.Path(dir_okay=False),
              help="the store to merge into (created if missing; may be one of SOURCES).")
def merge(sources: tuple[str, ...], into: str) -> None:
    """Merge the stores SOURCES into --into, each record once."""
    from harness.store import ResultsStore
    from harness.store import StoreError

    try:
        with ResultsStore(into, fill_env=False) as dst:
            added, skipped = dst.merge(*sources)
            total = len(dst)
    except StoreError as exc:
        fail(str(exc))
        return
    click.echo(f"{into}: {added} records added, {skipped} already there; {total} in all")


@store.command("import")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("--store", "store_path", default="runs/results.sqlite", show_default=True,
              type=click.Path(dir_okay=False))
def import_cmd(run_dirs: tuple[str, ...], store_path: str) -> None:
    """Import suite result folders (rows.jsonl from `python -m bench.suite`) into a store."""
    from harness.store import ResultsStore
    from harness.store import StoreError
    from porter.errors import PorterError
    from porter.suite_import import suite_records

    try:
        with ResultsStore(store_path, fill_env=False) as dst:
            for d in run_dirs:
                added, skipped = dst.add(suite_records(d))
                click.echo(f"{d}: {added} records added, {skipped} already there")
    except (StoreError, PorterError) as exc:
        fail(str(exc))
