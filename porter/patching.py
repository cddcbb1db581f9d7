"""Swap a model's fused groups for the packs' kernels, as torch.library custom ops.

    result = porter.patch(model, "packs/", example_inputs=inputs)
    print(result.report())          # each replacement (or why not), and the output check
    y = result.model(*inputs)       # also works under torch.compile: one graph, no breaks

The convention of Liger-Kernel's `apply_liger_kernel_to_*` (swap the model's pieces for faster
kernels, keep its parameters and its interface), done on the model's torch.fx graph: the model is
traced (`porter.model.graph`), cut into the same fused groups `porter profile` ranks, and every
group whose pack (`<packs>/<group pack name>/`, written by `porter port-profile`) is there is
replaced by one call of the pack's kernel registered as a `torch.library` custom op. The original
model is not modified; `result.model` is a `torch.fx.GraphModule` sharing its parameters.

Two rules keep a patch honest:
- **the output check**: the patched model's output is compared with the unpatched model's on the
  example inputs within the harness's tolerance for the output dtype (`harness.tolerance`);
  `check=True` (the default) raises `PatchCheckError` when it fails.
- **never lose to torch.compile**: a custom op is opaque to Inductor, so a replacement is kept
  only when the pack's kernel is faster than what torch.compile makes of the same group's code
  (both timed on the GPU, interleaved, with the LLC flushed: `harness.timing.compare`); a slower
  one is declined and reported. On a CPU nothing can be timed: every replacement is made and the
  report says the comparison could not be judged.
"""

from __future__ import annotations

import logging
import operator
import os
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import torch

from porter.errors import PorterError
from porter.model.groups import Group
from porter.model.groups import find_groups
from porter.model.rewrite import rewrite_groups

log = logging.getLogger(__name__)


# torch.library namespace of the custom ops registered here (groups with several outputs);
# single-output groups use the loader's `register_custom_op` (torch.ops.kernel_porter.<op>).
MULTI_OUTPUT_NAMESPACE = "kernel_porter_groups"


class PatchError(PorterError):
    """The model or the packs cannot be used for a patch; the message says why."""


class PatchCheckError(PatchError):
    """The patched model's output differs from the unpatched model's beyond the tolerance."""


@dataclass
class Replacement:
    """One group signature's fate: replaced at `places` places, declined, or no pack."""

    pack_name: str
    label: str
    places: int
    status: str  # "replaced" | "declined" | "no pack" | "fell back"
    reason: str = ""
    compiled_ms: float | None = None  # torch.compile of the group's code (GPU only)
    ours_ms: float | None = None  # the pack's kernel as a custom op (GPU only)
    modules: list[str] = field(default_factory=list)  # in-place: the modules it went into
    ran: dict[str, str] = field(default_factory=dict)  # input form -> what ran (the loader's)


@dataclass
class OutputCheck:
    passed: bool
    max_abs_err: float
    tolerance: str


@dataclass
class UntouchedCheck:
    """Device time per forward of the kernels the patch does not replace, before and after."""

    before_us: float
    after_us: float
    limit: float = 1.02

    @property
    def passed(self) -> bool:
        return self.after_us <= self.before_us * self.limit

    def describe(self) -> str:
        return (f"what the patch does not replace: {self.before_us:.1f} us of kernels per "
                f"forward before, {self.after_us:.1f} us after "
                f"({self.after_us / self.before_us:.3f}x; limit {self.limit:.2f}x)")


