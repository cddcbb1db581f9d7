"""The user's own kernel through the port: loaded by file or import path, launched as its
launcher launches it, retuned per target, and written into the pack.

A spec names it as::

    TRITON_KERNEL = "kernel.py::_softmax_kernel"                       # a file beside the spec
    TRITON_KERNEL = "liger_kernel.ops.rms_norm:_rms_norm_forward_kernel"  # or an import path
    TRITON_LAUNCHER = "liger_kernel.ops.rms_norm:rms_norm_forward"
    def TRITON_CALL(launcher, x, w):          # optional: how to call a launcher that does not
        return launcher(x, w, 1e-6, 0.0, "llama", None)[0]   # take (*inputs, out=) and return it

Nothing else is needed: how the launcher launches (grid, constexprs, num_warps, num_stages) is
recorded by running it (`porter.recorder`) at each shape with the target's device answers.
``TRITON_CONSTEXPRS(shape, dtype)`` still overrides the recording where a spec gives it.

Its configs (`configs`): ``{"origin": "existing"}`` is the kernel **as shipped** (the launcher's
own choices); the others **retune** it: a TUNABLES name the launcher takes is passed to it, a
launch option (num_warps, num_stages, waves_per_eu, ...) or constexpr it does not take is
overridden where the launch happens, and ``{"autotune": i}`` picks an ``@triton.autotune``
config. Retuned configs that differ from shipped only in launch options share its
correctness check (one kernel body, one semantic config).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from porter.errors import SpecError
from porter.recorder import AUTOTUNE_KEY
from porter.recorder import OPTION_NAMES
from porter.recorder import Launch
from porter.recorder import RecordError
from porter.recorder import innermost
from porter.recorder import intercept
from porter.recorder import record

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from porter.session import PortSession

log = logging.getLogger(__name__)

ORIGIN = "existing"
SHIPPED: dict[str, Any] = {"origin": ORIGIN}
# The hardware model a check child answers device questions from (set by the judge's child
# process; never on a GPU, where the device answers for itself).
CHECK_TARGET_ENV = "PORTER_CHECK_TARGET"
# Launch options searched when TUNABLES names none (each pruned by the target's thread limit).
DEFAULT_WARPS = (2, 4, 8, 16)
# AMD: waves per EU the compiler aims for (occupancy hint); offered beside the shipped warps.
AMD_WAVES_PER_EU = (1, 2)
# AMD: MFMA instruction shape (16x16 or 32x32) for kernels with tl.dot.
AMD_MFMA_NONKDIM = (16, 32)
# Meta tensors cost nothing; a launcher that needs data is recorded on CPU tensors up to this.
MAX_CPU_RECORD_ELEMENTS = 1 << 26


# --- loading ---------------------------------------------------------------------------------


def is_import_path(ref: Any) -> bool:
    """"package.module:name" (not "file.py::name")."""
    return isinstance(ref, str) and "::" not in ref and ref.count(":") == 1


def resolve_import(spec_path: Path, ref: str, field_name: str) -> Any:
    """The object at import path "package.module:name".

    Raises:
        SpecError: the module does not import (with the reason) or lacks the name.
    """
    module_name, attr = ref.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is one line
        raise SpecError(spec_path, f"{field_name}: cannot import {module_name}: "
                        f"{type(exc).__name__}: {exc}",
                        "install the package that provides it (pip install ...)") from None
    if not hasattr(module, attr):
        raise SpecError(spec_path, f"{field_name}: {module_name} has no {attr!r}")
    return getattr(module, attr)


class UserLauncher:
    """The spec's launcher in the judge's out contract: ``launcher(*inputs, out=out, **knobs)``.

    With a TRITON_CALL hook, ``call(launcher_with_knobs, *inputs)`` returns the output, which
    is copied into ``out`` when one is given (a copy moves data; it computes nothing).
    """

    def __init__(self, fn: Callable[..., Any], call: Callable[..., Any] | None = None,
                 ref: str = "") -> None:
        self.fn, self.call, self.ref = fn, call, ref
        self.__name__ = getattr(fn, "__name__", "launcher")
        self.__wrapped__ = fn
        self.accepts = accepted_params(fn)

    def __call__(self, *inputs: Any, out: Any = None, **knobs: Any) -> Any:
        if self.call is None:
            return self.fn(*inputs, out=out, **knobs)
        fn = functools.partial(self.fn, **knobs) if knobs else self.fn
        y = self.call(fn, *inputs)
        if out is None:
            return y
        out.copy_(y)
        return out


def accepted_params(fn: Any) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return frozenset()


def load(spec_path: Path, kernel_ref: str, launcher_ref: str | None, tunables: dict[str, Any],
         call: Callable[..., Any] | None) -> tuple[Any, Any]:
    """(KernelRef, launcher) of a spec's user kernel named by import path (or by file with a
    TRITON_CALL hook); the launcher wrapped in the out contract.

    Raises:
        SpecError: the path does not import, or the kernel is not a Triton kernel.
    """
    from porter.specs.kernels import load_kernel as load_file_kernel
    from porter.specs.kernels import resolve_file_attr
    from targets.base import KernelRef

    if is_import_path(kernel_ref):
        obj = resolve_import(spec_path, kernel_ref, "TRITON_KERNEL")
        jit, _, _ = innermost(obj)
        if not hasattr(jit, "arg_names"):
            raise SpecError(spec_path, f"TRITON_KERNEL {kernel_ref!r} is a {type(obj).__name__}, "
                            "not a @triton.jit kernel")
        path = inspect.getsourcefile(getattr(jit, "fn", jit))
        source = Path(path).read_text() if path else ""
        constexprs = {k: v for k, v in tunables.items()
                      if k.isupper() and not isinstance(v, (list, tuple))}
        kernel = KernelRef(name=kernel_ref.split(":", 1)[1], fn=obj, source=source,
                           constexprs=constexprs)
        launcher = None
        if launcher_ref is not None:
            launcher = (resolve_import(spec_path, launcher_ref, "TRITON_LAUNCHER")
                        if is_import_path(launcher_ref) else
                        resolve_file_attr(spec_path, launcher_ref, "TRITON_LAUNCHER"))
    else:
        by_file = launcher_ref if not is_import_path(launcher_ref) else None
        kernel, launcher = load_file_kernel(spec_path, kernel_ref, by_file, tunables)
        if launcher_ref is not None and is_import_path(launcher_ref):
            launcher = resolve_import(spec_path, launcher_ref, "TRITON_LAUNCHER")
    if launcher is not None:
        if not callable(launcher):
            raise SpecError(spec_path, f"TRITON_LAUNCHER {launcher_ref!r} is not callable")
        launcher = UserLauncher(launcher, call, ref=launcher_ref or "")
    return kernel, launcher


def kernel_file(spec: Any) -> Path | None:
    """The file that defines the user's kernel."""
    fn = getattr(spec.triton_kernel, "fn", None)
    jit, _, _ = innermost(fn)
    path = inspect.getsourcefile(getattr(jit, "fn", jit)) if jit is not None else None
    return Path(path) if path else None


