"""Inputs with more leading dims than the port traced: (batch, seq, hidden) for (rows, hidden).

A pack's kernels are generated from the reference traced at the spec's shapes, usually 2-D
(rows, hidden); a model hands over (batch, seq, hidden) or (batch, heads, seq, dim). Called with
those as they are, a 2-D launcher read only the first two dims and returned (2, 32) for a
(2, 32, 5120) activation (issue 46). So the loader merges the extra leading dims into the rows
dim (a view, no copy, wherever the strides allow), runs the kernel, and views the result back.

That is exact only where the reference treats the leading dims as independent rows, which
depends on how it is written (`F.cross_entropy` reads a 3-D input's dim 1 as the classes, a
`softmax(x, dim=1)` normalises over another dim). So the port checks it once, on the CPU at the
smoke shape (`probe`): the reference on two samples stacked along a new leading dim must equal
the reference on the same rows merged. The manifest keeps the verdict (`leading_dims`); the
loader merges only where it says so, else the call runs the reference with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


def probe(reference: Callable[..., Any], example: tuple[Any, ...]) -> dict[str, Any]:
    """The manifest's `leading_dims`: each input's traced rank, which inputs are row-indexed
    (their dim 0 is the first tensor's rows), and whether extra leading dims may be merged into
    the rows ("flatten"), with the reason where not ("why")."""
    ranks = [t.dim() if isinstance(t, torch.Tensor) else None for t in example]
    first = next((i for i, t in enumerate(example) if isinstance(t, torch.Tensor)), None)
    verdict: dict[str, Any] = {"ranks": ranks, "rows": [], "flatten": False}
    if first is None or example[first].dim() < 2:
        verdict["why"] = "the op was ported with a first input of fewer than 2 dims"
        return verdict
    n_rows = example[first].shape[0]
    rows = [i for i, t in enumerate(example)
            if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] == n_rows]
    verdict["rows"] = rows
    gen = torch.Generator().manual_seed(1)
    stacked = list(example)
    for i in rows:
        t = example[i]
        if t.is_floating_point():
            other = torch.randn(t.shape, generator=gen).to(t.dtype)
        elif t.dtype == torch.bool:
            other = torch.randint(0, 2, t.shape, generator=gen).bool()
        else:  # indices (a loss's targets): drawn from the values the sample holds
            lo, hi = int(t.min()), int(t.max())
            other = torch.randint(lo, hi + 1, t.shape, generator=gen).to(t.dtype)
        stacked[i] = torch.stack([t, other])
    merged = [t.reshape(-1, *t.shape[2:]) if i in rows else t for i, t in enumerate(stacked)]
    try:
        with torch.no_grad():
            y_nd, y_flat = reference(*stacked), reference(*merged)
    except Exception as exc:  # noqa: BLE001 - any failure means: do not merge
        verdict["why"] = (f"the reference fails on inputs with a leading dim added "
                          f"({type(exc).__name__}: {exc})")
        return verdict
    for a, b in zip(_as_list(y_nd), _as_list(y_flat), strict=True):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            continue
        if tuple(a.shape) != unflattened_shape(tuple(b.shape), (2, n_rows)) or not torch.allclose(
                a.reshape(b.shape).double(), b.double(), rtol=1e-4, atol=1e-5, equal_nan=True):
            verdict["why"] = ("the reference does not treat extra leading dims as independent "
                              "rows (its result with a leading dim added differs from its result "
                              "with those rows merged)")
            return verdict
    verdict["flatten"] = True
    return verdict


def unflattened_shape(shape: tuple[int, ...], lead: tuple[int, ...]) -> tuple[int, ...]:
    """A merged call's result shape with its rows split back into `lead` (a result without a
    rows dim, such as a mean over the rows, keeps its shape)."""
    if shape and shape[0] == math.prod(lead):
        return (*lead, *shape[1:])
    return shape


@dataclass(frozen=True)
class Merged:
    """A call with its leading dims merged into the rows, and how to undo it."""

    inputs: tuple[Any, ...]
    out: Any
    lead: tuple[int, ...]  # the leading dims merged (the rows dim of the trace included)
    copied: tuple[int, ...]  # inputs that could not be viewed merged (copied instead)
    caller_out: Any = None  # the caller's out, returned as it was given
    copy_out: bool = False  # caller_out could not be viewed merged: written by a copy

    def result(self, r: Any) -> Any:
        """The merged call's result in the caller's shapes (the caller's out if given)."""
        if self.copy_out:
            for dst, src in zip(_as_list(self.caller_out), _as_list(r), strict=True):
                dst.copy_(src.view(dst.shape))
        if self.caller_out is not None:
            return self.caller_out
        if isinstance(r, (tuple, list)):
            return type(r)(self._one(x) for x in r)
        return self._one(r)

    def _one(self, r: Any) -> Any:
        if not isinstance(r, torch.Tensor):
            return r
        shape = unflattened_shape(tuple(r.shape), self.lead)
        return r if shape == tuple(r.shape) else r.view(shape)


def merge(leading: dict[str, Any] | None, inputs: tuple[Any, ...], out: Any
          ) -> Merged | str | None:
    """The call with its extra leading dims merged (`Merged`); None when the inputs have the
    traced ranks (nothing to do); else why the kernel cannot take them (the reference runs)."""
    if not leading:
        return None
    ranks = leading["ranks"]
    tensors = [(i, t) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)]
    if len(ranks) != len(inputs) or not tensors:
        return None  # the launcher's own argument check says what is wrong
    first, x = tensors[0]
    if ranks[first] is None:
        return None
    extra = x.dim() - ranks[first]
    if extra == 0 and all(ranks[i] is not None and t.dim() == ranks[i] for i, t in tensors):
        return None
    ported = "x".join(str(r) for r in ranks if r is not None)
    if extra < 0 or not leading.get("flatten"):
        return (f"inputs of {[t.dim() for _, t in tensors]} dims, ported with {ported}: "
                f"{leading.get('why') or 'fewer dims than the port traced'}")
    lead = tuple(x.shape[:extra + 1])
    rows = set(leading["rows"])
    merged = list(inputs)
    copied = []
    for i, t in tensors:
        if ranks[i] is None:
            return f"argument {i} is a tensor where the port traced a {type(inputs[i]).__name__}"
        if i not in rows:
            if t.dim() != ranks[i]:
                return (f"input {i} has {t.dim()} dims where the port traced {ranks[i]} and it "
                        "is not row-indexed")
            continue
        if t.dim() - ranks[i] != extra or tuple(t.shape[:extra + 1]) != lead:
            return (f"input {i} {tuple(t.shape)} does not share input {first}'s leading dims "
                    f"{lead}")
        shape = (-1, *t.shape[extra + 1:])
        try:
            merged[i] = t.view(shape)
        except RuntimeError:  # strides that do not merge (a transposed batch): copy
            merged[i] = t.reshape(shape)
            copied.append(i)
    flat_out, copy_out = None, False
    if out is not None:
        def flat(o: torch.Tensor) -> torch.Tensor:
            if o.dim() > extra and tuple(o.shape[:extra + 1]) == lead:
                return o.view(-1, *o.shape[extra + 1:])
            return o  # not row-indexed (a loss): as it is

        try:
            flat_out = type(out)(flat(o) for o in out) if isinstance(out, (tuple, list)) \
                else flat(out)
        except RuntimeError:  # an out whose strides do not merge: written by a copy after
            copy_out = True
    return Merged(tuple(merged), flat_out, lead, tuple(copied), out, copy_out)


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (tuple, list)) else [x]
