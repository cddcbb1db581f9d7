"""`porter port SPEC --agent claude` and `porter port --replay RUN_DIR`: the CLI side of the agent.

`porter/commands/port.py` hands over here; this module prints (it is CLI code) and returns the
exit status: 0 every target got a kernel, 1 some did not (the pack holds those that did), 2 bad
input. Without an API key, `agent_port` says so in one line and returns None: the caller runs
the offline porter.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from porter.errors import PorterError
from porter.llm.config import NoAPIKeyError
from porter.llm.config import load_config
from porter.llm.config import recorded_config
from porter.llm.config import require_key


def agent_port(spec: str | None, targets: list[str], out_dir: str, run_dir: Path, *,
               replay: str | None = None, replace: bool = False,
               verbose: bool = False) -> int | None:  # noqa: ARG001 - every line is shown
    """Run the Claude agent (or replay a recorded run); the exit status, or None: no key, the
    offline porter should run (the line saying so is printed)."""
    from porter.llm.run import RUN_FILE
    from porter.llm.run import make_client
    from porter.llm.run import run_agent

    try:
        config = load_config()
        if replay is not None:
            recorded = _recorded_run(Path(replay), RUN_FILE)
            config = recorded_config(replay)
            spec = spec or recorded["spec"]
            targets = recorded["targets"]
            click.echo(f"replaying {replay} (no network, no key): {spec} on "
                       f"{', '.join(targets)}")
        else:
            try:
                config = require_key(config)
            except NoAPIKeyError as exc:
                click.echo(f"note: {exc}", err=True)
                return None
        assert spec is not None
        client = make_client(config, run_dir, replay=replay)
        # one line per plan, per judged candidate and per stop: few enough to always show
        result = run_agent(spec, targets, out_dir, run_dir=run_dir, client=client,
                           config=config, progress=click.echo, replace_pack=replace)
    except PorterError as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: the exchanges so far are in {run_dir / 'llm'}, the verdicts "
                   f"in {run_dir / 'ledger.jsonl'}", err=True)
        return 130
    summary = result.summary
    for target, info in summary["targets"].items():
        click.echo(f"{target}: {info['tier']} ({info['kept'] or 'no kernel'}); stopped: "
                   f"{info['stop_reason']}")
    usage = summary["usage"]
    click.echo(f"cost: {usage['requests']} requests, {usage['input_tokens']} tokens in, "
               f"{usage['output_tokens']} out, {usage['cache_read_tokens']} cache reads, "
               f"{usage['cache_write_tokens']} cache writes (~${usage['cost_usd_estimate']:.2f} "
               f"at list prices); {summary['device_seconds']} s judging")
    click.echo(f"exchanges: {run_dir / 'llm' / 'exchanges.jsonl'}; summary: "
               f"{run_dir / 'llm' / 'summary.json'}; replay: porter port --replay {run_dir}")
    if result.pack_path is not None:
        click.echo(f"pack: {result.pack_path}")
    missing = [t for t, info in summary["targets"].items() if not info["kept"]]
    if missing:
        click.echo(f"no kernel for {', '.join(missing)}; details: {run_dir / 'ledger.jsonl'}",
                   err=True)
        return 1
    return 0


def _recorded_run(folder: Path, run_file: str) -> dict:
    path = folder / "llm" / run_file
    if not path.is_file():
        raise PorterError(f"{folder}: not a recorded agent run (no llm/{run_file}); give the run "
                          "folder a `porter port --agent claude` printed")
    return json.loads(path.read_text())
