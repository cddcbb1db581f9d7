"""One recorded launch (`Launch`: kernel, grid, arguments, constexprs, options), the launch
options and override keys the recorder knows, and how a decorated kernel unwraps."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from dataclasses import field
from typing import TYPE_CHECKING
from typing import Any

if TYPE_CHECKING:
    from targets.base import KernelRef
    from targets.base import LaunchConfig

# Launch options a kernel call may carry besides its arguments (Triton's compile options).
OPTION_NAMES = ("num_warps", "num_stages", "num_ctas", "maxnreg", "waves_per_eu",
                "matrix_instr_nonkdim", "kpack", "enable_fp_fusion", "launch_pdl",
                "launch_cooperative_grid")
# The override that picks an autotuned kernel's config by index (its variant space).
AUTOTUNE_KEY = "autotune"


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
