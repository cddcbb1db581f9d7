"""Patch a model in place, module by module, the way Liger-Kernel's `apply_liger_kernel_to_*` do.

    result = porter.patch(model, "packs/", example_inputs=(ids,), inplace=True)
    print(result.report())
    model.generate(ids, max_new_tokens=32)      # the model's own generate(), caches, attention

Which modules: every submodule the model calls with tensors alone (no keyword arguments, no
caches, no masks) whose children are one-kernel modules (Linear, activations) is traced on its
own with torch.fx at the call the example inputs make: an RMSNorm, an MLP, a q/k norm inside an
attention block. Its fused groups (`porter.model.groups`) are named as `porter profile
--in-place` names them; each group whose pack is given is replaced by one call of the pack's
kernel, and the module's `forward` becomes that rewritten graph's, over the module's own
parameters. Nothing else changes: the attention, the caches, `generate()`, device placement and
dtype stay the model's own code. No architecture is listed by hand: Llama's, Qwen2's, Mistral's
and Gemma's norms and MLPs are found the same way, and so is any other model's.

A pack call is made three ways (`PackCall`): in inference, straight to the loaded pack (its
bound launch: no dispatcher in front); where autograd records (training) or torch.compile
traces, through a torch.library custom op whose backward is the reference's own (recomputed
from the saved inputs), so gradients are the unpatched model's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from typing import Any

import torch
from torch import nn

from porter.model.graph import ModelTraceError
from porter.model.graph import TracedModel
from porter.model.graph import op_name
from porter.model.graph import trace_model
from porter.model.groups import Group
from porter.model.groups import find_groups
from porter.model.rewrite import rewrite_groups

log = logging.getLogger(__name__)

# torch.library namespace of the in-place patch's custom ops (with autograd).
NAMESPACE = "kernel_porter_modules"
# Children a patchable module may have: modules that are one kernel or one activation. A child
# of any other kind (attention, a decoder layer) means the module's forward does more than this
# patch should take over.
_LEAF_MODULES = (nn.Linear, nn.SiLU, nn.GELU, nn.ReLU, nn.Tanh, nn.Sigmoid, nn.Identity,
                 nn.Dropout)
# Ops whose behaviour depends on the training flag at trace time (fx freezes it).
_MODE_OPS = frozenset({"dropout", "alpha_dropout", "feature_alpha_dropout", "batch_norm"})


@dataclass
class ModuleCall:
    """A submodule and the (tensor-only) arguments of its first call in a forward."""

    name: str
    module: nn.Module
    args: tuple[torch.Tensor, ...]


@dataclass
class TracedModule:
    """A patchable module traced on its own, with its fused groups; or why it is not."""

    call: ModuleCall
    traced: TracedModel | None = None
    groups: list[Group] = field(default_factory=list)
    why_not: str = ""


def _leaf_like(m: nn.Module) -> bool:
    if isinstance(m, _LEAF_MODULES):
        return True
    mod = type(m).__module__
    # transformers' activation classes (SiLUActivation, GELUTanh, ...): one function each
    return mod.startswith("transformers.activations") and not any(True for _ in m.children())


def module_calls(model: nn.Module, inputs: Sequence[Any]) -> list[ModuleCall]:
    """The model's submodules a patch can take over, each with its first call's arguments.

    One forward of `model(*inputs)` runs with a pre-hook on every submodule. Kept: modules called
    with tensors alone (no keyword arguments), none of whose descendants is more than a one-kernel
    module, and that are not themselves one kernel (a Linear stays cuBLAS's).
    """
    calls: dict[str, ModuleCall] = {}
    names = {id(m): n for n, m in model.named_modules() if n}
    handles = []

    def hook(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        name = names.get(id(mod))
        if name is None or name in calls or kwargs:
            return
        if args and all(isinstance(a, torch.Tensor) for a in args):
            calls[name] = ModuleCall(name, mod, tuple(args))

    for name, m in model.named_modules():
        if not name or _leaf_like(m) or not all(_leaf_like(c) for c in m.modules() if c is not m):
            continue
        handles.append(m.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return [calls[n] for n in names.values() if n in calls]


def trace_module(call: ModuleCall) -> TracedModule:
    """Trace one module at its call; its fused groups (matmul epilogues absorbed), or why not."""
    out = TracedModule(call)
    try:
        out.traced = trace_model(call.module, call.args)
    except ModelTraceError as exc:
        out.why_not = str(exc)
        return out
    gm = out.traced.module
    frozen = sorted({op_name(gm, n) for n in gm.graph.nodes if n.op == "call_function"
                     and op_name(gm, n) in _MODE_OPS})
    if frozen:
        out.why_not = (f"{', '.join(frozen)} in function form: the trace would freeze its "
                       "training flag")
        return out
    out.groups = find_groups(out.traced, matmul_epilogues=True)
    return out


def traced_modules(model: nn.Module, inputs: Sequence[Any]) -> list[TracedModule]:
    """`trace_module` of every `module_calls` entry."""
    return [trace_module(c) for c in module_calls(model, inputs)]


# -- calling a pack from a patched module ------------------------------------------------------
def autograd_op(packed: Any, n_in: int, n_out: int) -> Any:
    """The pack's kernel as a custom op (`kernel_porter_modules::<op>`) with the reference's own
    backward: the saved inputs are run through the reference again under autograd."""
    name, k = packed.op, 1
    while hasattr(getattr(torch.ops, NAMESPACE), name):
        k += 1
        name = f"{packed.op}_{k}"
    args = ", ".join(f"Tensor a{i}" for i in range(n_in))
    rets = "Tensor" if n_out == 1 else "(" + ", ".join("Tensor" for _ in range(n_out)) + ")"

    def impl(*a: torch.Tensor) -> Any:
        r = packed(*a)
        return r if n_out == 1 else tuple(r)

    def fake(*a: torch.Tensor) -> Any:
        r = packed.reference(*a)
        return r if n_out == 1 else tuple(r)

    op = torch.library.custom_op(f"{NAMESPACE}::{name}", impl, mutates_args=(),
                                 schema=f"({args}) -> {rets}")
    op.register_fake(fake)

    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs)

    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = ctx.saved_tensors
        with torch.enable_grad():
            xs = [t.detach().requires_grad_(t.is_floating_point()) for t in saved]
            outs = packed.reference(*xs)
            outs = (outs,) if isinstance(outs, torch.Tensor) else tuple(outs)
            pairs = [(o, g) for o, g in zip(outs, grads, strict=True)
                     if g is not None and o.requires_grad]
            wrt = [x for x in xs if x.requires_grad]
            got = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs],
                                           allow_unused=True) if pairs else [None] * len(wrt))
        return tuple(next(got) if x.requires_grad else None for x in xs)

    op.register_autograd(backward, setup_context=setup_context)
    ns, nm = op._qualname.split("::")
    return getattr(getattr(torch.ops, ns), nm).default


def pack_call(packed: Any, op: Any) -> Callable[..., Any]:
    """What a patched module's graph calls for one group: the pack directly in inference (its
    bound launch), the custom op where autograd records or torch.compile traces."""
    def call(*a: torch.Tensor) -> Any:
        if torch.compiler.is_compiling() or (
                torch.is_grad_enabled() and any(t.requires_grad for t in a)):
            return op(*a)
        return packed(*a)

    call.__name__ = f"porter_{packed.op}"
    return call


@dataclass
class PatchedModule:
    """A module whose forward was swapped: what to restore."""

    name: str
    module: nn.Module
    forward: Any  # the instance's own `forward` attribute before, or None (the class's)
    packs: list[str]


def swap_forward(tm: TracedModule, ops: dict[int, Any]) -> PatchedModule:
    """Make `tm`'s module run its traced graph with the chosen groups replaced (`ops`: group
    index -> callable)."""

    assert tm.traced is not None
    chosen = [g for g in tm.groups if g.index in ops]
    gm = rewrite_groups(tm.traced.module, chosen, ops)
    mod = tm.call.module
    before = mod.__dict__.get("forward")
    mod.forward = gm.forward  # type: ignore[method-assign]
    return PatchedModule(tm.call.name, mod, before, sorted({g.pack_name for g in chosen}))


def restore(patched: Sequence[PatchedModule]) -> None:
    """Give each patched module its forward back."""
    for p in patched:
        if p.forward is None:
            p.module.__dict__.pop("forward", None)
        else:
            p.module.forward = p.forward  # type: ignore[method-assign]


# -- what the patch does not replace, before and after (GPU) ----------------------------------
_MARK = "porter::patched_module"


def untouched_device_us(model: nn.Module, inputs: Sequence[Any], modules: Sequence[nn.Module],
                        *, reps: int = 5) -> tuple[float, dict[str, float]]:
    """Device time per forward of every kernel launched outside `modules` (median of `reps`
    profiled forwards), and that time per op name: what a patch of `modules` must not change.

    Each of `modules` runs inside a profiler range while profiled; a CPU op's own device time
    (its kernels') counts when no enclosing range is that mark.
    """
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    stack: list[Any] = []

    def enter(_m: nn.Module, _a: Any) -> None:
        rf = torch.profiler.record_function(_MARK)
        rf.__enter__()
        stack.append(rf)

    def leave(_m: nn.Module, _a: Any, _o: Any) -> None:
        stack.pop().__exit__(None, None, None)

    handles = [h for m in modules for h in (m.register_forward_pre_hook(enter),
                                            m.register_forward_hook(leave))]
    totals: list[float] = []
    by_op: dict[str, list[float]] = {}
    try:
        with torch.no_grad():
            for _ in range(2):
                model(*inputs)
            torch.cuda.synchronize()
            for _ in range(reps):
                with torch.profiler.profile(activities=acts) as prof:
                    model(*inputs)
                    torch.cuda.synchronize()
                total, ops = 0.0, {}
                for evt in prof.events():
                    if str(getattr(evt, "device_type", "")).endswith("CUDA") or evt.name == _MARK:
                        continue
                    us = float(getattr(evt, "self_device_time_total", 0.0) or 0.0)
                    if us <= 0:
                        continue
                    p, inside = evt.cpu_parent, False
                    while p is not None and not inside:
                        inside, p = p.name == _MARK, p.cpu_parent
                    if not inside:
                        total += us
                        ops[evt.name] = ops.get(evt.name, 0.0) + us
                totals.append(total)
                for k, v in ops.items():
                    by_op.setdefault(k, []).append(v)
    finally:
        for h in handles:
            h.remove()
    med = sorted(totals)[len(totals) // 2]
    return med, {k: sorted(v)[len(v) // 2] for k, v in by_op.items()}
