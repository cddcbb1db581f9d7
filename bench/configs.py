"""Checking a generated module's configs before timing them (bench/long_rows.py,
bench/column_reductions.py): each config is run once and its first rows compared against a
float64 reference; a config that raises or is wrong becomes a result row, not a crash."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def max_rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest absolute error over the reference's largest magnitude (inf if not finite)."""
    g = got.double()
    if not torch.isfinite(g).all():
        return float("inf")
    return float((g - want).abs().max() / want.abs().max().clamp_min(1e-30))


def check_config(mod: Any, inputs: tuple[Any, ...], cfg: dict[str, Any], want: torch.Tensor,
                 check_rows: int, tol: float, device: str, case: str, provider: str
                 ) -> tuple[dict[str, Any], Callable[..., Any] | None]:
    """Run `mod.launch(*inputs, config=cfg)` once and compare its first `check_rows` rows with
    `want`. Returns the result row and, when the config is right, a callable that launches it."""
    row: dict[str, Any] = {"case": case, "provider": provider, "config": cfg}
    try:
        got = mod.launch(*inputs, config=cfg)
        if device == "cuda":
            torch.cuda.synchronize()
        err = max_rel_err(got[:check_rows], want)
        del got
    except Exception as exc:  # noqa: BLE001 - a config that fails is a result
        return {**row, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}, None
    if err > tol:
        return {**row, "error": f"max rel err {err:.3g} > {tol}"}, None
    return {**row, "max_rel_err": err}, lambda *a: mod.launch(*a, config=cfg)
