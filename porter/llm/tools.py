"""The tools a reply must come through, and the checks a reply passes before it is used.

Each role asks for exactly one tool (`tool_choice`), so a reply is structured data, never prose
to parse. `validate(tool, data)` enforces the same output contract the prompt states; a reply
that breaks it raises `ReplyError` with a message the model is shown on its retry.

Tools:
    write_kernel      a kernel module (Triton: `launch(*inputs, out=None, config=None)`; Metal:
                      a `kernel void` source) and a short note on its design
    plan              where the headroom is on this device and what to try first
    propose_variants  a few variants (a change to the kernel, with why) for the next round
    diagnose          why a candidate failed, and a fixed kernel
"""

from __future__ import annotations

import ast
import re
from typing import Any

from porter.errors import PorterError

LANGUAGES = ("triton", "metal")
# Imports a kernel module may make; anything else (os, subprocess, socket, ...) is refused.
ALLOWED_IMPORTS = frozenset({"torch", "triton", "math", "functools", "typing", "__future__"})


class ReplyError(PorterError):
    """A reply that breaks the output contract; the message says what, for the model's retry."""


_KERNEL_PROPS: dict[str, Any] = {
    "language": {"type": "string", "enum": list(LANGUAGES)},
    "source": {"type": "string", "description": "the whole module (Triton) or Metal source"},
    "kernel_name": {"type": "string", "description": "the main kernel function's name"},
    "notes": {"type": "string", "description": "the design in 1-3 sentences"},
}

TOOLS: dict[str, dict[str, Any]] = {
    "write_kernel": {
        "name": "write_kernel",
        "description": "Return the kernel for this target as one complete source file.",
        "input_schema": {"type": "object", "properties": _KERNEL_PROPS,
                         "required": ["language", "source", "kernel_name", "notes"]},
    },
    "plan": {
        "name": "plan",
        "description": "Say where the headroom is on this device for this op and what to try.",
        "input_schema": {
            "type": "object",
            "properties": {
                "bound": {"type": "string", "enum": ["memory", "compute", "latency"]},
                "strategy": {"type": "string", "description": "the kernel's shape, 1-3 sentences"},
                "try_first": {"type": "array", "items": {"type": "string"},
                              "description": "ideas in order, most promising first"},
                "risks": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["bound", "strategy", "try_first"],
        },
    },
    "propose_variants": {
        "name": "propose_variants",
        "description": "Propose variants of the current best kernel to judge next.",
        "input_schema": {
            "type": "object",
            "properties": {
                "variants": {
                    "type": "array",
                    "items": {"type": "object", "properties": {
                        "name": {"type": "string"},
                        "change": {"type": "string"},
                        "why": {"type": "string"},
                        "source": {"type": "string", "description": "the whole module"},
                    }, "required": ["name", "change", "why", "source"]},
                },
            },
            "required": ["variants"],
        },
    },
    "diagnose": {
        "name": "diagnose",
        "description": "Say why the candidate failed and return a fixed kernel.",
        "input_schema": {
            "type": "object",
            "properties": {
                "cause": {"type": "string",
                          "enum": ["compile", "crash", "mismatch", "contract", "cheat", "timeout",
                                   "resources", "other"]},
                "explanation": {"type": "string"},
                "fixed": {"type": "object", "properties": _KERNEL_PROPS,
                          "required": ["language", "source", "kernel_name", "notes"]},
            },
            "required": ["cause", "explanation", "fixed"],
        },
    },
}


def validate(tool: str, data: Any, *, language: str | None = None) -> dict[str, Any]:
    """Check a tool's input against its schema and the output contract; returns it unchanged.

    Args:
        tool: one of TOOLS.
        data: the tool_use block's input.
        language: the language this target needs ("triton" | "metal"); None: either.

    Raises:
        ReplyError: what is wrong, e.g. "write_kernel.source: no `def launch(...)`".
    """
    if tool not in TOOLS:
        raise ReplyError(f"unknown tool {tool!r}; expected one of {', '.join(TOOLS)}")
    _check_schema(TOOLS[tool]["input_schema"], data, tool)
    if tool == "write_kernel":
        check_kernel(data, language, tool)
    elif tool == "diagnose":
        check_kernel(data["fixed"], language, f"{tool}.fixed")
    elif tool == "propose_variants":
        if not data["variants"]:
            raise ReplyError("propose_variants.variants: empty; propose at least one")
        for i, v in enumerate(data["variants"]):
            check_kernel({"language": language or "triton", "source": v["source"],
                          "kernel_name": ""}, language, f"propose_variants.variants[{i}]")
    return data


def _check_schema(schema: dict[str, Any], data: Any, where: str) -> None:
    kind = schema.get("type")
    expected = {"object": dict, "array": list, "string": str}.get(kind)
    if expected is not None and not isinstance(data, expected):
        raise ReplyError(f"{where}: expected {kind}, got {type(data).__name__}")
    if "enum" in schema and data not in schema["enum"]:
        raise ReplyError(f"{where}: {data!r} is not one of {', '.join(schema['enum'])}")
    if kind == "object":
        missing = [k for k in schema.get("required", []) if k not in data]
        if missing:
            raise ReplyError(f"{where}: missing {', '.join(missing)}")
        for key, sub in schema.get("properties", {}).items():
            if key in data:
                _check_schema(sub, data[key], f"{where}.{key}")
    elif kind == "array":
        for i, item in enumerate(data):
            _check_schema(schema.get("items", {}), item, f"{where}[{i}]")


def check_kernel(kernel: dict[str, Any], language: str | None, where: str) -> None:
    """The output contract of a kernel source (see porter/prompts/_contract.j2)."""
    lang = kernel.get("language", language)
    if language is not None and lang != language:
        raise ReplyError(f"{where}.language: this target needs {language}, got {lang!r}")
    source = kernel["source"]
    if lang == "metal":
        if not re.search(r"\bkernel\s+void\s+\w+\s*\(", source):
            raise ReplyError(f"{where}.source: no `kernel void NAME(...)` function")
        from targets.metal_host import DispatchError
        from targets.metal_host import parse

        try:
            dispatch = parse(source)
            for key in ("kernel", "buffers", "sizes", "launches"):
                if key not in dispatch:
                    raise DispatchError(f"the dispatch has no {key!r}")
        except (DispatchError, ValueError) as exc:
            raise ReplyError(f"{where}.source: {exc}") from None
        return
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ReplyError(f"{where}.source: not valid Python: line {exc.lineno}: "
                         f"{exc.msg}") from None
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        bad = [n for n in names if n.split(".")[0] not in ALLOWED_IMPORTS]
        if bad:
            raise ReplyError(f"{where}.source: imports {', '.join(bad)}; a kernel module may "
                             f"import only {', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))}")
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    launch = funcs.get("launch")
    if launch is None:
        raise ReplyError(f"{where}.source: no top-level `def launch(*inputs, out=None, "
                         "config=None)`")
    params = [a.arg for a in launch.args.args + launch.args.kwonlyargs]
    if "out" not in params:
        raise ReplyError(f"{where}.source: `launch` takes no `out` argument (the judge calls "
                         "launch(*inputs, out=out) and reads `out`)")
    jitted = [n for n, f in funcs.items()
              if any("jit" in ast.unparse(d) for d in f.decorator_list)]
    if not jitted:
        raise ReplyError(f"{where}.source: no @triton.jit kernel")
    name = kernel.get("kernel_name")
    if name and name not in jitted:
        raise ReplyError(f"{where}.kernel_name: {name!r} is not a @triton.jit function of the "
                         f"source (it has {', '.join(jitted)})")
