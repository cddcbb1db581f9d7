"""Prompt assembly: the templates in porter/prompts/*.j2, rendered for one target and one role.

A request has two parts. The system block is the same for every role of one target: the house
rules, the judge's rules and the target's hardware descriptor (`hwmodels.descriptor`), marked
with `cache_control` so every later request for that target reads it from the prompt cache. The
user message is the role's template: the reference, the current best kernel, the judge's and the
Profiler's feedback, then the output contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from hwmodels.descriptor import descriptor

PROMPTS = Path(__file__).resolve().parents[1] / "prompts"
ROLES = ("writer", "debugger", "planner", "search", "profiler")
# Which tool each role's reply comes through.
ROLE_TOOL = {"writer": "write_kernel", "debugger": "diagnose", "planner": "plan",
             "search": "propose_variants", "profiler": "write_kernel"}


@cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(PROMPTS)),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=False, autoescape=False)


def language_of(hw: Any) -> str:
    """"metal" for a Metal target, else "triton" (asks the hardware model's build backend)."""
    return "metal" if hw.build.backend == "metal" else "triton"


def system_text(hw: Any) -> str:
    """The stable, cached prefix for `hw`: same model -> same bytes."""
    return _env().get_template("_system.j2").render(
        descriptor=descriptor(hw).rstrip("\n"), vendor=hw.vendor, arch=hw.build.arch,
        warp=hw.build.warp_size)


@dataclass(frozen=True)
class Prompt:
    system: str
    user: str
    tool: str


def render(role: str, hw: Any, **context: Any) -> Prompt:
    """The prompt of `role` for target `hw`.

    Args:
        role: one of ROLES.
        hw: the target's hardware model.
        context: the template's variables: `op` (see `porter.llm.inputs.op_context`), and as
            the role needs `best`, `feedback`, `profile`, `plan`, `roofline`, `n_variants`
            (absent ones are None).

    Raises:
        KeyError: an unknown role.
    """
    if role not in ROLES:
        raise KeyError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    language = language_of(hw)
    values = {"best": None, "feedback": None, "profile": None, "plan": None, "roofline": None,
              "n_variants": 2, **context, "target": hw.name, "language": language,
              "fence": "metal" if language == "metal" else "python"}
    user = _env().get_template(f"{role}.j2").render(**values)
    return Prompt(system=system_text(hw), user=_squeeze(user), tool=ROLE_TOOL[role])


def _squeeze(text: str) -> str:
    """At most one blank line in a row, no leading/trailing blank lines."""
    out: list[str] = []
    for line in text.strip("\n").splitlines():
        if line.strip() or (out and out[-1].strip()):
            out.append(line.rstrip())
    return "\n".join(out) + "\n"
