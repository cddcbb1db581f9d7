"""KernelBench problem files, taken as-is (``Model``, ``get_inputs``, ``get_init_inputs``).

How a file becomes an `OpSpec`:

- **Sizes.** The file's module-level integer assignments (``batch_size = 4096``,
  ``dim = 393216``, ...) are its *size globals*, in file order. A KernelBench spec's `shape` is
  the tuple of their values; ``spec.shape_names`` says which is which. The real shape is the
  file's own values (for the GPU). For the CPU interpreter tier, large sizes are capped and
  then halved until the inputs hold at most `INTERPRET_ELEMENT_BUDGET` elements; small
  integers (axes such as ``dim = 1``) are never touched, so the rank, the reduced dimensions
  and the broadcasting stay what the file says. Globals derived from sizes
  (``input_shape = (num_classes,)``) follow, because the file is re-executed with the size
  assignments replaced (an AST rewrite of the constants only; the file on disk is not edited).
- **Parameters.** ``Model(*get_init_inputs())`` is built under ``torch.manual_seed(0)``, so its
  parameters are created in the file's own order and equal those of anyone else building the
  model under that seed. They are lifted to trailing inputs, and the reference calls the
  module through ``torch.func.functional_call``: ``reference(*inputs, *params)`` is a plain
  function of tensors, and the reference and the candidate see the same weights.
- **Inputs.** ``get_inputs()`` runs under a seed drawn from the judge's generator (fresh inputs
  every trial) with the target device as the default device (no multi-GB host copies on the
  GPU); floating tensors are cast to the requested dtype, integer ones (class targets) kept.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from harness.problem import Shape
from porter.errors import SpecError
from porter.specs.kb_source import bind_num_features
from porter.specs.kb_source import cast
from porter.specs.kb_source import globals_read
from porter.specs.kb_source import input_size_attrs
from porter.specs.kb_source import keep_parity
from porter.specs.kb_source import rewrite_sizes
from porter.specs.kb_source import shape_attrs
from porter.specs.kb_source import shape_key
from porter.specs.kb_source import size_globals
from porter.specs.kb_source import structure
from porter.specs.opspec import OpSpec
from porter.specs.opspec import import_file
from porter.specs.opspec import validate

log = logging.getLogger(__name__)

# The interpreter runs a Triton program element by element in numpy: ~32K elements per input
# keeps one check stage to a second or two on a laptop core.
INTERPRET_ELEMENT_BUDGET = 1 << 15
# First cap for any size above it; then the largest size is halved until the budget is met.
INTERPRET_SIZE_CAP = 1024
# Sizes at or below this are taken to be axes or tiny counts and never changed.
MIN_REDUCIBLE = 8
PARAM_SEED = 0
LEADING_FLOOR = 16


@dataclass
class KernelBenchProblem:
    """One KernelBench file, re-executable at any sizes (the mutable cache lives here)."""

    path: Path
    source: str
    size_names: tuple[str, ...]
    original: tuple[int, ...]
    _modules: dict[tuple[int, ...], ModuleType] = field(default_factory=dict)
    _models: dict[tuple[Any, ...], torch.nn.Module] = field(default_factory=dict)
    _independent: dict[tuple[Any, ...], bool] = field(default_factory=dict)
    n_inputs: int = 0

    def module(self, shape: Shape) -> ModuleType:
        """The file executed with its size globals set to `shape`."""
        shape = tuple(int(d) for d in shape)
        if len(shape) != len(self.size_names):
            raise SpecError(
                self.path,
                f"shape {shape} has {len(shape)} sizes; "
                f"this file's sizes are {', '.join(self.size_names)}",
            )
        mod = self._modules.get(shape)
        if mod is None:
            src = self.source if shape == self.original else rewrite_sizes(
                self.source, dict(zip(self.size_names, shape, strict=True))
            )
            mod = import_file(self.path, source=src, tag="kernelbench")
            for attr in ("Model", "get_inputs", "get_init_inputs"):
                if not callable(getattr(mod, attr, None)):
                    raise SpecError(self.path, f"KernelBench file has no {attr}()")
            self._modules[shape] = mod
        return mod

    def model(self, shape: Shape) -> torch.nn.Module:
        """``Model(*get_init_inputs())`` at these sizes, built under the fixed parameter seed."""
        key = ("model", tuple(shape))
        m = self._models.get(key)
        if m is None:
            mod = self.module(shape)
            try:
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(PARAM_SEED)
                    m = mod.Model(*mod.get_init_inputs())
            except Exception as exc:  # noqa: BLE001 - user file; one line
                raise SpecError(self.path, f"Model(*get_init_inputs()) failed: "
                                f"{type(exc).__name__}: {exc}") from None
            m.eval()
            self._models[key] = m
        return m

    def lifted(self, shape: Shape) -> list[tuple[str, torch.Tensor]]:
        """The model's parameters then buffers, in creation order, as (name, tensor)."""
        m = self.model(shape)
        return list(m.named_parameters()) + list(m.named_buffers())

    def make_inputs(self, shape: Shape, dtype: torch.dtype, device: torch.device,
                    gen: torch.Generator) -> tuple[Any, ...]:
        """``(*get_inputs(), *params)`` at `shape`, random under a seed drawn from `gen`."""
        mod = self.module(shape)
        seed = int(torch.randint(0, 2**62, (1,), generator=gen, device=gen.device).item())
        device = torch.device(device)
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(seed)
                with torch.device(device):
                    raw = list(mod.get_inputs())
        except Exception as exc:  # noqa: BLE001
            at = self.describe(shape) or "x".join(map(str, shape)) or "its own sizes"
            raise SpecError(self.path, f"get_inputs() failed at {at}: "
                            f"{type(exc).__name__}: {exc or 'no message'}") from None
        inputs = [cast(x, dtype, device) for x in raw]
        params = [cast(t.detach(), dtype, device) for _, t in self.lifted(shape)]
        self.n_inputs = len(inputs)
        # Remember which sizes produced these tensor shapes, so the reference finds its model.
        self._models[("by_inputs", shape_key(inputs))] = self.model(shape)
        return (*inputs, *params)

    def reference(self, *args: Any) -> Any:
        """Call the file's Model functionally: ``args = (*inputs, *params)``."""
        n = self.n_inputs
        inputs, params = list(args[:n]), list(args[n:])
        model = self._size_independent_model()
        if model is None:
            model = self._models.get(("by_inputs", shape_key(inputs)))
        if model is None:
            model = self._find_model(inputs)
        names = [name for name, _ in list(model.named_parameters()) + list(model.named_buffers())]
        if len(names) != len(params):
            raise SpecError(self.path, f"reference got {len(params)} parameter tensor(s), "
                            f"the model has {len(names)}")
        by_name = dict(zip(names, params, strict=True))
        # Attributes that are a parameter's shape (LayerNorm's normalized_shape is its weight's)
        # are read from the tensors passed in: a symbolic trace then keeps them symbolic, and
        # one model serves every size.
        saved = []
        hooks = []
        try:
            for mod_name, attr, pname in shape_attrs(model):
                sub = model.get_submodule(mod_name)
                saved.append((sub, attr, getattr(sub, attr)))
                setattr(sub, attr, tuple(by_name[pname].shape))
            # Likewise an attribute the forward only checks against its input's size (an
            # InstanceNorm's num_features without weights or running stats, which it reads
            # only to warn on a mismatch) is taken from that input: compared with the
            # example's constant, it pinned the traced kernel's channels to the example's.
            for name in input_size_attrs(model):
                sub = model.get_submodule(name)
                saved.append((sub, "num_features", sub.num_features))
                hooks.append(sub.register_forward_pre_hook(bind_num_features))
            return torch.func.functional_call(model, by_name, tuple(inputs))
        finally:
            for hook in hooks:
                hook.remove()
            for sub, attr, value in reversed(saved):
                setattr(sub, attr, value)

    def _size_independent_model(self) -> torch.nn.Module | None:
        """A model usable at any sizes, when every size built so far computes the same thing.

        Looking the model up by input shape would make a symbolic tracer (codegen's make_fx)
        specialize every size; most level-1 models (activations, softmax, losses) hold nothing
        size-dependent, so the lookup is skipped for them. LayerNorm's normalized_shape is.
        Models are compared on their parameter shapes and on the plain attributes their
        forward actually reads (an unused ``self.channels`` that follows the sizes does not
        make a model size-dependent); a forward that reads a size global is size-dependent.
        """
        built = [(k[1], m) for k, m in self._models.items() if k[0] == "model"]
        if len(built) < 2:
            return None
        key = tuple(shape for shape, _ in built)
        if key not in self._independent:
            self._independent[key] = self._same_computation(built)
        return built[0][1] if self._independent[key] else None

    def _same_computation(self, built: list[tuple[tuple[int, ...], torch.nn.Module]]) -> bool:
        structures = [structure(m) for _, m in built]
        if all(st == structures[0] for st in structures[1:]):
            return self._reads_no_size_global(built)
        reads: set[tuple[str, str]] = set()
        for shape, m in built:
            got = self._attribute_reads(shape, m)
            if got is None:
                return False  # could not observe the forward: stay conservative
            reads |= got
        first = structure(built[0][1], reads)
        return all(structure(m, reads) == first for _, m in built[1:]) and \
            self._reads_no_size_global(built)

    def _reads_no_size_global(self, built: list[tuple[tuple[int, ...], torch.nn.Module]]) -> bool:
        # The forward of each module re-executed at other sizes sees that execution's globals.
        sizes = {n.split("[")[0] for n in self.size_names}
        for _, m in built:
            for mod in m.modules():
                fwd = getattr(type(mod).forward, "__code__", None)
                if fwd is not None and sizes & globals_read(fwd) and \
                        not type(mod).__module__.startswith("torch."):
                    return False
        return True

    def _attribute_reads(self, shape: tuple[int, ...], model: torch.nn.Module
                         ) -> set[tuple[str, str]] | None:
        """(submodule name, attribute) pairs the forward reads, run once on the meta device."""
        with _disable_current_modes():  # called under make_fx: the probe must not be traced
            return self._probe_reads(shape, model)

    def _probe_reads(self, shape: tuple[int, ...], model: torch.nn.Module
                     ) -> set[tuple[str, str]] | None:
        mod = self.module(shape)
        try:
            with torch.device("meta"):
                raw = list(mod.get_inputs())
            probe = copy.deepcopy(model).to("meta")
        except Exception:  # noqa: BLE001 - sampler or model not meta-friendly
            log.debug("%s: cannot run the forward on meta at %s", self.path, shape)
            return None
        reads: set[tuple[str, str]] = set()
        swapped: list[tuple[torch.nn.Module, type]] = []
        for name, sub in probe.named_modules():
            cls = type(sub)

            def getattribute(obj: Any, attr: str, _name: str = name, _cls: type = cls) -> Any:
                reads.add((_name, attr))
                return _cls.__getattribute__(obj, attr)

            sub.__class__ = type(cls.__name__, (cls,), {"__getattribute__": getattribute})
            swapped.append((sub, cls))
        try:
            with torch.no_grad():
                probe(*raw)
        except Exception:  # noqa: BLE001 - an op without a meta kernel: no answer
            log.debug("%s: forward on meta failed at %s", self.path, shape)
            return None
        finally:
            for sub, cls in swapped:
                sub.__class__ = cls
        return reads

    def _find_model(self, inputs: list[Any]) -> torch.nn.Module:
        # Inputs made elsewhere (e.g. a judge's own sizes): try the sizes already built.
        for shape in list(self._modules):
            probe = self.make_inputs(shape, torch.float32, torch.device("cpu"),
                                     torch.Generator().manual_seed(0))[: self.n_inputs]
            if shape_key(list(probe)) == shape_key(inputs):
                return self.model(shape)
        raise SpecError(self.path,
                        f"no sizes of this file produce inputs shaped {shape_key(inputs)}",
                        "make the inputs with spec.make_inputs")

    def describe(self, shape: Shape) -> str:
        """``"batch_size=16 (was 4096), dim=1024 (was 393216)"``; unchanged sizes without "was"."""
        parts = []
        # Not strict: this is the spec's size_note, text for any shape a caller passes (a
        # user's --shape of the wrong length is described as far as it goes, never raises).
        for name, v, o in zip(self.size_names, shape, self.original, strict=False):
            parts.append(f"{name}={v}" if v == o else f"{name}={v} (was {o})")
        return ", ".join(parts)

    def reduce(self, budget: int = INTERPRET_ELEMENT_BUDGET,
               cap: int = INTERPRET_SIZE_CAP) -> Shape:
        """Sizes for the interpreter tier (see `_reduce`). A reduced size that lands on the value
        of a size the file keeps as written (out_features 8192 -> 256 = num_groups 256) is
        stepped back up (x2) off it where the file can take that (run once at those sizes): the
        reference is traced at these sizes, and a tracer may tie equal sizes together."""
        shape = self._reduce(budget, cap)
        apart = self._apart(shape)
        if apart != shape and self._runs(apart):
            return apart
        return shape

    def _apart(self, shape: Shape) -> Shape:
        value = dict(zip(self.original, shape, strict=True))
        kept = {v for o, v in value.items() if o == v}
        # At the floor (MIN_REDUCIBLE) most sizes meet a small kept one, and only the model's
        # own sizes can be tied to it by a trace: features 64 -> 8 = num_groups 8 made group
        # norm's C // G one, and the tracer pinned C to 8 (KernelBench 35_GroupNorm_).
        init = self._init_sizes()
        moved = {}
        for o, v in value.items():
            if v != o and (v > MIN_REDUCIBLE or o in init) and v in kept:
                while v < o and v in kept:
                    v = keep_parity(min(o, v * 2), o)
                moved[o] = v
        return tuple(moved.get(o, v) for o, v in zip(self.original, shape, strict=True))

    def _init_sizes(self) -> set[int]:
        """The file's values of the size globals its get_init_inputs reads (the model's)."""
        get_init = getattr(self.module(self.original), "get_init_inputs", None)
        code = getattr(get_init, "__code__", None)
        if code is None:
            return set()
        reads = globals_read(code)
        return {o for n, o in zip(self.size_names, self.original, strict=True)
                if n.split("[")[0] in reads}

    def _runs(self, shape: Shape) -> bool:
        """Whether the file's model builds and runs at `shape` (small sizes: on the CPU)."""
        inputs: tuple[Any, ...] = ()
        try:
            inputs = self.make_inputs(shape, torch.float32, torch.device("cpu"),
                                      torch.Generator().manual_seed(0))
            with torch.no_grad():
                self.reference(*inputs)
        except Exception as exc:  # noqa: BLE001 - the file's own constraint
            log.debug("%s: sizes %s do not fit the file (%s)", self.path, shape, exc)
            self._forget(shape, inputs)
            return False
        return True

    def _reduce(self, budget: int, cap: int) -> Shape:
        """Sizes for the interpreter tier: capped, then halved until the inputs fit `budget`.

        Sizes that are equal in the file stay equal (``batch_size == input_shape[0]`` may be
        what makes a broadcast legal), the leading size is halved first (down to
        `LEADING_FLOOR`), then the largest; a size that is not a power of two stays odd
        (``| 1``) so non-power-of-two handling is still exercised.
        """
        groups = sorted({v for v in self.original if v > MIN_REDUCIBLE}, key=self.original.index)
        value = {g: keep_parity(min(g, cap), g) if g > cap else g for g in groups}

        def current() -> tuple[int, ...]:
            return tuple(value.get(v, v) for v in self.original)

        for _ in range(64):
            if not groups or self._input_elements(current()) <= budget:
                break
            live = [g for g in groups if value[g] > MIN_REDUCIBLE]
            if not live:
                break
            lead = self.original[0]
            # The leading (batch-like) size changes nothing about the structure: it goes first.
            if lead in live and value[lead] > LEADING_FLOOR:
                g = lead
            else:
                g = max(live, key=lambda k: value[k])
            value[g] = max(MIN_REDUCIBLE, keep_parity(value[g] // 2, g))
        return current()

    def odd(self, shape: Shape) -> Shape:
        """`shape` with every even size the reduction changed made odd (one less), for the
        judge's odd-sizes stage. Sizes equal in `shape` stay equal (a bias of
        ``(out_features,)`` keeps its tie); sizes the file keeps as written (a group count, an
        axis) are not touched. Odd sizes the file cannot take (a group count that must divide
        the channels, a view that needs an even width) are found by running the model there
        once at these small sizes, and odd sizes that change what the model computes (a model
        that served every size would no longer) are refused; then `shape` itself is returned.
        """
        reduced = {v for v, o in zip(shape, self.original, strict=True) if v != o}
        value = {v: v - 1 for v in reduced if v > MIN_REDUCIBLE and v % 2 == 0}
        odd = tuple(value.get(v, v) for v in shape)
        if odd == tuple(shape) or len(set(odd)) < len(set(shape)):
            # nothing to make odd, or two different sizes would merge (a tracer gives equal
            # sizes one symbol)
            return tuple(shape)
        # whether one model serves the sizes built so far (None: fewer than two to tell)
        built = sum(k[0] == "model" for k in self._models)
        generic = None if built < 2 else self._size_independent_model() is not None
        inputs: tuple[Any, ...] = ()
        try:
            inputs = self.make_inputs(odd, torch.float32, torch.device("cpu"),
                                      torch.Generator().manual_seed(0))
            with torch.no_grad():
                self.reference(*inputs)
        except Exception as exc:  # noqa: BLE001 - the file's own constraint: keep the sizes
            log.debug("%s: odd sizes %s do not fit the file (%s); odd-sizes stage at %s",
                      self.path, odd, exc, shape)
            self._forget(odd, inputs)
            return tuple(shape)
        if generic is not False and self._size_independent_model() is None:
            log.debug("%s: odd sizes %s change what the model computes; odd-sizes stage at %s",
                      self.path, odd, shape)
            self._forget(odd, inputs)
            return tuple(shape)
        return odd

    def _forget(self, shape: Shape, inputs: tuple[Any, ...]) -> None:
        """Drop what was built at `shape` (sizes the spec will not use)."""
        self._modules.pop(tuple(shape), None)
        self._models.pop(("model", tuple(shape)), None)
        if inputs:
            self._models.pop(("by_inputs", shape_key(list(inputs[: self.n_inputs]))), None)

    def _input_elements(self, shape: Shape) -> int:
        # Evaluated through the real get_inputs on the meta device: no memory, exact structure.
        mod = self.module(shape)
        try:
            with torch.device("meta"):
                raw = list(mod.get_inputs())
        except Exception:  # noqa: BLE001 - meta unsupported by some samplers: measure on CPU
            log.debug("%s: get_inputs on meta failed; sizing from the globals", self.path)
            return math.prod(shape)
        return sum(x.numel() for x in raw if isinstance(x, torch.Tensor))


def load_kernelbench(path: Path) -> OpSpec:
    """Turn an unmodified KernelBench problem file into an `OpSpec` (see the module docstring).

    Raises:
        SpecError: the file lacks Model / get_inputs / get_init_inputs, fails to import, or its
            model cannot be built or run at reduced sizes.
    """
    source = path.read_text(encoding="utf-8")
    names, original = size_globals(path, source)
    kb = KernelBenchProblem(path=path, source=source, size_names=names, original=original)
    mod = kb.module(original)  # imports once at real sizes: cheap, get_inputs is not called
    del mod
    reduced = kb.reduce()
    interpret_shapes: list[Shape] = [reduced]
    smaller = kb.reduce(budget=INTERPRET_ELEMENT_BUDGET // 8, cap=INTERPRET_SIZE_CAP // 4)
    if smaller != reduced:
        interpret_shapes.append(smaller)
    for shape in interpret_shapes:  # so the reference can tell whether sizes change the model
        kb.model(shape)
    stem = path.stem
    doc = (kb.module(original).Model.__doc__ or "").strip().split("\n")[0]
    spec = OpSpec(
        name=f"kb_{stem}",
        path=path,
        reference=kb.reference,
        make_inputs=kb.make_inputs,
        shapes=(original,),
        interpret_shapes=tuple(interpret_shapes),
        smoke_shape=interpret_shapes[-1],
        dtypes=(torch.float32,),  # what the file's get_inputs produces
        source_kind="kernelbench",
        description=f"KernelBench {stem}: {doc}",
        # The judge's default odd sizes would not know which entry is which (a shape here is
        # the file's size globals, not a tensor's dims): the smallest reduced sizes with every
        # even size made odd, where the file can take that (see KernelBenchProblem.odd).
        odd_shapes=(kb.odd(interpret_shapes[-1]),),
        shape_names=names,
        size_note=kb.describe,
    )
    validate(spec)
    kb._size_independent_model()  # decided now, outside any tracer
    return spec


def kernelbench_problem(spec: OpSpec) -> KernelBenchProblem:
    """The `KernelBenchProblem` behind a KernelBench `OpSpec` (for tests and reports)."""
    owner = getattr(spec.make_inputs, "__self__", None)
    if not isinstance(owner, KernelBenchProblem):
        raise SpecError(spec.path or spec.name, "not a KernelBench spec")
    return owner