# --- launching (the pack's `launch` and the judge's check call this) --------------------------


def launch_user(launcher: Any, inputs: tuple[Any, ...], out: Any, config: dict[str, Any] | None,
                ) -> Any:
    """Run the user's launcher with one config: knobs it takes passed to it, the rest
    (launch options, constexprs, an autotune pick) overridden where its kernels launch."""
    cfg = {k: v for k, v in (config or {}).items() if k != "origin"}
    accepts = getattr(launcher, "accepts", None) or accepted_params(launcher)
    knobs = {k: v for k, v in cfg.items() if k in accepts}
    over = {k: v for k, v in cfg.items() if k not in accepts}
    hw = _check_target()
    if not over and hw is None:
        return launcher(*inputs, out=out, **knobs)
    with intercept(hw, overrides=over, execute=True):
        return launcher(*inputs, out=out, **knobs)


def _check_target() -> HardwareModel | None:
    name = os.environ.get(CHECK_TARGET_ENV)
    if not name:
        return None
    import torch

    if torch.cuda.is_available():
        return None
    import hwmodels

    return hwmodels.get(name)


# --- recording at a shape --------------------------------------------------------------------


def record_at(spec: Any, problem: Any, hw: HardwareModel, shape: tuple[int, ...], dtype: Any,
              config: dict[str, Any] | None = None) -> list[Launch]:
    """The launches the user's launcher makes at `shape` on `hw` with `config` applied.

    Meta tensors first (free at any size); CPU tensors when the launcher needs data.

    Raises:
        RecordError: the launcher failed on both, or launched nothing.
    """
    import torch

    cfg = {k: v for k, v in (config or {}).items() if k != "origin"}
    launcher = spec.triton_launcher
    accepts = getattr(launcher, "accepts", None) or accepted_params(launcher)
    knobs = {k: v for k, v in cfg.items() if k in accepts}
    over = {k: v for k, v in cfg.items() if k not in accepts}
    what = f"the launcher {getattr(launcher, '__name__', '?')} at {tuple(shape)}"
    first_error: RecordError | None = None
    for device in ("meta", "cpu"):
        gen = torch.Generator().manual_seed(0)
        try:
            inputs = problem.make_inputs(tuple(shape), dtype, torch.device("meta"), gen)
            if device == "cpu":
                if sum(t.numel() for t in inputs if isinstance(t, torch.Tensor)) > \
                        MAX_CPU_RECORD_ELEMENTS:
                    break
                inputs = problem.make_inputs(tuple(shape), dtype, torch.device("cpu"), gen)
        except Exception as exc:
            raise RecordError(f"make_inputs{tuple(shape)} raised {type(exc).__name__}: {exc}") \
                from exc
        try:
            return record(lambda args=tuple(inputs): launcher(*args, out=None, **knobs), hw,
                          overrides=over, what=what)
        except RecordError as exc:
            first_error = first_error or exc
    assert first_error is not None
    raise first_error


