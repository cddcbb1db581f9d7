"""`porter compare OP`: one op across devices, measured where we have them, projected (with a
validated or labelled-unvalidated expected error) where we don't. See porter/compare.py."""

from __future__ import annotations

import sys

import click

from porter.commands.common import fail
from porter.commands.common import parse_shape


@click.command("compare")
@click.argument("op", metavar="OP")
@click.option("--devices", default=None,
              help="comma list of hardware models (default: every model; `porter hw list`).")
@click.option("--fleet", "fleet_path", default=None, type=click.Path(),
              help="a fleet YAML (fleets/example.yaml): its devices, plus calls/s and cost.")
@click.option("--store", "store_path", default=None, type=click.Path(),
              help="results store (default runs/results.sqlite when it exists).")
@click.option("--packs", "packs_dir", default="packs", show_default=True, type=click.Path(),
              help="where packs named by OP live.")
@click.option("--validation", "validation_path", default=None, type=click.Path(),
              help="projection-validation.json (default: the repo's results/).")
@click.option("--shape", "shape_texts", multiple=True, help="only this shape (repeatable).")
@click.option("--dtype", default=None, help="only this dtype (default bf16 when present).")
@click.option("--csv", "csv_path", default=None, type=click.Path(),
              help="also write the rows as CSV ('-': stdout, instead of the table).")
@click.option("--json", "json_path", default=None, type=click.Path(),
              help="also write everything as JSON.")
@click.option("--report", "report_dir", default=None, type=click.Path(file_okay=False),
              help="write the PNG chart, a self-contained HTML report, CSV and JSON here.")
def compare_cmd(op: str, devices: str | None, fleet_path: str | None, store_path: str | None,
                packs_dir: str, validation_path: str | None, shape_texts: tuple[str, ...],
                dtype: str | None, csv_path: str | None, json_path: str | None,
                report_dir: str | None) -> None:
    """Compare OP (an op name or a pack folder) across devices."""
    import hwmodels
    from harness.store import StoreError
    from porter import compare as cmp
    from porter import compare_report as rep
    from porter.errors import PorterError
    from porter.fleet import load_fleet

    if report_dir and not rep.chart_available():
        # the report's chart is its point: say so before any work, not after writing the rest
        fail(f"--report needs matplotlib ({rep.CHART_EXTRA}) for its chart")
        return
    try:
        fleet = load_fleet(fleet_path) if fleet_path else None
        if devices:
            names = [d.strip() for d in devices.split(",") if d.strip()]
        elif fleet is not None:
            names = fleet.models
        else:
            names = list(cmp.ALL_DEVICES)
        if fleet is not None:
            names += [m for m in fleet.models if m not in names]
        shapes = [parse_shape(t) for t in shape_texts] or None
        kwargs = {} if validation_path is None else {"validation_path": validation_path}
        c = cmp.compare(op, names, store_path=store_path, packs_dir=packs_dir, shapes=shapes,
                        dtype=dtype, fleet=fleet, **kwargs)
    except StoreError as exc:
        fail(f"--store: {exc}")
        return
    except (PorterError, hwmodels.HardwareModelError) as exc:
        fail(str(exc).splitlines()[0] if isinstance(exc, hwmodels.UnknownDeviceError)
             else str(exc))
        return
    except click.BadParameter as exc:
        fail(exc.format_message())
        return
    if csv_path == "-":
        rep.write_csv(c, sys.stdout)
    else:
        click.echo(rep.render_table(c))
        if csv_path:
            rep.write_csv(c, csv_path)
            click.echo(f"wrote {csv_path}")
    if json_path:
        rep.write_json(c, json_path)
        click.echo(f"wrote {json_path}")
    if report_dir:
        for p in rep.write_report(c, report_dir):
            click.echo(f"wrote {p}")
    if (report_dir or csv_path != "-") and not rep.chart_available():
        click.echo(f"chart: needs matplotlib ({rep.CHART_EXTRA})")
