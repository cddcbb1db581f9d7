"""Learn how a user's launcher launches its Triton kernels by running it, the way a profiler would.

A launcher (``rmsnorm_forward(x, w)``, Liger's ``rms_norm_forward(X, W, eps, ...)``, a tutorial's
``softmax(x)``) computes its grid, constexprs (``BLOCK_SIZE``, ``NUM_STAGES``), ``num_warps`` and
``num_stages`` from its inputs and the device, then calls ``kernel[grid](...)``. `intercept`
patches the launch path of every Triton kernel for the duration of one call:

- ``JITFunction.run`` and ``InterpretedFunction.run`` (each ``kernel[grid](...)`` lands there):
  the launch is recorded as a `Launch` (kernel, grid, runtime arguments, constexprs, options) and,
  with ``execute=True``, really run (under the interpreter on CPU tensors, or on the GPU);
  ``overrides`` (``num_warps``, ``num_stages``, ``waves_per_eu``, a constexpr ...) replace what
  the launcher chose, which is how the porter retunes a kernel without editing its launcher;
- ``Autotuner.run``: on a CPU nothing can be benchmarked, so the first config (or the one the
  override ``autotune`` picks) is applied and the configs are recorded as the kernel's variant
  space; ``@triton.heuristics`` run as they do (they are plain functions of the arguments).

While recording for a target, the launcher's device questions are answered from that target's
hardware model (`device_answers`): ``torch.cuda.get_device_properties(...)``,
``torch.cuda.get_device_capability()``, ``torch.version.hip`` (Liger's ``is_hip()``) and
``triton.runtime.driver.active`` (``utils.get_device_properties``, ``get_current_target``), so a
launcher that sizes its grid by SM count or picks warps by vendor does so for the target.

Recording runs the launcher on meta tensors (sizes only: nothing is allocated, so GPU-size
shapes cost nothing) and, when the launcher needs real data (``.item()``, a data-dependent
branch), on CPU tensors at the reduced shape the caller passes instead.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from targets.base import KernelRef, LaunchConfig

log = logging.getLogger(__name__)

# Launch options a kernel call may carry besides its arguments (Triton's compile options).
OPTION_NAMES = ("num_warps", "num_stages", "num_ctas", "maxnreg", "waves_per_eu",
                "matrix_instr_nonkdim", "kpack", "enable_fp_fusion", "launch_pdl",
                "launch_cooperative_grid")
# The override that picks an autotuned kernel's config by index (its variant space).
AUTOTUNE_KEY = "autotune"

_lock = threading.RLock()


class RecordError(Exception):
    """The launcher failed while being recorded; the message names it and the failure."""


@dataclass(frozen=True)
class Launch:
    """One ``kernel[grid](...)`` call as the launcher made it (overrides applied).

    Attributes:
        kernel: the kernel function's name, e.g. "_rms_norm_forward_kernel".
        grid: programs per axis, e.g. (4096,).
        args: runtime arguments by name: tensors as their Triton pointer type ("*bf16"),
            scalars as values.
        constexprs: constexpr arguments by name, e.g. {"BLOCK_SIZE": 4096}.
        options: launch options the call passed (num_warps, num_stages, waves_per_eu, ...).
        autotune_configs: the kernel's ``@triton.autotune`` configs as plain dicts (kwargs
            merged with num_warps/num_stages), empty when not autotuned.
        heuristics: names of the constexprs its ``@triton.heuristics`` computed.
        fn: the innermost @triton.jit object launched (not serialised).
    """

    kernel: str
    grid: tuple[int, ...]
    args: dict[str, Any]
    constexprs: dict[str, Any]
    options: dict[str, Any]
    autotune_configs: tuple[dict[str, Any], ...] = ()
    heuristics: tuple[str, ...] = ()
    fn: Any = field(default=None, compare=False, repr=False)

    @property
    def programs(self) -> int:
        out = 1
        for g in self.grid:
            out *= int(g)
        return out

    def signature(self) -> dict[str, str]:
        """Triton types of the runtime arguments ("*bf16", "i32:16", "fp32", ...)."""
        out: dict[str, str] = {}
        for name, value in self.args.items():
            if isinstance(value, str) and value.startswith("*"):
                out[name] = value
            elif isinstance(value, bool):
                out[name] = "i1"
            elif isinstance(value, int):
                typ = "i64" if not -(2**31) <= value < 2**31 else "i32"
                out[name] = f"{typ}:16" if value % 16 == 0 and value != 0 else typ
            elif isinstance(value, float):
                out[name] = "fp32"
            else:
                out[name] = str(value)
        return out

    def kernel_ref(self, fn: Any = None) -> KernelRef:
        """A `KernelRef` to cross-compile this launch (``fn``: a compilable JITFunction of the
        same kernel when the recorded one was interpreted)."""
        from targets.base import KernelRef

        jit = fn if fn is not None else self.fn
        consts = dict(self.constexprs)
        # None arguments are constexprs to Triton (they specialize the kernel away)
        sig = {}
        for name, typ in self.signature().items():
            if self.args[name] is None:
                consts[name] = None
            else:
                sig[name] = typ
        try:
            source = inspect.getsource(getattr(jit, "fn", jit))
        except (OSError, TypeError):
            source = ""
        return KernelRef(name=self.kernel, fn=jit, source=source, signature=sig,
                         constexprs=consts)

    def launch_config(self, overrides: dict[str, Any] | None = None) -> LaunchConfig:
        """The `LaunchConfig` this launch compiles with (Triton's defaults where it set none)."""
        from targets.base import LaunchConfig

        opts = {**self.options, **(overrides or {})}
        extra = {k: v for k, v in opts.items()
                 if k in ("waves_per_eu", "matrix_instr_nonkdim", "kpack", "num_ctas", "maxnreg")
                 and v is not None}
        return LaunchConfig(num_warps=int(opts.get("num_warps") or 4),
                            num_stages=int(opts.get("num_stages") or 3), extra=extra)

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "grid": list(self.grid), "args": dict(self.args),
                "constexprs": {k: v for k, v in self.constexprs.items()},
                "options": dict(self.options),
                "autotune_configs": [dict(c) for c in self.autotune_configs],
                "heuristics": list(self.heuristics)}


