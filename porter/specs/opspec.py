"""Op specs: what a user brings to the porter, loaded into one `OpSpec`.

Two kinds of file are accepted, told apart by what they define:

1. An **op spec module** (``examples/rmsnorm/spec.py``)::

       NAME = "rmsnorm"                          # optional; default: the folder name
       DESCRIPTION = "..."                       # optional; default: the module docstring
       def reference(x, weight):                 # required: plain PyTorch, the meaning
           return F.rms_norm(x, (x.shape[-1],), weight, eps=1e-6)
       def make_inputs(shape, dtype, device, generator):   # required: a tuple of inputs
           ...                                   # random, never zeros; fresh per call
       SHAPES = [(4096, 4096), ...]              # required: real, GPU-sized shapes
       DTYPES = [torch.bfloat16, ...]            # optional; default fp32, fp16, bf16
       INTERPRET_SHAPES = [(7, 129), ...]        # optional: reduced shapes for the CPU tier
       SMOKE_SHAPE = (7, 129)                    # optional; default INTERPRET_SHAPES[0]
       ODD_SHAPES = [(1, 7), ...]                # optional; default: the judge's
       TRITON_KERNEL = "kernel.py::_rmsnorm_fwd_kernel"    # optional: the user's kernel,
       TRITON_LAUNCHER = "kernel.py::rmsnorm_forward"      # ... and its launcher, relative
       TUNABLES = {"BLOCK_N": [1024, 2048], "num_warps": [4, 8]}   # to the spec file, or by
                                                 # import path "package.module:name"
       def TRITON_CALL(launcher, *inputs): ...   # optional: call a launcher that does not take
                                                 # (*inputs, out=) and return the output
       def TRITON_CONSTEXPRS(shape, dtype): ...  # optional override: the kernel's constexprs
                                                 # (and num_warps/num_stages) at `shape`;
                                                 # without it the launcher's launches are
                                                 # recorded (porter.recorder, porter.user_kernel)
       def BYTES(inputs, outputs): ...           # optional: bytes that must move
       def FLOPS(inputs, outputs): ...           # optional: FLOPs that must be done
       def ADVERSARIAL(shape, dtype, device, generator): ...  # optional extra cases

   A launcher is called as ``launcher(*inputs, out=out)`` (the judge's out contract).

2. A **KernelBench problem file**, unmodified (``Model``, ``get_inputs``,
   ``get_init_inputs``); see `porter.specs.kernelbench`.

Every problem with a file is a `SpecError` naming the file and what is wrong.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from types import ModuleType
from typing import Any
from typing import Literal

import torch

from harness.problem import AdversarialMaker
from harness.problem import CostFn
from harness.problem import InputMaker
from harness.problem import Problem
from harness.problem import Shape
from porter.errors import SpecError
from targets import interpreter as pyfile
from targets.base import KernelRef

log = logging.getLogger(__name__)

DEFAULT_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
_module_counter = itertools.count()


@dataclass(frozen=True)
class OpSpec:
    """One op the porter can port: its meaning, its inputs, and optionally a starting kernel.

    Attributes:
        name: short op name, e.g. "rmsnorm".
        path: the file it came from (None for a spec built in code).
        reference: plain PyTorch function of the inputs; functional (a KernelBench Model's
            parameters are lifted to trailing inputs).
        make_inputs: ``make_inputs(shape, dtype, device, generator) -> tuple`` of inputs.
        shapes: real, GPU-sized shapes (what timing uses).
        interpret_shapes: reduced, structure-preserving shapes for the CPU interpreter tier.
        smoke_shape: one small shape for the smoke stage.
        dtypes: dtypes the op is claimed for.
        triton_kernel: an existing kernel to start from, or None.
        tunables: that kernel's tunable parameters, name -> candidate values.
        triton_launcher: the existing kernel's launcher, ``launcher(*inputs, out=out)``.
        triton_constexprs: ``(shape, dtype) -> dict`` of the existing kernel's constexpr values
            (plus launch knobs num_warps/num_stages) as its launcher picks them; None: only
            the fixed constexprs in `tunables`.
        source_kind: "spec" or "kernelbench".
        bytes_moved: bytes that must move, ``(inputs, outputs) -> int``; None: derived.
        flops: FLOPs that must be done, ``(inputs, outputs) -> int``; None: memory-bound.
        description: one paragraph for reports.
        odd_shapes: odd-size shapes for the judge (empty: the judge's defaults).
        adversarial: extra numerics cases, or None.
        shape_names: what each entry of a shape means, e.g. ("batch_size", "dim").
        size_note: how a shape relates to the original sizes (KernelBench), see `describe_shape`.
    """

    name: str
    path: Path | None
    reference: Callable[..., Any]
    make_inputs: InputMaker
    shapes: tuple[Shape, ...]
    interpret_shapes: tuple[Shape, ...]
    smoke_shape: Shape
    dtypes: tuple[torch.dtype, ...] = DEFAULT_DTYPES
    triton_kernel: KernelRef | None = None
    tunables: dict[str, Any] = field(default_factory=dict)
    triton_launcher: Callable[..., Any] | None = None
    triton_constexprs: Callable[..., dict[str, Any]] | None = None
    source_kind: Literal["spec", "kernelbench"] = "spec"
    bytes_moved: CostFn | None = None
    flops: CostFn | None = None
    description: str = ""
    odd_shapes: tuple[Shape, ...] = ()
    adversarial: AdversarialMaker | None = None
    shape_names: tuple[str, ...] = ()
    size_note: Callable[[Shape], str] | None = None

    def problem(
        self,
        *,
        interpret: bool = False,
        dtypes: Sequence[torch.dtype] | None = None,
        shapes: Sequence[Shape] | None = None,
    ) -> Problem:
        """What the judge needs to check this op.

        Args:
            interpret: True for the CPU interpreter tier (the judge then sweeps
                `interpret_shapes`, passed as ``extra["interpret_shapes"]``).
            dtypes: restrict to these dtypes (default: the spec's).
            shapes: explicit sweep shapes (default: `interpret_shapes` or `shapes`).

        Returns:
            A `harness.problem.Problem`.
        """
        # The judge sweeps `sweep_shapes` natively and `extra["interpret_shapes"]` under the
        # interpreter; `interpret` only picks the smoke shape's size.
        sweep = tuple(shapes) if shapes is not None else self.shapes
        smoke = self.smoke_shape if (interpret or shapes is None) else sweep[0]
        extra: dict[str, Any] = {
            "source_kind": self.source_kind,
            "spec_path": str(self.path),
            "interpret_shapes": tuple(shapes) if shapes is not None else self.interpret_shapes,
        }
        if self.shape_names:
            extra["shape_names"] = self.shape_names
        if self.source_kind == "kernelbench" and self.odd_shapes:
            # A KernelBench shape is the file's size globals, not a tensor's dims: shrinking it
            # dim by dim would untie sizes the file ties (a bias of (out_features,)); the
            # ingestion already sized these for the interpreter.
            extra["interpret_odd_shapes"] = self.odd_shapes
        return Problem(
            name=self.name,
            reference=self.reference,
            make_inputs=self.make_inputs,
            smoke_shape=smoke,
            sweep_shapes=sweep,
            odd_shapes=self.odd_shapes,
            dtypes=tuple(dtypes) if dtypes is not None else self.dtypes,
            adversarial=self.adversarial,
            bytes_moved=self.bytes_moved,
            flops=self.flops,
            extra=extra,
        )

    def describe_shape(self, shape: Shape) -> str:
        """Human text for a shape, e.g. "batch_size=16 (was 4096), dim=1024 (was 393216)"."""
        if self.size_note is not None:
            return self.size_note(shape)
        if self.shape_names and len(self.shape_names) == len(shape):
            return ", ".join(f"{n}={v}" for n, v in zip(self.shape_names, shape, strict=True))
        return "x".join(str(d) for d in shape)


def import_file(p: Path, *, source: str | None = None, tag: str = "spec") -> ModuleType:
    """Import a Python file under a fresh module name, turning failures into `SpecError`.

    A fresh name each time, so a kernel file imported under TRITON_INTERPRET=1 and again
    without it gives two independent modules (the decorator decides at import time).

    Args:
        p: the file.
        source: exec this text instead of the file's (used to override KernelBench sizes);
            line numbers still refer to the file.
        tag: part of the module name, for logs.

    Raises:
        SpecError: naming the file and the line where the import failed.
    """
    mod_name = f"_porter_{tag}_{p.stem.replace('-', '_')}_{next(_module_counter)}"
    # Registered so dataclasses/pickling inside the module can find it; the spec's own folder
    # is put on sys.path so `from kernel import ...` beside the spec works.
    try:
        module = pyfile.import_file(p, mod_name, own_folder=True, source=source)
    except SyntaxError as exc:
        raise SpecError(p, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    except ImportError as exc:
        if not p.is_file() or str(exc).endswith("cannot be imported as a Python module"):
            raise SpecError(p, "is not an importable Python file") from None
        raise SpecError(p, f"import failed{line_in(exc, p)}: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any import failure becomes one clear line
        raise SpecError(p, f"import failed{line_in(exc, p)}: {type(exc).__name__}: {exc}") from None
    return module


def line_in(exc: BaseException, p: Path) -> str:
    """" at line N" for the deepest traceback frame inside file `p`, or ""."""
    line = None
    tb = exc.__traceback__
    target = str(p.resolve())
    while tb is not None:
        if str(Path(tb.tb_frame.f_code.co_filename).resolve()) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" at line {line}" if line is not None else ""


def default_interpret_shapes(shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    """Reduced shapes for the interpreter when a spec gives none.

    Keeps the rank and whether a size is a power of two: leading dims are capped at 7 rows /
    3 batches and the last dim at 1000 (or 1024 when the original is a power of two).
    """
    out: list[Shape] = []
    for s in shapes:
        last_cap = 1024 if (s[-1] & (s[-1] - 1)) == 0 else 1000
        lead = tuple(min(d, 7 if i == len(s) - 2 else 3) for i, d in enumerate(s[:-1]))
        reduced = (*lead, min(s[-1], last_cap))
        if reduced not in out:
            out.append(reduced)
    return tuple(out)


def validate(spec: OpSpec) -> None:
    """Call make_inputs once on the smoke shape, bind against the reference, run the reference.

    Raises:
        SpecError: naming the file and the mismatch (how many inputs vs which parameters).
    """
    p = spec.path if spec.path is not None else f"<{spec.name}>"
    gen = torch.Generator(device="cpu").manual_seed(0)
    try:
        inputs = spec.make_inputs(spec.smoke_shape, torch.float32, torch.device("cpu"), gen)
    except Exception as exc:  # noqa: BLE001 - user code; report it in one line
        raise SpecError(
            p,
            f"make_inputs{spec.smoke_shape} raised {type(exc).__name__}: {exc}"
            f"{line_of(exc, spec.path)}",
        ) from None
    if not isinstance(inputs, (tuple, list)):
        raise SpecError(
            p, f"make_inputs must return a tuple of inputs, got {type(inputs).__name__}")
    try:
        sig = inspect.signature(spec.reference)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        try:
            sig.bind(*inputs)
        except TypeError as exc:
            params = ", ".join(sig.parameters)
            raise SpecError(
                p,
                f"make_inputs returns {len(inputs)} input(s) but reference({params}) "
                f"does not accept them: {exc}",
                "make_inputs must return exactly the reference's positional arguments, in order",
            ) from None
    try:
        with torch.no_grad():
            spec.reference(*inputs)
    except Exception as exc:  # noqa: BLE001
        raise SpecError(
            p,
            f"reference failed on the smoke shape {spec.smoke_shape}: {type(exc).__name__}: {exc}"
            f"{line_of(exc, spec.path)}",
        ) from None


def line_of(exc: BaseException, path: Path | None) -> str:
    return "" if path is None else line_in(exc, path)
