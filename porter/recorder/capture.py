"""`intercept` and `record`: every Triton launch made inside a block, recorded (and with
``execute`` run), with overrides applied and autotuned kernels pinned to one config."""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable
from collections.abc import Iterator
from typing import TYPE_CHECKING
from typing import Any

from porter.recorder.device import device_answers
from porter.recorder.launch import AUTOTUNE_KEY
from porter.recorder.launch import OPTION_NAMES
from porter.recorder.launch import Launch
from porter.recorder.launch import RecordError
from porter.recorder.launch import config_dict

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel

_lock = threading.RLock()


def _constexpr_names(fn: Any) -> set[str]:
    params = getattr(fn, "params", None)
    if params is not None:
        return {p.name for p in params if p.is_constexpr}
    target = getattr(fn, "fn", fn)
    try:
        ann = inspect.get_annotations(target)
    except TypeError:
        ann = {}
    return {n for n, a in ann.items() if "constexpr" in str(a)}


def _describe(value: Any) -> Any:
    import torch

    from targets.dtypes import dtype_name

    if isinstance(value, torch.Tensor):
        return "*" + dtype_name(value.dtype)
    if hasattr(value, "item") and not isinstance(value, (int, float, bool)):
        try:
            return value.item()
        except Exception:  # noqa: BLE001 - a scalar-like we cannot read stays as text
            return str(value)
    if hasattr(value, "value") and type(value).__name__ == "constexpr":
        return value.value
    return value


