"""Load a `@triton.jit` kernel from a file for cross-compiling, and type its arguments.

The Triton interpreter is chosen when the decorator runs, so a module imported with
TRITON_INTERPRET=1 gives InterpretedFunctions that cannot be compiled. `load_kernel` imports the
file with TRITON_INTERPRET=0 under a fresh module name (so it never reuses an interpreted copy
already in sys.modules) and restores the variable afterwards.
"""

from __future__ import annotations

import inspect
import itertools
from pathlib import Path
from typing import Any

from targets.base import KernelRef
from targets.dtypes import ALIASES
from targets.dtypes import NAMES
from targets.dtypes import canonical
from targets.interpreter import import_file
from targets.interpreter import triton_interpret

_counter = itertools.count()

# Scalar parameters typed fp32 rather than i32 when nothing else says so: names that are floats in
# every kernel we have seen (epsilon, scales, probabilities). Anything else: pass `arg_types`.
FLOAT_PARAM_NAMES = frozenset(
    {
        "eps", "epsilon", "scale", "sm_scale", "alpha", "beta",
        "momentum", "temperature", "p", "dropout_p",
    }
)


class KernelLoadError(Exception):
    """A kernel could not be loaded or typed; the message names the file and the kernel."""


def load_kernel(path: str | Path, kernel_name: str) -> Any:
    """Import `kernel_name` from the Python file at `path` as a compilable JITFunction.

    Args:
        path: a .py file defining the kernel, e.g. "examples/rmsnorm/kernel.py".
        kernel_name: the @triton.jit function's name, e.g. "_rmsnorm_fwd_kernel".

    Returns:
        The `triton.runtime.JITFunction`.

    Raises:
        KernelLoadError: the file is missing or fails to import, the name is absent, or the object
            is not a @triton.jit function.
    """
    import triton

    file = Path(path)
    if not file.is_file():
        raise KernelLoadError(f"{file}: no such file")
    module_name = f"_porter_kernel_{file.stem}_{next(_counter)}"
    # compiled, never interpreted (it is loaded to cross-compile); the file may import its
    # siblings (e.g. examples/x/common.py), so it sees its own folder
    try:
        with triton_interpret(False):
            module = import_file(file, module_name, register=False, own_folder=True)
    except Exception as exc:  # any import-time failure is the file's problem; say which file
        raise KernelLoadError(f"{file}: import failed: {type(exc).__name__}: {exc}") from exc

    if not hasattr(module, kernel_name):
        kernels = sorted(
            n for n, v in vars(module).items() if isinstance(v, triton.runtime.JITFunction)
        )
        raise KernelLoadError(
            f"{file}: no kernel {kernel_name!r}; @triton.jit functions in it: "
            f"{', '.join(kernels) or 'none'}"
        )
    fn = getattr(module, kernel_name)
    # @triton.autotune / @triton.heuristics wrap the JITFunction; the compile wants the kernel
    while type(fn).__name__ in ("Autotuner", "Heuristics") and hasattr(fn, "fn"):
        fn = fn.fn
    if not isinstance(fn, triton.runtime.JITFunction):
        raise KernelLoadError(
            f"{file}: {kernel_name!r} is a {type(fn).__name__}, not a @triton.jit function"
        )
    return fn


def parse_constexpr_value(text: str) -> Any:
    """"4096" -> 4096, "0.5" -> 0.5, "true"/"false" -> bool, anything else stays a string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def constexpr_params(fn: Any) -> list[str]:
    """Names of the kernel's `tl.constexpr` parameters, in order."""
    return [p.name for p in fn.params if p.is_constexpr]


def kernel_ref_for(
    fn: Any,
    *,
    dtype: str = "fp32",
    constexprs: dict[str, Any] | None = None,
    arg_types: dict[str, str] | None = None,
    divisible_by_16: frozenset[str] | set[str] = frozenset(),
    name: str | None = None,
) -> KernelRef:
    """Build a KernelRef with a signature inferred from the kernel's parameter names.

    Pointers (names ending in `_ptr`) get `*<dtype>`, scalars named like floats
    (FLOAT_PARAM_NAMES: eps, scale, ...) `fp32`, other runtime arguments `i32`; `arg_types`
    overrides any of these. Every constexpr must be given in `constexprs`.

    Args:
        fn: the JITFunction.
        dtype: element type of every pointer ("fp32", "bf16", "fp16", ...).
        constexprs: NAME -> value for every constexpr parameter.
        arg_types: NAME -> Triton type for arguments the naming rule gets wrong ("i64", "fp32").
        divisible_by_16: integer arguments whose launch values are multiples of 16; the JIT
            specializes on that at launch, and it decides vectorization and pipelining.
        name: the KernelRef's name (default: the function's name).

    Returns:
        KernelRef(name, fn, source, signature, constexprs).

    Raises:
        KernelLoadError: unknown dtype, a constexpr left unset, or a value for a name the kernel
            does not have as a constexpr.
    """
    values = dict(constexprs or {})
    kname = name or fn.__name__
    try:
        elem = canonical(dtype)  # the short names are Triton's pointer element types
    except ValueError as exc:
        raise KernelLoadError(f"unknown --dtype {dtype!r}; choose from "
                              f"{', '.join(sorted({*NAMES, *ALIASES}))}") from exc
    wanted = constexpr_params(fn)
    unset = [n for n in wanted if n not in values]
    if unset:
        raise KernelLoadError(
            f"kernel {kname}: constexpr {', '.join(unset)} not set; pass "
            + " ".join(f"--constexpr {n}=VALUE" for n in unset)
        )
    unknown = [n for n in values if n not in wanted]
    if unknown:
        raise KernelLoadError(
            f"kernel {kname} has no constexpr {', '.join(unknown)}; its constexprs are "
            f"{', '.join(wanted) or 'none'}"
        )
    runtime = [p.name for p in fn.params if not p.is_constexpr]
    overrides = dict(arg_types or {})
    bad = sorted((set(overrides) | set(divisible_by_16)) - set(runtime))
    if bad:
        raise KernelLoadError(
            f"kernel {kname} has no runtime argument(s) {', '.join(bad)}; "
            f"they are {', '.join(runtime)}"
        )
    signature: dict[str, str] = {}
    for arg in runtime:
        if arg in overrides:
            typ = overrides[arg]
        elif arg.endswith("_ptr"):
            typ = f"*{elem}"
        elif arg in FLOAT_PARAM_NAMES:
            typ = "fp32"
        else:
            typ = "i32"
        signature[arg] = f"{typ}:16" if arg in divisible_by_16 else typ
    try:
        source = inspect.getsource(fn.fn)
    except (OSError, TypeError):
        source = ""
    return KernelRef(name=kname, fn=fn, source=source, signature=signature, constexprs=values)
