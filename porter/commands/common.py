"""Helpers shared by `porter check` and `porter bench`: dtype names, shapes, building candidates."""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Callable
from typing import Any

import click
import torch

from porter.errors import KernelUnavailableError
from porter.errors import PorterError
from porter.specs.opspec import OpSpec
from targets.dtypes import FLOAT_NAMES
from targets.dtypes import canonical
from targets.dtypes import torch_dtype
from targets.interpreter import set_interpret


class Exit(enum.IntEnum):
    OK = 0
    FAILED = 1  # the kernel was judged and failed
    ERROR = 2  # bad input or environment: one clear line


def parse_dtypes(names: tuple[str, ...]) -> tuple[torch.dtype, ...] | None:
    """("bf16", "fp32") -> torch dtypes; None when none given. Raises click.BadParameter."""
    out = []
    for group in names:
        for n in group.split(","):
            n = n.strip().lower()
            try:
                name = canonical(n)
            except ValueError:
                name = ""
            if name not in FLOAT_NAMES:
                raise click.BadParameter(
                    f"unknown dtype {n!r}; choose from fp32, fp16, bf16", param_hint="--dtype"
                )
            out.append(torch_dtype(name))
    return tuple(out) or None


def parse_shape(text: str) -> tuple[int, ...]:
    """"4096x4096" -> (4096, 4096). Raises click.BadParameter."""
    try:
        shape = tuple(int(p) for p in text.lower().replace(",", "x").split("x"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a shape like 4096x4096", param_hint="--shape"
        ) from None
    if not shape or any(d <= 0 for d in shape):
        raise click.BadParameter(f"{text!r}: sizes must be positive", param_hint="--shape")
    return shape




def fail(message: str) -> None:
    """Print one clear error line and exit with code 2."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(int(Exit.ERROR))


def set_interpreter(on: bool) -> None:
    """Set TRITON_INTERPRET before any kernel module is imported (decided at decoration time)."""
    set_interpret(on)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def existing_candidate(spec: OpSpec) -> Callable[..., Any]:
    """The spec's own TRITON_LAUNCHER, called with the out contract."""
    if spec.triton_launcher is None:
        raise KernelUnavailableError(
            f"{spec.path}: --kernel existing needs TRITON_KERNEL and TRITON_LAUNCHER in the spec"
        )
    launcher = spec.triton_launcher

    def candidate(*inputs: Any, out: Any = None) -> Any:
        return launcher(*inputs, out=out)

    candidate.__name__ = getattr(launcher, "__name__", "launcher")
    return candidate


def generated_module(spec: OpSpec, *, interpret: bool) -> tuple[Any, Any]:
    """Generate the spec's kernel with porter.codegen and import it; returns (GeneratedOp, module).

    Raises:
        KernelUnavailableError: codegen is not installed here.
        PorterError: codegen's own errors (e.g. UnsupportedOpError naming the op).
    """
    try:
        from porter.codegen import generate
        from porter.codegen.loading import load_generated_module
    except ImportError as exc:
        raise KernelUnavailableError(
            f"code generation is not available ({exc}); "
            "use --kernel existing for a spec with TRITON_KERNEL"
        ) from None
    gen = torch.Generator(device="cpu").manual_seed(0)
    example = spec.make_inputs(spec.smoke_shape, torch.float32, torch.device("cpu"), gen)
    op = generate(spec.reference, tuple(example), name=spec.name)
    module = load_generated_module(op.triton_module_source(), spec.name, interpret)
    return op, module


def generated_candidate(module: Any, config: Any = None) -> Callable[..., Any]:
    """The generated module's `launch`, called with the out contract (and a fixed config)."""

    def candidate(*inputs: Any, out: Any = None) -> Any:
        if config is None:
            return module.launch(*inputs, out=out)
        return module.launch(*inputs, out=out, config=config)

    candidate.__name__ = "ported"
    return candidate


def meta_costs(spec: OpSpec, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[int, int]:
    """(bytes, FLOPs) at a real shape without allocating it: inputs on the meta device."""
    from harness.roofline import derive_bytes

    gen = torch.Generator(device="cpu").manual_seed(0)
    inputs = tuple(spec.make_inputs(shape, dtype, torch.device("meta"), gen))
    outputs = spec.reference(*inputs)
    if spec.bytes_moved:
        nbytes = spec.bytes_moved(inputs, outputs)
    else:
        nbytes = derive_bytes(inputs, outputs)
    flops = spec.flops(inputs, outputs) if spec.flops else 0
    return int(nbytes), int(flops)


def rows_of(shape: tuple[int, ...]) -> int:
    """Programs in a one-row-per-program launch: the product of all but the last size."""
    return max(1, math.prod(shape[:-1]))


__all__ = ["Exit", "PorterError"]