class RecordedRef(tuple):
    """(KernelRef, LaunchConfig) of one recorded launch, with its programs as `grid` (the
    compile tier's projection reads it)."""

    grid: int = 1


def compile_refs(session: PortSession, hw: HardwareModel, shape: tuple[int, ...], dtype: Any,
                 config: dict[str, Any]) -> list[RecordedRef]:
    """What to cross-compile for one config of the user's kernel at `shape` on `hw`: every
    kernel its launcher launches there, specialized as launched."""
    launches = record_at(session.spec, session.problem, hw, shape, dtype, config)
    cache = session.__dict__.setdefault("_user_compilable", {})
    out = []
    for launch in launches:
        fn = compilable(launch.fn, cache)
        item = RecordedRef((launch.kernel_ref(fn), launch.launch_config()))
        item.grid = launch.programs
        out.append(item)
    return out


def compilable(fn: Any, cache: dict[Any, Any]) -> Any:
    """A JITFunction to cross-compile: `fn` itself, or (an interpreted one) its file re-imported
    with the interpreter off."""
    if type(fn).__name__ == "JITFunction":
        return fn
    key = id(fn)
    if key not in cache:
        from targets.interpreter import import_file
        from targets.interpreter import triton_interpret

        path = Path(inspect.getsourcefile(getattr(fn, "fn", fn)) or "")
        with triton_interpret(False):  # the decorator decides at import: compiled, not interpreted
            module = import_file(path, f"_porter_user_compile_{next(_COMPILE_IDS)}",
                                 register=False, own_folder=True)
        # the name may be bound to the @triton.autotune / @triton.heuristics wrapper
        cache[key], _, _ = innermost(getattr(module, fn.__name__))
    return cache[key]