def _bind(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[dict[str, Any],
                                                                         dict[str, Any]]:
    """(arguments by name with defaults filled, launch options) of one kernel call."""
    target = getattr(fn, "fn", fn)
    names = list(getattr(fn, "arg_names", None) or inspect.signature(target).parameters)
    bound = dict(zip(names, args, strict=False))  # arguments left out take defaults
    options = {}
    for k, v in kwargs.items():
        if k in names:
            bound[k] = v
        else:
            options[k] = v
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        params = {}
    for name in names:
        if name not in bound and name in params and params[name].default is not inspect._empty:
            default = params[name].default
            bound[name] = getattr(default, "value", default)
    return bound, options


def _fp32_scalar(value: float) -> Any:
    """A float argument as the compiled kernel sees it: an fp32 scalar tensor. Triton 3.9's
    interpreter passes floats through as Python floats, so a kernel calling ``eps.to(...)``
    (Liger's RMSNorm) fails there although it compiles and runs on every GPU."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    return tl.tensor(TensorHandle(np.array([value], dtype=np.float32), tl.float32), tl.float32)


@contextlib.contextmanager
def _libdevice_shim(fn: Any) -> Iterator[None]:
    """Under the interpreter, a kernel's global libdevice functions (``from
    triton.language.extra.libdevice import rsqrt``) that Triton 3.9's interpreter does not
    implement (they return None) are replaced by ``tl.math``'s function of the same name for
    the launch; the compiled kernel keeps libdevice."""
    import triton.language as tl

    scope = getattr(getattr(fn, "fn", fn), "__globals__", {})
    swapped = {}
    for name, value in list(scope.items()):
        module = getattr(value, "__module__", "") or ""
        fname = getattr(value, "__name__", name)
        if "libdevice" in module and hasattr(tl.math, fname):
            swapped[name] = value
            # looked up at call time: the interpreter patches tl.math when the launch starts
            scope[name] = lambda *a, _f=fname, **k: getattr(tl.math, _f)(*a, **k)
    try:
        yield
    finally:
        scope.update(swapped)


def _grid(grid: Any, meta: dict[str, Any]) -> tuple[int, ...]:
    g = grid(meta) if callable(grid) else grid
    if isinstance(g, int):
        g = (g,)
    return tuple(int(x) for x in g)


@contextlib.contextmanager
def intercept(hw: HardwareModel | None = None, *, overrides: dict[str, Any] | None = None,
              execute: bool = False) -> Iterator[list[Launch]]:
    """Record (and with ``execute`` run) every Triton kernel launch made inside the block.

    Args:
        hw: answer the launcher's device questions from this hardware model (None: leave the
            real device answering).
        overrides: launch options or constexprs that replace the launcher's choice in every
            launch that has them; ``{"autotune": i}`` picks an autotuned kernel's i-th config.
            A constexpr override also applies to a kernel that takes it (e.g. ``BLOCK_SIZE``).
        execute: really launch each kernel (interpreter or GPU) after recording it.

    Yields:
        The list the launches are appended to, in order.
    """
    from triton.runtime import autotuner as at
    from triton.runtime import interpreter
    from triton.runtime import jit

    launches: list[Launch] = []
    over = dict(overrides or {})
    pick = over.pop(AUTOTUNE_KEY, None)
    context: dict[str, Any] = {"configs": (), "heuristics": ()}
    originals = {(jit.JITFunction, "run"): jit.JITFunction.run,
                 (interpreter.InterpretedFunction, "run"): interpreter.InterpretedFunction.run,
                 (at.Autotuner, "run"): at.Autotuner.run,
                 (at.Heuristics, "run"): at.Heuristics.run}

    def kernel_run(cls: type) -> Callable[..., Any]:
        original = originals[(cls, "run")]

        def run(self: Any, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
            if warmup:  # a launcher compiling ahead of time (tutorials' .warmup): not a launch
                if not execute:
                    raise RecordError("the launcher compiles its kernel ahead of time "
                                      "(.warmup); it cannot be recorded without a GPU")
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)
            consts = _constexpr_names(self)
            bound, options = _bind(self, args, kwargs)
            for k, v in over.items():
                if k in OPTION_NAMES:
                    options[k] = v
                elif k in consts and k in bound:
                    bound[k] = v
            meta = {**bound, **options}
            launches.append(Launch(
                kernel=getattr(self, "__name__", None) or getattr(self.fn, "__name__", "?"),
                grid=_grid(grid, meta),
                args={k: _describe(v) for k, v in bound.items() if k not in consts},
                constexprs={k: _describe(v) for k, v in bound.items() if k in consts},
                options={k: v for k, v in options.items() if k in OPTION_NAMES},
                autotune_configs=context["configs"], heuristics=context["heuristics"],
                fn=self))
            context["configs"], context["heuristics"] = (), ()
            if not execute:
                return None
            names = list(getattr(self, "arg_names", None) or [])
            pos = [bound[n] for n in names if n in bound]
            if cls is not interpreter.InterpretedFunction:
                return original(self, *pos, grid=grid, warmup=False, **options)
            pos = [_fp32_scalar(v) if isinstance(v, float) and n not in consts else v
                   for n, v in zip([n for n in names if n in bound], pos, strict=True)]
            with _libdevice_shim(self):
                return original(self, *pos, grid=grid, warmup=False, **options)

        return run

    def autotune_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        configs = list(self.configs)
        index = int(pick) if pick is not None and 0 <= int(pick) < len(configs) else 0
        cfg = configs[index]
        context["configs"] = tuple(config_dict(c) for c in configs)
        full = {**kwargs, **cfg.all_kwargs()}
        for k in ("num_warps", "num_stages"):
            if k in over:
                full[k] = over[k]
        if cfg.pre_hook is not None and execute:
            cfg.pre_hook({**dict(zip(self.arg_names, args, strict=False)), **full})
        return self.fn.run(*args, **full)

    def heuristics_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        names = tuple(self.values)
        out = originals[(at.Heuristics, "run")](self, *args, **kwargs)
        if launches and not launches[-1].heuristics:
            last = launches[-1]
            launches[-1] = Launch(**{**last.__dict__, "heuristics": names})
        return out

    with _lock:
        jit.JITFunction.run = kernel_run(jit.JITFunction)
        interpreter.InterpretedFunction.run = kernel_run(interpreter.InterpretedFunction)
        at.Autotuner.run = autotune_run
        at.Heuristics.run = heuristics_run
        try:
            with device_answers(hw) if hw is not None else contextlib.nullcontext():
                yield launches
        finally:
            for (cls, name), fn in originals.items():
                setattr(cls, name, fn)


def record(call: Callable[[], Any], hw: HardwareModel | None = None, *,
           overrides: dict[str, Any] | None = None, execute: bool = False,
           what: str = "the launcher") -> list[Launch]:
    """Run ``call()`` under `intercept` and return its launches.

    Raises:
        RecordError: the call raised (its type and message, and `what` it was), or launched
            no Triton kernel.
    """
    with intercept(hw, overrides=overrides, execute=execute) as launches:
        try:
            call()
        except RecordError:
            raise
        except Exception as exc:
            raise RecordError(f"{what} raised {type(exc).__name__}: "
                              f"{' '.join(str(exc).split())[:300]}") from exc
    if not launches:
        raise RecordError(f"{what} launched no Triton kernel")
    return launches
