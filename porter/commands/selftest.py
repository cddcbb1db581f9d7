"""`porter selftest`: prove the judge rejects every purpose-built bad kernel for the right reason.

Runs `harness.selftest.run` (Triton interpreter on CPU, real launches on a GPU), prints one row
per kernel and exits non-zero when a bad kernel slipped through, was caught by the wrong stage,
or the correct kernel failed.
"""

from __future__ import annotations

import os
import sys
import time

import click
from tabulate import tabulate


@click.command("selftest")
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="cpu runs the kernels in the Triton interpreter; auto picks cuda when a GPU is visible.",
)
@click.option("--verbose", "-v", is_flag=True, help="Print each verdict's full message.")
def selftest_cmd(device: str, verbose: bool) -> None:
    """Run the harness's bad kernels and one good kernel; show which stage caught each."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from harness import selftest

    try:
        dev = selftest.resolve_device(device)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    click.echo(f"self-test on {dev}" + (" (Triton interpreter)" if dev == "cpu" else ""), err=True)
    started = time.perf_counter()

    def progress(name: str) -> None:
        click.echo(f"  judging {name} ... ({time.perf_counter() - started:.1f}s)", err=True)

    rows = selftest.run(dev, progress=progress)
    table = [
        [
            r.kernel,
            r.expected_stage + (f" ({r.expected_reason})" if r.expected_reason else ""),
            (r.caught_by or "-") + (f" ({r.reason})" if r.reason else ""),
            "ok" if r.ok else "FAIL",
        ]
        for r in rows
    ]
    click.echo(tabulate(table, headers=["kernel", "expected catch", "caught by", "ok"]))
    for r in rows:
        if verbose or not r.ok:
            click.echo(f"\n{r.kernel}: {r.message}")
    bad = [r.kernel for r in rows if not r.ok]
    click.echo(
        f"\n{len(rows) - len(bad)}/{len(rows)} as expected in {time.perf_counter() - started:.1f}s"
    )
    if bad:
        click.echo(f"self-test FAILED for: {', '.join(bad)}", err=True)
        sys.exit(1)
