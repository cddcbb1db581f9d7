"""Output dtypes of a generated op, derived the way the reference derives them.

The trace sees one example dtype, so its IR dtypes cannot say whether an fp32 output means
"follows the fp32 input" or "is always fp32" (cross-entropy of `logits.float()`). Running the
reference on meta tensors of each I/O dtype the specs use (bf16/fp16/fp32) answers that without
computing anything; the launcher carries the answers as a table keyed by the input dtypes, and a
per-output rule for dtype mixes the table does not hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)

# The I/O dtypes the op specs claim; every generated op is probed at each of them.
PROBE_DTYPES = (torch.bfloat16, torch.float16, torch.float32)

Key = tuple[Any, ...]  # per argument: its torch.dtype, or None for a non-tensor
Rule = tuple[Any, ...]  # ("promote",) | ("input", k) | ("fixed", dtype)


def input_key(inputs: Sequence[Any]) -> Key:
    """The table key of a set of arguments: each tensor's dtype, None for anything else."""
    return tuple(x.dtype if isinstance(x, torch.Tensor) else None for x in inputs)


def _meta_outputs(reference: Callable[..., Any], inputs: Sequence[Any]) -> tuple[torch.dtype, ...]:
    args = [torch.empty(x.shape, dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor)
            else x for x in inputs]
    with torch.no_grad():
        out = reference(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple(o.dtype for o in outs)


def probe(reference: Callable[..., Any], example_inputs: Sequence[Any]
          ) -> dict[Key, tuple[torch.dtype, ...]]:
    """Output dtypes of `reference` for the example and for each uniform I/O dtype.

    Every floating-point tensor argument is set to the probe dtype (integer/bool tensors, e.g.
    class targets, keep theirs). A reference that cannot run on meta tensors (it builds CPU
    tensors itself, say) contributes no entry; the caller falls back to the traced dtypes.

    Returns:
        {input_key: output dtypes}, possibly empty.
    """
    table: dict[Key, tuple[torch.dtype, ...]] = {}
    variants = [list(example_inputs)]
    for d in PROBE_DTYPES:
        variants.append(_uniform(example_inputs, d))
    for k in _float_args(example_inputs):
        variants.append(_single(example_inputs, k))
    for args in variants:
        try:
            table[input_key(args)] = _meta_outputs(reference, args)
        except Exception as exc:  # noqa: BLE001 - any failure just means "no meta answer"
            log.info("output dtypes: the reference does not run on meta tensors of %s (%s)",
                     input_key(args), exc)
    return table


def _float_args(inputs: Sequence[Any]) -> list[int]:
    return [i for i, x in enumerate(inputs)
            if isinstance(x, torch.Tensor) and x.dtype.is_floating_point]


def _uniform(inputs: Sequence[Any], d: torch.dtype) -> list[Any]:
    """Every floating tensor argument as a meta tensor of dtype `d`."""
    return [x.to(dtype=d, device="meta") if i in _float_args(inputs) else x
            for i, x in enumerate(inputs)]


def _single(inputs: Sequence[Any], k: int) -> list[Any]:
    """Floating argument `k` in bf16, the other floating ones in fp32: does the output follow k?"""
    return [x.to(dtype=torch.bfloat16 if i == k else torch.float32, device="meta")
            if i in _float_args(inputs) else x for i, x in enumerate(inputs)]


def rules(table: dict[Key, tuple[torch.dtype, ...]], example_inputs: Sequence[Any],
          traced: Sequence[torch.dtype], traced_source: Sequence[int | None]) -> list[Rule]:
    """Per output, how its dtype follows the inputs for keys the table lacks (dtype mixes).

    "fixed" when the probes agree on one dtype whatever the inputs; when it tracks the uniform
    I/O dtype, ("input", k) for the first argument k it follows alone (bf16 k among fp32 others
    gives bf16: rms_norm follows x, not its weight), else "promote" (the promotion of the
    floating tensor inputs, as for x * w); with no probes at all, the trace's answer: the input
    whose dtype it had (`traced_source`), else fixed.
    """
    uniform = {}
    for d in PROBE_DTYPES:
        key = input_key(_uniform(example_inputs, d))
        if key in table:
            uniform[d] = table[key]
    out: list[Rule] = []
    for j, t in enumerate(traced):
        seen = {d: outs[j] for d, outs in uniform.items() if len(outs) > j}
        if len(seen) == len(PROBE_DTYPES) and len(set(seen.values())) == 1:
            out.append(("fixed", next(iter(seen.values()))))
        elif len(seen) == len(PROBE_DTYPES) and all(o == d for d, o in seen.items()):
            follows = [k for k in _float_args(example_inputs)
                       if table.get(input_key(_single(example_inputs, k)), ())[j:j + 1]
                       == (torch.bfloat16,)]
            out.append(("input", follows[0]) if follows else ("promote",))
        elif traced_source[j] is not None:
            out.append(("input", traced_source[j]))
        else:
            out.append(("fixed", t))
    return out


def resolve_out_dtypes(inputs, table, rules):  # type: ignore[no-untyped-def]
    """Output dtypes for these inputs: the probed table first, else each output's rule.

    (Copied verbatim into every generated launcher, so kept free of annotations and imports
    beyond torch.)
    """
    key = tuple(x.dtype if isinstance(x, torch.Tensor) else None for x in inputs)
    if key in table:
        return list(table[key])
    floats = [x.dtype for x in inputs
              if isinstance(x, torch.Tensor) and x.dtype.is_floating_point and x.dim() > 0]
    dtypes = []
    for rule in rules:
        if rule[0] == "fixed":
            dtypes.append(rule[1])
        elif rule[0] == "input":
            dtypes.append(inputs[rule[1]].dtype)
        else:
            # torch's promotion of floating dtypes, spelled out (the launcher computes nothing
            # with torch): the widest wins; bf16 with fp16 gives fp32.
            d = floats[0] if floats else torch.float32
            for f in floats[1:]:
                if f != d:
                    wide = max(d.itemsize, f.itemsize)
                    d = f if f.itemsize > d.itemsize else d if d.itemsize > f.itemsize else None
                    d = d or (torch.float32 if wide == 2 else torch.float64)
            dtypes.append(d)
    return dtypes


def table_source(table: dict[Key, tuple[torch.dtype, ...]]) -> str:
    """The table as a Python literal (torch dtypes spelled `torch.<name>`)."""
    def spell(d: Any) -> str:
        return "None" if d is None else str(d)

    items = []
    for key, outs in table.items():
        k = "(" + "".join(spell(d) + ", " for d in key) + ")"
        v = "(" + "".join(spell(d) + ", " for d in outs) + ")"
        items.append(f"    {k}: {v},")
    return "{\n" + "\n".join(items) + "\n}" if items else "{}"


def rules_source(rule_list: Sequence[Rule]) -> str:
    """The rules as a Python literal."""
    parts = []
    for r in rule_list:
        if r[0] == "fixed":
            parts.append(f"('fixed', {r[1]})")
        elif r[0] == "input":
            parts.append(f"('input', {r[1]})")
        else:
            parts.append("('promote',)")
    return "(" + "".join(p + ", " for p in parts) + ")"