_COMPILE_IDS = itertools.count()


# --- the retune space ------------------------------------------------------------------------


def configs(spec: Any, problem: Any, hw: HardwareModel, backend: Any, shape: tuple[int, ...],
            dtype: Any, limit: int | None) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any],
                                                                                   str]]]:
    """(configs, rejected with why) of the user's kernel for one unit: as shipped first, then at
    most `limit` retuned ones nearest it (one knob changed first).

    The space: TUNABLES (values the launcher takes, or options/constexprs overridden at launch),
    num_warps when TUNABLES names no option, ``@triton.autotune`` configs, and on AMD
    waves_per_eu; each pruned by the backend's `validate_config` (threads per block, ...).
    """
    from porter.search import launch_config

    if getattr(spec, "triton_kernel", None) is None or getattr(spec, "triton_launcher", None) \
            is None:
        return [], []
    try:
        shipped = record_at(spec, problem, hw, shape, dtype)
    except RecordError as exc:
        log.info("user kernel not recorded at %s on %s: %s", shape, hw.name, exc)
        shipped = []
    launcher = spec.triton_launcher
    accepts = getattr(launcher, "accepts", None) or accepted_params(launcher)
    # what shipped does: the launcher's parameter defaults, then the options it launched with
    base = launcher_defaults(launcher)
    base.update(shipped[0].options if shipped else {})
    base.setdefault("num_warps", 4)
    tun = {k: list(v) for k, v in (spec.tunables or {}).items()
           if isinstance(v, (list, tuple)) and v}
    consts = set()
    for launch in shipped:
        consts |= set(launch.constexprs)
    space: dict[str, list[Any]] = {k: v for k, v in tun.items()
                                   if k in accepts or k in OPTION_NAMES or k in consts}
    if not any(k in OPTION_NAMES for k in space):
        space["num_warps"] = list(DEFAULT_WARPS)
    # one knob changed first (the others left to the launcher), then every combination
    combos = [{k: v} for k, values in space.items() for v in values]
    if len(space) > 1:
        combos += [dict(zip(space, values, strict=True))
                   for values in itertools.product(*space.values())]
    autotuned = next((launch.autotune_configs for launch in shipped if launch.autotune_configs),
                     ())
    combos += [{AUTOTUNE_KEY: i} for i in range(len(autotuned))]
    if hw.vendor == "amd":
        combos += [{"waves_per_eu": w} for w in AMD_WAVES_PER_EU]
        if "tl.dot" in (spec.triton_kernel.source or ""):  # MFMA tile shape, matmuls only
            combos += [{"matrix_instr_nonkdim": k} for k in AMD_MFMA_NONKDIM]
    rejected: list[tuple[dict[str, Any], str]] = []
    kept: list[dict[str, Any]] = []
    seen = set()
    for combo in combos:
        cfg = {"origin": ORIGIN, **combo}
        key = tuple(sorted(combo.items()))
        if key in seen or _same_as_shipped(combo, base):
            continue
        seen.add(key)
        opts = {k: v for k, v in combo.items() if k in OPTION_NAMES}
        if AUTOTUNE_KEY in combo:
            opts = {k: v for k, v in autotuned[combo[AUTOTUNE_KEY]].items() if k in OPTION_NAMES}
        reasons = backend.validate_config(launch_config({**base, **opts}), hw)
        if reasons:
            rejected.append((cfg, "; ".join(reasons)))
            continue
        kept.append(cfg)
    kept.sort(key=lambda c: _distance(c, base))
    cap = len(kept) if limit is None else max(0, limit)
    return [dict(SHIPPED)] + kept[:cap], rejected


def _same_as_shipped(combo: dict[str, Any], base: dict[str, Any]) -> bool:
    return all(k in base and base[k] == v for k, v in combo.items())


