"""From a model's profile to packs: one spec per top-ranked fused group, then `porter.port.port`.

    written = write_specs(profile, top=2, specs_dir="runs/x/specs")   # one spec module per group
    results = port_from_profile(profile, top=2, targets=["h100"], out_dir="packs/")

Each spec is the group as the model ran it: its reference is the group's own code from the
model's torch.fx graph (`porter.model.graph`: the model's numerics, casts included), SHAPES are
the shapes of the group's first input at each place the model ran it (not generic shapes), and
DTYPES the dtypes it ran in. Its other inputs are sized from that shape by broadcasting
alignment (a norm weight of (hidden,) follows the last size), or fixed where they do not align.
The spec's NAME is the group's pack name (`<label>_<signature>`), which `porter.patch` looks up.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from porter.errors import PorterError

log = logging.getLogger(__name__)

# Under the interpreter a shape is reduced to at most this many rows and this row width, keeping
# its rank and the power-of-two-ness of the width (as porter.specs.opspec.default_interpret_shapes).
INTERPRET_MAX_ROWS = 16
INTERPRET_MAX_WIDTH = 1024

_SPEC_TEMPLATE = '''"""Fused group {name} of {model} ({where}): {count} place(s) in the model.

Ops: {ops}.
Written by `porter port --from-profile` from the model's torch.fx graph: `reference` is the
model's own code for the group; SHAPES are the shapes its first input had in the model.
"""

import operator  # noqa: F401 - the group's code may name operator functions

import torch
from torch import device  # noqa: F401 - the group's code may name a device

NAME = {name!r}
# Each input's sizes: "d<i>" is shape[i] of the spec's shape, an int is a fixed size.
INPUTS = {inputs!r}
SHAPES = {shapes!r}
INTERPRET_SHAPES = {interpret!r}
DTYPES = [{dtypes}]


{code}

def make_inputs(shape, dtype, device, generator):
    out = []
    for spec in INPUTS:
        size = [shape[int(d[1:])] if isinstance(d, str) else d for d in spec["dims"]]
        dt = getattr(torch, spec["dtype"]) if spec["dtype"] else dtype
        out.append(torch.randn(*size, generator=generator, device=device).to(dt))
    return tuple(out)
'''


class FromProfileError(PorterError):
    """A profile cannot be ported (no portable groups, bad --top); the message says why."""


@dataclass(frozen=True)
class WrittenSpec:
    """One spec module written for a group (shapes: its SHAPES)."""

    pack_name: str
    path: Path
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]


def _dims(primary: Sequence[int], shape: Sequence[int], extra: list[int] | None = None,
          ) -> list[Any]:
    """`shape`'s sizes as "d<i>" of `primary` where they align from the right (broadcasting);
    a size that does not align is a 1, or, with `extra`, a further dim of the spec's shape
    (a weight's output width N): appended to `extra` once, named after its place behind
    `primary`. Without `extra` such sizes stay fixed ints."""
    out: list[Any] = []
    offset = len(primary) - len(shape)
    for j, size in enumerate(shape):
        i = j + offset
        if 0 <= i < len(primary) and primary[i] == size:
            out.append(f"d{i}")
        elif extra is None or size == 1:
            out.append(int(size))
        else:
            if size not in extra:
                extra.append(int(size))
            out.append(f"d{len(primary) + extra.index(size)}")
    return out


# An extra dim (a matmul's N) under the interpreter: at most this.
INTERPRET_MAX_EXTRA = 128


def _interpret_shape(shape: Sequence[int], n_primary: int | None = None) -> tuple[int, ...]:
    """A shape reduced for the interpreter, keeping rank and the width's power-of-two-ness;
    dims past the first `n_primary` (a matmul's N) are capped at INTERPRET_MAX_EXTRA."""
    if n_primary is not None and n_primary < len(shape):
        extra = tuple(min(d, INTERPRET_MAX_EXTRA if d & (d - 1) == 0 else INTERPRET_MAX_EXTRA - 28)
                      for d in shape[n_primary:])
        return (*_interpret_shape(shape[:n_primary]), *extra)
    dims = [int(d) for d in shape]
    if not dims:
        return ()  # a 0-d tensor (Gemma's embedding scale): nothing to reduce
    if math.prod(dims[:-1] or [1]) <= INTERPRET_MAX_ROWS and dims[-1] <= INTERPRET_MAX_WIDTH:
        return tuple(dims)
    last = dims[-1]
    cap = INTERPRET_MAX_WIDTH if last & (last - 1) == 0 else INTERPRET_MAX_WIDTH - 24
    lead = []
    budget = INTERPRET_MAX_ROWS
    for d in reversed(dims[:-1]):
        # never 1 where the model's size is not: the generator's trace specializes sizes of 1
        # (a kernel traced at batch 1 would only take batch 1)
        k = min(d, max(2, budget))
        lead.insert(0, k)
        budget = max(1, budget // k)
    return (*lead, min(last, cap))


def top_groups(profile: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """The `top` best-ranked portable groups of a profile.

    Raises:
        FromProfileError: top < 1, or the profile has no portable group.
    """
    if top < 1:
        raise FromProfileError(f"--top must be at least 1, got {top}")
    groups = profile.get("groups") or []
    if not groups:
        why = "; ".join(profile.get("notes", [])) or "the model has no fusible group"
        raise FromProfileError(f"the profile has no group the porter can take ({why})")
    return groups[:top]


def spec_source(group: dict[str, Any], *, model: str = "the model", where: str = "") -> str:
    """The spec module text for one ranked group of a profile."""
    return _spec(group, model=model, where=where)[0]


def _spec(group: dict[str, Any], *, model: str, where: str,
          ) -> tuple[str, list[tuple[int, ...]], list[str]]:
    """(spec text, its SHAPES, its dtype names)."""
    first = group["instances"][0]
    primary = first["inputs"][0]["shape"]
    dtype0 = first["inputs"][0]["dtype"]
    extra: list[int] = []
    inputs = [{"dims": _dims(primary, i["shape"], extra),
               "dtype": None if i["dtype"] == dtype0 else i["dtype"]} for i in first["inputs"]]
    shapes: list[tuple[int, ...]] = []
    dtypes: list[str] = []
    for inst in group["instances"]:
        # the spec's shape: the first input's sizes, then the sizes no input aligns (its N)
        more: list[int] = []
        for i in inst["inputs"]:
            _dims(inst["inputs"][0]["shape"], i["shape"], more)
        s = tuple(int(d) for d in inst["inputs"][0]["shape"]) + tuple(more)
        if s not in shapes:
            shapes.append(s)
        if inst["inputs"][0]["dtype"] not in dtypes:
            dtypes.append(inst["inputs"][0]["dtype"])
    interpret: list[tuple[int, ...]] = []
    for s in shapes:
        r = _interpret_shape(s, len(primary))
        if r not in interpret:
            interpret.append(r)
    text = _SPEC_TEMPLATE.format(
        name=group["pack_name"], model=model, where=where or "profiled",
        count=len(group["instances"]), ops=", ".join(group["ops"]), inputs=inputs,
        shapes=shapes, interpret=interpret,
        dtypes=", ".join(f"torch.{d}" for d in dtypes), code=group["code"].rstrip() + "\n")
    return text, shapes, dtypes


def write_specs(profile: dict[str, Any], *, top: int, specs_dir: str | os.PathLike[str],
                ) -> list[WrittenSpec]:
    """Write one spec module per top group into `specs_dir` (`<pack name>.py`).

    Raises:
        FromProfileError: see `top_groups`.
    """
    folder = Path(specs_dir)
    folder.mkdir(parents=True, exist_ok=True)
    src = profile.get("source", {})
    where = src.get("path") or f"transformers {src.get('arch', '?')}"
    out = []
    for g in top_groups(profile, top):
        path = folder / f"{g['pack_name']}.py"
        text, shapes, dtypes = _spec(g, model=profile.get("model", "the model"), where=where)
        path.write_text(text)
        out.append(WrittenSpec(g["pack_name"], path, tuple(shapes), tuple(dtypes)))
    return out


def port_from_profile(profile: dict[str, Any], *, top: int, targets: list[str],
                      out_dir: str | os.PathLike[str], run_dir: str | os.PathLike[str],
                      max_variants: int | None = None, max_checks: int | None = None,
                      progress: Callable[[str], None] | None = None,
                      **port_kwargs: Any) -> list[tuple[WrittenSpec, Any]]:
    """Write the top groups' specs under `run_dir/specs` and port each to `targets`.

    Args:
        profile: a profile from `porter.model.profile.profile_model` (or its JSON).
        top: how many of the best-ranked groups to port.
        targets: hardware-model names.
        out_dir: packs folder (one pack per group, named as the group's pack name).
        run_dir: a folder for the specs and one port run directory per group.
        max_variants, max_checks: as for `porter.port.port`.
        progress: called with one line per step.
        port_kwargs: passed on to `porter.port.port` (exhaustive, time_budget_s, ...).

    Returns:
        (spec written, PortResult) per group, in rank order.

    Raises:
        FromProfileError, and what `porter.port.port` raises (PorterError subclasses).
    """
    from porter.port import port

    say = progress or (lambda line: log.info("%s", line))
    rd = Path(run_dir)
    specs = write_specs(profile, top=top, specs_dir=rd / "specs")
    results = []
    for i, ws in enumerate(specs, 1):
        shapes = ", ".join("x".join(map(str, s)) for s in ws.shapes)
        say(f"[{i}/{len(specs)}] {ws.pack_name}: spec {ws.path} (shapes {shapes}; "
            f"{', '.join(ws.dtypes)})")
        result = port(ws.path, targets, out_dir, run_dir=rd / ws.pack_name,
                      max_variants=max_variants, max_checks=max_checks, progress=say,
                      **port_kwargs)
        results.append((ws, result))
    return results
