"""The `porter` command line: one entry point, subcommands loaded lazily.

Each subcommand lives in `porter/commands/<name>.py` as a click command, so importing the CLI
does not import torch/triton until a command that needs them runs.
"""

from __future__ import annotations

import importlib

import click

# command name -> "module:attribute" of a click.Command
COMMANDS: dict[str, str] = {
    "hw": "porter.commands.hw:hw",
    "compile": "porter.commands.compile:compile_cmd",
    "check": "porter.commands.check:check_cmd",
    "bench": "porter.commands.bench:bench_cmd",
    "selftest": "porter.commands.selftest:selftest_cmd",
    "port": "porter.commands.port:port_cmd",
    "pack": "porter.commands.pack:pack",
    "compare": "porter.commands.compare:compare_cmd",
    "store": "porter.commands.store:store",
    "profile": "porter.commands.profile:profile_cmd",
    "port-profile": "porter.commands.profile:port_profile_cmd",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup)
@click.version_option(package_name="kernel-porter")
def main() -> None:
    """Kernel Porter: port one reference kernel to every accelerator you own."""


if __name__ == "__main__":
    main()
