"""The Jinja environment of the code templates (`porter/templates/*.j2`) and the identifier rule
their names follow; shared by the Triton generator (`op`) and the Metal one (`metal`)."""

from __future__ import annotations

from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True,
                         lstrip_blocks=True, keep_trailing_newline=True,
                         undefined=jinja2.StrictUndefined)


def safe_name(name: str) -> str:
    """An op name as an identifier fragment: "Add+RMSNorm" -> "add_rmsnorm"; "op" when empty."""
    return "".join(c if c.isalnum() else "_" for c in name).strip("_").lower() or "op"