def innermost(obj: Any) -> tuple[Any, tuple[dict[str, Any], ...], tuple[str, ...]]:
    """(the @triton.jit object, autotune configs, heuristic names) of a possibly decorated
    kernel (``@triton.autotune`` over ``@triton.heuristics`` over ``@triton.jit``)."""
    configs: tuple[dict[str, Any], ...] = ()
    heur: list[str] = []
    while _is_wrapper(obj):
        if hasattr(obj, "configs"):
            configs = tuple(config_dict(c) for c in obj.configs)
        if isinstance(getattr(obj, "values", None), dict):
            heur.extend(obj.values)
        obj = obj.fn
    return obj, configs, tuple(heur)


def _is_wrapper(obj: Any) -> bool:
    return type(obj).__name__ in ("Autotuner", "Heuristics")


def config_dict(cfg: Any) -> dict[str, Any]:
    """A ``triton.Config`` as a plain dict: its kwargs plus the launch options it sets."""
    out = dict(getattr(cfg, "kwargs", {}) or {})
    for name in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        value = getattr(cfg, name, None)
        if value is not None and not (name == "num_ctas" and value == 1):
            out[name] = value
    return out


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
    bound = dict(zip(names, args))
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
    from triton.runtime import interpreter, jit

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
            cfg.pre_hook({**dict(zip(self.arg_names, args)), **full})
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


# --- the device, answered from the hardware model -------------------------------------------


def device_properties(hw: HardwareModel) -> SimpleNamespace:
    """What ``torch.cuda.get_device_properties`` says on `hw` (fields launchers read)."""
    lim = hw.limits
    major, minor = capability(hw)
    return SimpleNamespace(
        name=hw.full_name, multi_processor_count=int(hw.compute_units.value),
        total_memory=int(hw.memory.capacity_gb.value * 2**30), major=major, minor=minor,
        warp_size=hw.build.warp_size,
        max_threads_per_multi_processor=int(lim.max_threads_per_unit.value),
        max_threads_per_block=int(lim.max_threads_per_block.value),
        regs_per_multiprocessor=int(lim.registers_per_unit.value),
        shared_memory_per_block=min(49152, int(lim.shared_memory_per_block_bytes.value)),
        shared_memory_per_block_optin=int(lim.shared_memory_per_block_bytes.value),
        shared_memory_per_multiprocessor=int(lim.shared_memory_per_unit_bytes.value),
        L2_cache_size=int(hw.memory.last_level_cache_bytes.value),
        gcnArchName=hw.build.arch if hw.vendor == "amd" else "",
        is_integrated=False, uuid="porter-" + hw.name)


def capability(hw: HardwareModel) -> tuple[int, int]:
    """``torch.cuda.get_device_capability`` on `hw`: (9, 0) for sm_90; (9, 4) for gfx942."""
    arch = hw.build.arch
    digits = re.sub(r"\D", "", arch.removeprefix("sm_").removeprefix("gfx"))
    if hw.vendor == "amd":
        return (int(digits[:1] or 9), int(digits[1:2] or 0))
    return (int(digits[:-1] or 0), int(digits[-1:] or 0))


