"""`porter port SPEC --targets ... --out packs/`: port an op to every target, write its pack."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

DEFAULT_TARGETS = "a100,h100,h200,b200,mi300x,m4"


@click.command("port")
@click.argument("spec", type=click.Path(dir_okay=False), required=False)
@click.option("--from-profile", "from_profile", type=click.Path(dir_okay=False), default=None,
              help="Instead of SPEC: a profile from `porter profile --out`; port its --top "
                   "best-ranked fused groups at the model's shapes (porter/from_profile.py).")
@click.option("--top", type=click.IntRange(min=1), default=2, show_default=True,
              help="With --from-profile: how many of the best-ranked groups to port.")
@click.option("--targets", default=DEFAULT_TARGETS, show_default=True,
              help="Comma-separated hardware-model names or aliases.")
@click.option("--out", "out_dir", default="packs", show_default=True, type=click.Path(),
              help="Packs folder; the pack goes to OUT/<op>/.")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="Run directory (default runs/<new id>); an existing one is continued.")
@click.option("--max-variants", type=click.IntRange(min=1), default=None,
              help="Candidates per target, bucket and dtype, in the search's order (default: 3 "
                   "on a CPU; 8 on the GPU, fewer for later shapes when past the time budget).")
@click.option("--exhaustive", is_flag=True,
              help="Search every valid candidate (no cap, no time budget).")
@click.option("--time-budget-s", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds per target on the GPU before later shapes get fewer candidates "
                   "(default 120 unless --max-variants or --exhaustive is given).")
@click.option("--deadline", "deadline_s", type=click.FloatRange(min=0, min_open=True),
              default=None,
              help="Seconds a candidate's GPU runs may take before it is taken to be hung "
                   "(default: PORTER_DEVICE_DEADLINE_S, else scaled with the op's work).")
@click.option("--max-checks", type=click.IntRange(min=0), default=None,
              help="Interpreted correctness checks per run (default: 6 on a CPU).")
@click.option("--store", "store_path", type=click.Path(dir_okay=False), default=None,
              help="Results store (default runs/results.sqlite).")
@click.option("--no-resume", is_flag=True, help="Start the run's ledger afresh.")
@click.option("--replace", is_flag=True,
              help="Replace an existing pack of the op wholesale (default: merge these targets "
                   "into it, keeping the others).")
@click.option("--allow-generated/--no-allow-generated", default=True, show_default=True,
              help="Where the spec names its own kernel (TRITON_KERNEL): may the porter's "
                   "generated kernel stand in (and win where faster)? With --no-allow-generated "
                   "only the user's kernel is tried. Either way the exit status is 4 when the "
                   "user's kernel cannot run on a target it was offered to.")
@click.option("--agent", type=click.Choice(["offline", "claude"]), default="offline",
              show_default=True,
              help="Who writes the kernels: the offline roles (templates, rules), or Claude, "
                   "for any op, ops no template covers included (needs ANTHROPIC_API_KEY and "
                   "the llm extra; without a key: one line, then offline; docs/LLM.md).")
@click.option("--replay", "replay_dir", type=click.Path(file_okay=False), default=None,
              help="Instead of SPEC: run a recorded --agent claude run (its run folder) again, "
                   "with no network and no key.")
@click.option("-v", "--verbose", is_flag=True,
              help="One line per candidate (else one per shape and dtype); log at INFO level.")
def port_cmd(spec: str | None, targets: str, out_dir: str, run_dir: str | None,
             max_variants: int | None, exhaustive: bool, time_budget_s: float | None,
             deadline_s: float | None, max_checks: int | None, store_path: str | None,
             no_resume: bool, verbose: bool, replace: bool, allow_generated: bool,
             from_profile: str | None, top: int, agent: str, replay_dir: str | None) -> None:
    """Port SPEC (an op spec or a KernelBench file) to every target and write its kernel pack."""
    if (spec is None) == (from_profile is None) and replay_dir is None:
        click.echo("error: give SPEC or --from-profile PROFILE (one of them)", err=True)
        sys.exit(2)
    if from_profile is not None:
        from porter.commands.profile import run_port_profile

        logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        sys.exit(run_port_profile(
            from_profile, top=top, targets=[t.strip() for t in targets.split(",") if t.strip()],
            out_dir=out_dir, run_dir=run_dir, max_variants=max_variants, max_checks=max_checks,
            resume=not no_resume, store_path=store_path, exhaustive=exhaustive,
            time_budget_s=time_budget_s, deadline_s=deadline_s, verbose=verbose,
            replace_pack=replace))
    from tabulate import tabulate

    from harness.store import StoreError
    from porter.errors import PorterError
    from porter.errors import UserCodeError
    from porter.port import DEFAULT_RUNS_DIR
    from porter.port import new_run_id
    from porter.port import port

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    names = [t.strip() for t in targets.split(",") if t.strip()]
    rd = Path(run_dir) if run_dir else DEFAULT_RUNS_DIR / new_run_id()
    click.echo(f"run dir: {rd}")
    if agent == "claude" or replay_dir is not None:
        from porter.llm.cli import agent_port

        code = agent_port(spec, names, out_dir, rd, replay=replay_dir, replace=replace,
                          verbose=verbose)
        if code is not None:  # None: no API key, said in one line; the offline porter runs
            sys.exit(code)
    try:
        result = port(spec, names, out_dir, run_dir=rd, resume=not no_resume,
                      max_variants=max_variants, max_checks=max_checks, store_path=store_path,
                      progress=lambda line: click.echo(line), exhaustive=exhaustive,
                      time_budget_s=time_budget_s, deadline_s=deadline_s, verbose=verbose,
                      replace_pack=replace, allow_generated=allow_generated)
    except UserCodeError as exc:  # the user's code crashed or hung (in a child)
        click.echo(f"error: {exc}", err=True)
        sys.exit(UserCodeError.EXIT_CODE)
    except StoreError as exc:  # a --store file that is not a results store
        click.echo(f"error: --store: {exc}", err=True)
        sys.exit(2)
    except PorterError as exc:
        hint = ("; --agent claude asks Claude to write it (docs/LLM.md)"
                if "no code-generation template covers" in str(exc) and agent != "claude" else "")
        click.echo(f"error: {exc}{hint}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: everything judged so far is in {rd / 'ledger.jsonl'}; "
                   f"continue with --run-dir {rd}", err=True)
        sys.exit(130)

    rows = []
    notes: dict[str, None] = {}  # ordered set: a note shared by every target is printed once
    for tr in result.targets:
        first = tr.choices[0] if tr.choices else None
        n = first.numbers if first else {}
        t = n.get("time_ms")
        time_txt = "-" if t is None else f"{t * 1e3:.1f} us {n.get('label', '')}"
        if t is not None and n.get("p20_ms") is not None:
            time_txt += f" (p20-p80 {n['p20_ms'] * 1e3:.1f}-{n['p80_ms'] * 1e3:.1f})"
        pct = n.get("pct_of_peak")
        cfg = " ".join(f"{k}={v}" for k, v in first.config.items()) if first else "-"
        bucket = f"{first.bucket}/{first.dtype}" if first else "-"
        rows.append([tr.target, tr.backend, tr.tier, len(tr.choices), bucket, cfg, time_txt,
                     "-" if pct is None else f"{pct:.0f}%"])
        for note in tr.notes:
            notes.setdefault(f"{tr.target}: {note}")
    click.echo("")
    click.echo(tabulate(rows, headers=["target", "backend", "tier reached", "buckets",
                                       "first bucket", "its config", "time", "% of peak"],
                        maxcolwidths=[None, None, None, None, None, 40, None, None]))
    if notes:
        click.echo("notes:")
        for note in notes:
            click.echo(f"  - {note}")
    click.echo(f"interpreted checks: {result.checks_run} run, {result.checks_shared} shared "
               "across targets (same kernel body + config)")
    click.echo(f"ledger: {result.run_dir / 'ledger.jsonl'}; results: "
               f"{result.run_dir / 'bench_results.csv'}")
    if result.warnings_file is not None:
        click.echo(f"library warnings during the port: {result.warnings_file}")
    if result.pack_path is not None:
        click.echo(f"pack: {result.pack_path}")
    from porter import user_report

    users = user_report.statuses(result)
    if users:  # the spec's own kernel: shipped, retuned and generated side by side
        click.echo("\nthe user's kernel (TRITON_KERNEL), per target and unit:")
        click.echo(tabulate(user_report.table(users), headers=[
            "target", "unit", "as shipped", "retuned", "generated", "pack keeps"],
            maxcolwidths=[None, None, 34, 44, 34, None]))
        for line in user_report.lines(users, allow_generated=allow_generated):
            click.echo(f"  - {line}")
    if result.missing:
        # exit 1: the port ran, but some target got no kernel (the pack, if written, holds
        # only the targets that did)
        for tr in result.missing:
            click.echo(f"no kernel for {tr.target}:", err=True)
            for line in tr.failures:
                click.echo(f"  {line}", err=True)
        click.echo(f"details per candidate: {result.run_dir / 'ledger.jsonl'}", err=True)
        sys.exit(1)
    if user_report.failed(users):
        names = ", ".join(s.target for s in user_report.failed(users))
        click.echo(f"the user's kernel cannot run on {names} (see above)", err=True)
        sys.exit(user_report.USER_KERNEL_FAILED_EXIT)