@dataclass
class PatchResult:
    """The patched model and what was done to it."""

    model: torch.nn.Module
    replacements: list[Replacement] = field(default_factory=list)
    check: OutputCheck | None = None
    packs: dict[str, Any] = field(default_factory=dict)  # pack name -> the loaded PackedOp
    ops: dict[str, Any] = field(default_factory=dict)  # pack name -> its custom op (OpOverload)
    untouched: UntouchedCheck | None = None  # in-place on a GPU
    patched: list[Any] = field(default_factory=list)  # in-place: inplace.PatchedModule each

    def unpatch(self) -> None:
        """In-place: give every patched module its own forward back."""
        from porter.model.inplace import restore

        restore(self.patched)
        self.patched = []

    @property
    def replaced(self) -> list[Replacement]:
        return [r for r in self.replacements if r.status == "replaced"]

    def report(self) -> str:
        """One line per group signature, then the output check."""
        lines = []
        for r in self.replacements:
            t = ""
            if r.ours_ms is not None and r.compiled_ms is not None:
                t = (f" (ours {r.ours_ms * 1e3:.1f} us vs torch.compile "
                     f"{r.compiled_ms * 1e3:.1f} us)")
            lines.append(f"{r.status:9s} {r.pack_name} x{r.places}{t}: {r.reason}")
            if r.modules:
                more = f" (+{len(r.modules) - 3} more)" if len(r.modules) > 3 else ""
                lines.append(f"          in {', '.join(r.modules[:3])}{more}")
            for form, what in r.ran.items():
                lines.append(f"          {form}: {what}")
        if self.untouched is not None:
            lines.append(("" if self.untouched.passed else "DECLINED: ")
                         + self.untouched.describe())
        if self.check is not None:
            verdict = "matches" if self.check.passed else "DIFFERS from"
            lines.append(f"output check: the patched model {verdict} the unpatched one "
                         f"(max abs error {self.check.max_abs_err:.3g}; {self.check.tolerance})")
        return "\n".join(lines)