def triton_properties(hw: HardwareModel) -> dict[str, Any]:
    """``triton.runtime.driver.active.utils.get_device_properties(i)`` on `hw`."""
    lim = hw.limits
    return {"multiprocessor_count": int(hw.compute_units.value),
            "max_shared_mem": int(lim.shared_memory_per_block_bytes.value),
            "max_num_regs": int(lim.registers_per_unit.value),
            "warpSize": hw.build.warp_size,
            "sm_clock_rate": int(hw.boost_clock_mhz.value * 1000),
            "mem_clock_rate": 0, "mem_bus_width": 0}


class _FakeDriver:
    """Enough of ``triton.runtime.driver.active`` for a launcher sizing itself to `hw`."""

    def __init__(self, hw: HardwareModel) -> None:
        from triton.backends.compiler import GPUTarget

        backend = "hip" if hw.vendor == "amd" else "cuda"
        arch: Any = hw.build.arch
        if backend == "cuda":
            arch = int(re.sub(r"\D", "", str(arch)) or 0)
        self._target = GPUTarget(backend, arch, hw.build.warp_size)
        self.utils = SimpleNamespace(get_device_properties=lambda *_: triton_properties(hw))

    def get_current_target(self) -> Any:
        return self._target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, *_: Any) -> int:
        return 0

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def is_active(self) -> bool:
        return True


@contextlib.contextmanager
def device_answers(hw: HardwareModel) -> Iterator[None]:
    """Inside the block, the device questions launchers ask are answered for `hw`."""
    import importlib

    import torch

    holder = importlib.import_module("triton.runtime.driver").driver
    props = device_properties(hw)
    patches: list[tuple[Any, str, Any]] = [
        (torch.cuda, "get_device_properties", lambda *_a, **_k: props),
        (torch.cuda, "get_device_capability", lambda *_a, **_k: capability(hw)),
        (torch.cuda, "get_device_name", lambda *_a, **_k: hw.full_name),
        (torch.cuda, "current_device", lambda: 0),
        (torch.version, "hip", "6.2.0" if hw.vendor == "amd" else None),
    ]
    saved = [(obj, name, getattr(obj, name, None)) for obj, name, _ in patches]
    before = holder._active
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        holder._active = _FakeDriver(hw)
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)
        holder._active = before


# --- why a kernel cannot build for a target -------------------------------------------------

_BLOCKERS = (
    # inline assembly is PTX unless it reads as AMDGCN (v_*/s_* instructions)
    (r"inline_asm_elementwise\(\s*(?:asm\s*=\s*)?[\"'](?!\s*[vs]_)",
     "nvidia", "inline PTX (tl.inline_asm_elementwise)"),
    (r"inline_asm_elementwise\(\s*(?:asm\s*=\s*)?[\"']\s*[vs]_", "amd",
     "inline AMDGCN assembly (tl.inline_asm_elementwise)"),
    (r"triton\.language\.extra\.cuda|extra\.cuda\.libdevice|libdevice\.cuda",
     "nvidia", "CUDA libdevice (triton.language.extra.cuda)"),
    (r"triton\.language\.extra\.hip|extra\.hip\.libdevice", "amd",
     "HIP libdevice (triton.language.extra.hip)"),
    (r"\btl\.extra\.cuda\b|\bconvert_custom_float8_sm\d+", "nvidia", "an NVIDIA-only intrinsic"),
    (r"_experimental_make_tensor_descriptor|tl\.make_tensor_descriptor|experimental_descriptor",
     "nvidia-tma", "a TMA tensor descriptor (sm_90 and later)"),
)


def blocker(source: str, hw: HardwareModel, error: str = "") -> str:
    """One line naming what in `source` keeps it from compiling for `hw`, or "" when nothing
    known does (the compiler's own `error`, shortened, is the fallback when given)."""
    vendor = hw.vendor
    for pattern, needs, what in _BLOCKERS:
        if not re.search(pattern, source, re.DOTALL):
            continue
        if needs == "nvidia" and vendor != "nvidia":
            return f"{what} does not build for {hw.name} ({hw.build.arch})"
        if needs == "amd" and vendor != "amd":
            return f"{what} does not build for {hw.name} ({hw.build.arch})"
        if needs == "nvidia-tma" and "tma" not in hw.features:
            return f"{what}: {hw.name} ({hw.build.arch}) has no TMA"
    if error:
        return " ".join(error.split())[:200]
    return ""