def launcher_defaults(launcher: Any) -> dict[str, Any]:
    """The launcher's keyword defaults that are set (not None)."""
    try:
        params = inspect.signature(launcher).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in params
            if p.default is not inspect.Parameter.empty and p.default is not None
            and isinstance(p.default, (int, float, str, bool))}


def _distance(cfg: dict[str, Any], base: dict[str, Any]) -> tuple[int, float]:
    knobs = {k: v for k, v in cfg.items() if k != "origin"}
    d = 0.0
    for k, v in knobs.items():
        b = base.get(k)
        if isinstance(v, (int, float)) and isinstance(b, (int, float)) and v > 0 and b > 0:
            d += abs(math.log2(v) - math.log2(b))
        else:
            d += 1.0
    return (len(knobs), d)


def must_check(session: Any, target: str, bucket: str, dname: str,
               config: dict[str, Any]) -> bool:
    """Whether a user-kernel candidate is checked even though its projection cannot beat the
    kept kernel: the user's kernel is the subject of the port, so its shipped config and its
    best-projected retuned one are always checked (both usually share one check)."""
    from targets.tiers import Tier
    from targets.tiers import tier_rank

    if config.get("origin") != ORIGIN:
        return False
    if is_shipped(config):
        return True
    return not any(
        e.config.get("origin") == ORIGIN and not is_shipped(e.config) and e.target == target
        and e.bucket == bucket and e.dtype == dname and e.verdict != "rejected"
        and tier_rank(e.tier) >= tier_rank(Tier.INTERPRETED) for e in session.ledger)


def is_shipped(config: dict[str, Any]) -> bool:
    return dict(config) == SHIPPED


# --- the pack's source -----------------------------------------------------------------------

PACK_WRAPPER = '''

# --- porter: pack entry point for the user's kernel (written by `porter port`) ---
{launcher_line}
{call_source}

def launch(*inputs, out=None, config=None):
    """Run the user's launcher with this entry's config (`porter.user_kernel.launch_user`):
    knobs it takes are passed, launch options it does not take are set where it launches."""
    from porter.user_kernel import UserLauncher
    from porter.user_kernel import launch_user

    return launch_user(UserLauncher({launcher_name}, {call_name}), inputs, out, config)
'''


def pack_source(spec: Any) -> str:
    """The pack module of the user's kernel: its file (a kernel named by file) or an import of
    its library (named by import path; the library's version in a comment, so the source hash
    follows it), plus `launch`. The config is passed at launch, so every config of one target
    has the same source.

    Raises:
        porter.errors.PortError: the kernel's file already defines `launch`.
    """
    from porter.errors import PortError

    launcher = spec.triton_launcher
    fn = getattr(launcher, "fn", launcher)
    call = getattr(launcher, "call", None)
    ref = getattr(launcher, "ref", "")
    call_source, call_name = "", "None"
    if call is not None:
        import textwrap

        call_source = textwrap.dedent(inspect.getsource(call))
        call_source = call_source.replace(f"def {call.__name__}(", "def _porter_call(", 1)
        call_name = "_porter_call"
    if is_import_path(ref):
        module_name, attr = ref.split(":", 1)
        top = module_name.split(".", 1)[0]
        version = _version(top)
        body = (f'"""{spec.name}: the user\'s kernel from the installed library {top} '
                f'{version}."""\n# porter-library: {top}=={version}\n')
        launcher_line = f"from {module_name} import {attr} as _porter_launcher"
        name = "_porter_launcher"
    else:
        body = spec.triton_kernel.source
        if "\ndef launch(" in body:
            raise PortError(f"{spec.path}: TRITON_KERNEL's file already defines `launch`; "
                            "the pack wrapper needs that name")
        launcher_line = ""
        name = fn.__name__
    return body.rstrip("\n") + "\n" + PACK_WRAPPER.format(
        launcher_line=launcher_line, call_source=call_source, launcher_name=name,
        call_name=call_name)


def _version(dist: str) -> str:
    from importlib import metadata

    for name in (dist, dist.replace("_", "-")):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"
