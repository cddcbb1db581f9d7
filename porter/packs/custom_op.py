"""A pack as a torch.library custom op (usable inside torch.compile)."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING
from typing import Any

import torch

if TYPE_CHECKING:
    from porter.packs.loader import PackedOp

_LIB_NAMESPACE = "kernel_porter"


def register_custom_op(packed: PackedOp) -> Any:
    """Register `kernel_porter::<op>` as a torch.library custom op; returns the op
    (`PackedOp.register_custom_op`).

    The fake (meta) implementation runs the reference on fake tensors, so shapes and dtypes
    propagate inside torch.compile without running a kernel. The op takes the inputs named
    in the manifest's `signature` and returns one tensor.
    """
    kinds = packed.manifest.get("signature") or []
    if not kinds:
        raise ValueError(f"{packed.path}: the manifest has no input signature; "
                         "cannot register a custom op")
    types = {"tensor": torch.Tensor, "float": float, "int": int, "bool": bool}
    params = [
        inspect.Parameter(f"a{i}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          annotation=types[kind])
        for i, kind in enumerate(kinds)
    ]
    sig = inspect.Signature(params, return_annotation=torch.Tensor)

    def impl(*args: Any) -> torch.Tensor:
        return packed(*args)

    def fake(*args: Any) -> torch.Tensor:
        return packed.reference(*args)

    impl.__signature__ = sig  # type: ignore[attr-defined]
    fake.__signature__ = sig  # type: ignore[attr-defined]
    # A second pack of the same op in one process gets its own name (custom ops are global).
    name = packed.op
    n = 1
    while hasattr(getattr(torch.ops, _LIB_NAMESPACE), name):
        n += 1
        name = f"{packed.op}_{n}"
    op = torch.library.custom_op(f"{_LIB_NAMESPACE}::{name}", impl, mutates_args=())
    op.register_fake(fake)
    packed.custom_op = op
    return op