def _pack_dirs(packs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> dict[str, Path]:
    """Pack name -> folder, from a packs folder or a list of pack folders."""
    if isinstance(packs, (str, os.PathLike)):
        root = Path(packs)
        if (root / "manifest.yaml").is_file():
            return {root.name: root}
        if not root.is_dir():
            raise PatchError(f"{root}: no such packs folder (run `porter port-profile` first)")
        return {p.name: p for p in sorted(root.iterdir()) if (p / "manifest.yaml").is_file()}
    out = {}
    for p in map(Path, packs):
        if not (p / "manifest.yaml").is_file():
            raise PatchError(f"{p}: not a pack (no manifest.yaml)")
        out[p.name] = p
    return out


def group_function(code: str) -> Any:
    """The `reference(a0, ...)` function of a group's standalone code."""
    ns: dict[str, Any] = {"torch": torch, "operator": operator, "device": torch.device}
    exec(compile(code, "<porter group>", "exec"), ns)  # noqa: S102 - code the tracer wrote
    return ns["reference"]


def _custom_op(packed: Any, n_in: int, n_out: int) -> Any:
    """The pack's kernel as a torch.library custom op taking n_in tensors, giving n_out."""
    if n_out == 1:
        return _overload(packed.register_custom_op())
    # The loader's registration returns one tensor; a group with several outputs (residual add +
    # RMSNorm gives the sum and the norm) needs a tuple, so it is registered here the same way,
    # in a namespace of its own (the loader's is its private business).
    name, k = packed.op, 1
    while hasattr(getattr(torch.ops, MULTI_OUTPUT_NAMESPACE), name):
        k += 1
        name = f"{packed.op}_{k}"
    args = ", ".join(f"Tensor a{i}" for i in range(n_in))
    rets = ", ".join("Tensor" for _ in range(n_out))
    lib_name = f"{MULTI_OUTPUT_NAMESPACE}::{name}"

    def impl(*a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(packed(*a))

    def fake(*a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(packed.reference(*a))

    op = torch.library.custom_op(lib_name, impl, mutates_args=(), schema=f"({args}) -> ({rets})")
    op.register_fake(fake)
    return _overload(op)


def _overload(op: Any) -> Any:
    """The custom op's OpOverload (`torch.ops.<namespace>.<name>.default`): what fx graphs and
    torch.compile call."""
    ns, name = op._qualname.split("::")
    return getattr(getattr(torch.ops, ns), name).default


def _judge_against_compile(g: Group, op: Any, hw: Any) -> tuple[float, float]:
    """(ours ms, torch.compile ms) for one group on the GPU, interleaved with flushed LLC."""
    from harness import timing

    ref = torch.compile(group_function(g.code))
    shapes = g.input_shapes()
    dtypes = [i.meta["tensor_meta"].dtype for i in g.inputs]
    dev = torch.device("cuda")

    def make_args() -> tuple[torch.Tensor, ...]:
        return tuple(torch.randn(*s, device=dev).to(d) for s, d in zip(shapes, dtypes, strict=True))

    cmp_ = timing.compare({"ours": op, "compiled": ref}, make_args, hw=hw, reps=30, warmup=5)
    return cmp_.timings["ours"].median_ms, cmp_.timings["compiled"].median_ms


def _with_pack(g: Group, dirs: dict[str, Path]) -> Group:
    """A group with a Linear absorbed is patched whole when its pack is there, else its
    elementwise part alone (the profile may have been made either way)."""
    if g.base is not None and g.pack_name not in dirs and g.base.pack_name in dirs:
        g.base.index = g.index
        return g.base
    return g


def _kept(rep: Replacement, g: Group, op: Any, *, judge: bool, on_gpu: bool, hw: Any) -> bool:
    """Judge the replacement against torch.compile where asked (`_judged`), else say why not;
    True (and `rep` marked replaced) when it is kept."""
    if judge:
        if not _judged(rep, *_judge_against_compile(g, op, hw)):
            return False
    else:
        rep.reason = ("not judged against torch.compile: nothing can be timed on a CPU"
                      if not on_gpu else "not judged against torch.compile (judge=False)")
    rep.status = "replaced"
    return True


def _judged(rep: Replacement, ours_ms: float, compiled_ms: float) -> bool:
    """Record the torch.compile comparison on `rep`; True when the replacement is kept."""
    rep.ours_ms, rep.compiled_ms = ours_ms, compiled_ms
    if ours_ms > compiled_ms:
        rep.status = "declined"
        rep.reason = ("slower than torch.compile of the same group: a custom op is opaque to "
                      "Inductor, so the model keeps its own code here")
        return False
    rep.reason = f"{compiled_ms / ours_ms:.2f}x faster than torch.compile of the same group"
    return True


def patch(model: torch.nn.Module,
          packs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
          example_inputs: Sequence[Any], check: bool = True, judge: bool | None = None,
          source: dict[str, Any] | None = None, hw_name: str | None = None,
          inplace: bool = False) -> PatchResult:
    """Replace the model's fused groups that have a pack with the pack's kernel.

    Args:
        model: the model (not modified unless `inplace`).
        packs: a packs folder (one pack per group, as `porter port-profile` writes) or a list
            of pack folders.
        example_inputs: inputs to trace with and to check the output on.
        check: raise `PatchCheckError` when the patched output differs beyond the tolerance.
        judge: time each replacement against torch.compile of the same group and decline the
            slower; default: on a GPU (a CPU cannot judge, and says so).
        source: the model's source record from `porter.model.load` (a Hugging Face model
            is traced with transformers' tracer).
        hw_name: hardware model for the timing's flush size (default: the detected device).
        inplace: patch the model itself, module by module, as Liger-Kernel's
            `apply_liger_kernel_to_*` do (`porter.model.inplace`): each module whose groups
            have packs gets a new `forward`; attention, caches and `generate()` stay the model's
            own. The packs are those `porter profile --in-place` names. On a GPU the kernels the
            patch does not replace are profiled before and after; more than 2% slower declines
            the whole patch. A failed output check (check=True) leaves the model unpatched.

    Returns:
        A `PatchResult` (`.model`, `.replacements`, `.check`, `.report()`).

    Raises:
        PatchError: no such packs folder, a model torch.fx cannot trace.
        PatchCheckError: the output check failed (with check=True).
    """
    from porter.model.graph import ModelTraceError
    from porter.model.load import trace_any
    from porter.packs.loader import load_pack

    dirs = _pack_dirs(packs)
    if inplace:
        return _patch_modules(model, dirs, example_inputs, check=check, judge=judge,
                              hw_name=hw_name)
    try:
        traced = trace_any(model, example_inputs, source or {})
    except ModelTraceError as exc:
        raise PatchError(str(exc)) from None
    on_gpu, judge, hw = _judge_setting(example_inputs, judge, hw_name)

    groups = []
    for g in find_groups(traced, matmul_epilogues=True):
        if g.kind == "fused":
            groups.append(_with_pack(g, dirs))
    by_sig: dict[str, list[Group]] = {}
    for g in groups:
        by_sig.setdefault(g.signature, []).append(g)
    chosen: dict[int, Any] = {}  # group index -> custom op
    result_reps: list[Replacement] = []
    loaded: dict[str, Any] = {}
    packed_ops: dict[str, Any] = {}
    for gs in by_sig.values():
        g0 = gs[0]
        rep = Replacement(g0.pack_name, g0.label, len(gs), "no pack",
                          f"no pack named {g0.pack_name} in the packs given")
        result_reps.append(rep)
        if g0.pack_name not in dirs:
            continue
        if g0.pack_name not in loaded:
            packed = load_pack(dirs[g0.pack_name])
            packed_ops[g0.pack_name] = packed
            loaded[g0.pack_name] = _custom_op(packed, len(g0.inputs), len(g0.outputs))
        op = loaded[g0.pack_name]
        if not _kept(rep, g0, op, judge=judge, on_gpu=on_gpu, hw=hw):
            continue
        for g in gs:
            chosen[g.index] = op
    gm = rewrite_groups(traced.module, [g for g in groups if g.index in chosen], chosen)
    result = PatchResult(gm, result_reps, packs=packed_ops, ops=loaded)
    for r in result.replacements:
        log.info("patch: %s %s x%d: %s", r.status, r.pack_name, r.places, r.reason)
    if chosen:
        result.check = _check(model, gm, example_inputs)
        if check and not result.check.passed:
            raise PatchCheckError(f"the patched model's output differs from the unpatched "
                                  f"model's: max abs error {result.check.max_abs_err:.3g} "
                                  f"({result.check.tolerance})")
    return result


def _judge_setting(example_inputs: Sequence[Any], judge: bool | None,
                   hw_name: str | None) -> tuple[bool, bool, Any]:
    """(on a GPU, judge against torch.compile, the hardware model for the timing)."""
    import hwmodels

    first = next((t for t in example_inputs if isinstance(t, torch.Tensor)), None)
    on_gpu = first is not None and first.device.type == "cuda"
    judge = on_gpu if judge is None else judge
    if judge and not on_gpu:
        raise PatchError("judging against torch.compile needs the model on a GPU")
    hw = None
    if judge:
        det = hwmodels.detect()
        hw = hwmodels.get(hw_name) if hw_name else det.model
        if hw is None:
            raise PatchError(f"no hardware model for this GPU ({det.reason}); pass hw_name")
    return on_gpu, judge, hw


def _patch_modules(model: torch.nn.Module, dirs: dict[str, Path], example_inputs: Sequence[Any],
                   *, check: bool, judge: bool | None, hw_name: str | None) -> PatchResult:
    """`patch(..., inplace=True)`: swap the forward of each module whose groups have packs
    (porter.model.inplace); the model stays itself (generate(), caches, attention)."""
    from porter.model import inplace
    from porter.packs.loader import load_pack

    on_gpu, judge, hw = _judge_setting(example_inputs, judge, hw_name)
    tms = [t for t in inplace.traced_modules(model, example_inputs) if t.traced is not None]
    by_sig: dict[str, list[tuple[inplace.TracedModule, Group]]] = {}
    for tm in tms:
        for g in tm.groups:
            if g.kind == "fused":
                g = _with_pack(g, dirs)
                by_sig.setdefault(g.signature, []).append((tm, g))
    result = PatchResult(model)
    chosen: dict[int, dict[int, Any]] = {}  # id(traced module) -> group index -> callable
    for pairs in by_sig.values():
        g0 = pairs[0][1]
        rep = Replacement(g0.pack_name, g0.label, len(pairs), "no pack",
                          f"no pack named {g0.pack_name} in the packs given",
                          modules=[tm.call.name for tm, _ in pairs])
        result.replacements.append(rep)
        if g0.pack_name not in dirs:
            continue
        if g0.pack_name not in result.packs:
            packed = load_pack(dirs[g0.pack_name])
            result.packs[g0.pack_name] = packed
            result.ops[g0.pack_name] = inplace.autograd_op(packed, len(g0.inputs),
                                                           len(g0.outputs))
        packed, op = result.packs[g0.pack_name], result.ops[g0.pack_name]
        if not _kept(rep, g0, op, judge=judge, on_gpu=on_gpu, hw=hw):
            continue
        call = inplace.pack_call(packed, op)
        for tm, g in pairs:
            chosen.setdefault(id(tm), {})[g.index] = call
    if not chosen:
        return result
    want, ref = _unpatched_outputs(model, example_inputs)
    touched = [tm.call.module for tm in tms if id(tm) in chosen]
    before = inplace.untouched_device_us(model, example_inputs, touched)[0] if on_gpu else None
    result.patched = [inplace.swap_forward(tm, chosen[id(tm)]) for tm in tms if id(tm) in chosen]
    for packed in result.packs.values():
        packed.outcomes.clear()
    try:
        with torch.no_grad():
            got = _flat(model(*example_inputs))
        result.check = _compare(want, got, ref)
        if before is not None:
            after = inplace.untouched_device_us(model, example_inputs, touched)[0]
            result.untouched = UntouchedCheck(before, after)
    except BaseException:
        result.unpatch()
        raise
    for r in result.replacements:
        if r.status == "replaced":
            r.ran = dict(result.packs[r.pack_name].outcomes)
            if r.ran and all(v.startswith("reference") for v in r.ran.values()):
                r.status = "fell back"
                r.reason = "the pack ran its reference op at every input form (below), not a kernel"
        log.info("patch: %s %s x%d: %s", r.status, r.pack_name, r.places, r.reason)
    if result.untouched is not None and not result.untouched.passed:
        result.unpatch()
        for r in result.replacements:
            if r.status == "replaced":
                r.status, r.reason = "declined", result.untouched.describe()
        return result
    if not result.check.passed:
        if check:
            where = _diverging_modules([tm for tm in tms if id(tm) in chosen], chosen)
            result.unpatch()
            raise PatchCheckError(f"the patched model's output differs from the unpatched "
                                  f"model's: max abs error {result.check.max_abs_err:.3g} "
                                  f"({result.check.tolerance}); {where}; the model is left "
                                  "unpatched")
    return result


def _diverging_modules(tms: Sequence[Any], chosen: dict[int, dict[int, Any]]) -> str:
    """Which patched modules differ from their own code on the inputs they had in the unpatched
    forward (each checked as the whole model is: `_compare`, with an fp32 copy of the module as
    the reference for 16-bit ones): the first place to look when the model's output is off."""
    import copy

    bad = []
    with torch.no_grad():
        for tm in tms:
            mod, args = tm.call.module, tm.call.args
            got = _flat(mod(*args))
            want = _flat(type(mod).forward(mod, *args))
            ref: list[torch.Tensor] = []
            if any(w.dtype in (torch.float16, torch.bfloat16) for w in want):
                wide = copy.deepcopy(mod).float()
                wide.__dict__.pop("forward", None)
                ref = _flat(wide(*[a.float() if a.is_floating_point() else a for a in args]))
            c = _compare(want, got, ref)
            if not c.passed:
                packs = ", ".join(sorted({g.pack_name for g in tm.groups
                                          if g.index in chosen[id(tm)]}))
                bad.append(f"{tm.call.name} with {packs} (max abs error {c.max_abs_err:.3g}; "
                           f"{c.tolerance})")
    if not bad:
        return (f"each of the {len(tms)} patched modules matches its own code on its inputs (the "
                "difference builds up across them)")
    return f"{len(bad)} of {len(tms)} patched modules differ from their own code: " + ", ".join(
        bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "")


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _flat(o)]
    if hasattr(out, "to_tuple"):
        return _flat(out.to_tuple())
    return []


def _check(model: torch.nn.Module, patched: torch.nn.Module,
           inputs: Sequence[Any]) -> OutputCheck:
    """The patched model's output against the unpatched model's, by the harness's rules
    (`_compare`)."""
    want, ref = _unpatched_outputs(model, inputs)
    with torch.no_grad():
        got = _flat(patched(*inputs))
    return _compare(want, got, ref)


def _unpatched_outputs(model: torch.nn.Module, inputs: Sequence[Any],
                       ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The model's outputs, and for 16-bit outputs those of an fp32 copy of it (else [])."""
    import copy

    with torch.no_grad():
        want = _flat(model(*inputs))
        ref: list[torch.Tensor] = []
        if any(w.dtype in (torch.float16, torch.bfloat16) for w in want):
            up = copy.deepcopy(model).float()
            ref = _flat(up(*[t.float() if isinstance(t, torch.Tensor) and t.is_floating_point()
                             else t for t in inputs]))
            del up
    return want, ref


def _compare(want: list[torch.Tensor], got: list[torch.Tensor],
             ref: list[torch.Tensor]) -> OutputCheck:
    """fp32 outputs: within the harness's fp32 tolerance of the unpatched model. 16-bit outputs:
    both models are compared with an fp32 run of the unpatched model (`ref`); the
    patched output must be within the harness's tolerance of it everywhere, or its largest
    error at most NATIVE_ERROR_FACTOR times the unpatched model's own largest error (the
    judge's rule for ill-conditioned values: a 16-bit model is only as exact as its roundings,
    and after a few matmuls two equally good 16-bit runs differ by a few ulps).
    """
    from harness.check import NATIVE_ERROR_FACTOR
    from harness.tolerance import tolerance

    low = bool(ref)
    worst, ok = 0.0, len(want) == len(got)
    texts: list[str] = []
    for k, (w, g) in enumerate(zip(want, got, strict=False)):  # lengths: checked
        tol = tolerance(w.dtype)
        if g.shape != w.shape:
            ok = False
            continue
        diff = (g.double() - w.double()).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        if low and k < len(ref) and w.dtype in (torch.float16, torch.bfloat16):
            r = ref[k].double()
            ours = (g.double() - r).abs()
            eager = (w.double() - r).abs()
            within = bool((ours <= tol.atol + tol.rtol * r.abs()).all())
            ok = ok and (within or float(ours.max()) <= NATIVE_ERROR_FACTOR * float(eager.max()))
            texts.append(f"{tol.describe()} of an fp32 run of the model, or a largest error "
                         f"<= {NATIVE_ERROR_FACTOR:g}x the unpatched model's own "
                         f"({float(ours.max()):.3g} vs {float(eager.max()):.3g})")
        else:
            ok = ok and bool((diff <= tol.atol + tol.rtol * w.double().abs()).all())
            texts.append(tol.describe())
    return OutputCheck(ok, worst, "; ".join(dict.fromkeys(texts)))
